"""Maps of a transformers model already loaded in memory (MapModel.from_hf / extract(model, tokenizer=))."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from attnscope.errors import InputError
from attnscope.heads.maps import MapModel, extract, open_model

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def loaded(minilm_dir):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(minilm_dir))  # default (sdpa) attention, train mode below
    model.train()
    return model, AutoTokenizer.from_pretrained(str(minilm_dir))


def test_loaded_model_gives_the_same_table_as_its_directory(loaded, minilm_dir):
    model, tok = loaded
    impl = model.config._attn_implementation
    live = extract(model, tokenizer=tok, windows=2, length=32, batch_size=2)
    disk = extract(open_model(str(minilm_dir)), windows=2, length=32, batch_size=2)
    cols = [c for c in disk.metrics.columns if c != "model"]
    pd.testing.assert_frame_equal(live.metrics[cols], disk.metrics[cols], rtol=1e-4, atol=1e-6)
    assert live.info["n_layers"] == 6 and not live.info["causal"]
    # the user's model is left as it was: training flag and attention implementation
    assert model.training and model.config._attn_implementation == impl
    # the user's tokenizer is not reconfigured (attnscope turns padding off on its own copy)
    assert tok("hello world")["input_ids"][0] == tok.cls_token_id


def test_from_hf_accepts_a_tokenizer_json_path(loaded, minilm_dir):
    model, _ = loaded
    mm = MapModel.from_hf(model, minilm_dir / "tokenizer.json", name="minilm")
    got = {}
    idx = torch.randint(1000, 2000, (1, 12))
    mm.run(idx, lambda layer, p: got.__setitem__(layer, p))
    assert sorted(got) == list(range(6)) and got[0].shape == (1, 12, 12, 12)  # [b, h, i, j]
    torch.testing.assert_close(got[0].sum(-1), torch.ones(1, 12, 12))


def test_a_base_decoder_is_seen_as_causal(minilm_dir):
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40000, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    mm = MapModel.from_hf(LlamaModel(cfg), minilm_dir / "tokenizer.json")  # no LM head: causality from the maps
    assert mm.causal and mm.n_layers == 2 and mm.max_len == 64


def test_bad_inputs(loaded, minilm_dir):
    model, _ = loaded
    with pytest.raises(InputError, match="needs tokenizer="):
        extract(model)
    with pytest.raises(InputError, match="tokenizer must be a transformers fast tokenizer"):
        extract(model, tokenizer=object())
    with pytest.raises(InputError, match="tokenizer= is for a model loaded in memory"):
        extract(str(minilm_dir), tokenizer="x")
    with pytest.raises(InputError, match="expected a loaded transformers model"):
        MapModel.from_hf(torch.nn.Linear(2, 2), "bytes")
