"""Behaviour probes: repeated random tokens and text windows, against the models' own output_attentions."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnscope.errors import InputError
from attnscope.heads.maps import MapModel
from attnscope.heads.probes import check_probes, random_windows, run_probes

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_gguf import VOCAB  # noqa: E402

transformers = pytest.importorskip("transformers")


def _tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    tok = Tokenizer(WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = WhitespaceSplit()
    return tok


def _family(name: str):
    """A tiny random model of one family (vocabulary of :data:`VOCAB`), eager attention."""
    common = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=128)
    torch.manual_seed(0)
    if name == "llama":
        cfg, cls = transformers.LlamaConfig(num_key_value_heads=2, **common), transformers.LlamaForCausalLM
    elif name == "qwen2":
        cfg, cls = transformers.Qwen2Config(num_key_value_heads=1, **common), transformers.Qwen2ForCausalLM
    elif name == "gemma3":
        cfg = transformers.Gemma3TextConfig(num_key_value_heads=1, head_dim=8, sliding_window=8, **common)
        cls = transformers.Gemma3ForCausalLM
    elif name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=len(VOCAB), n_embd=32, n_layer=2, n_head=4, n_positions=128)
        cls = transformers.GPT2LMHeadModel
    else:  # bert: a bidirectional encoder
        cfg, cls = transformers.BertConfig(**common), transformers.BertModel
    cfg._attn_implementation = "eager"
    model = cls(cfg).eval()
    with torch.no_grad():  # sharper than the 0.02 init, so heads differ and the test can fail
        for n, p in model.named_parameters():
            if any(k in n for k in ("q_proj", "k_proj", "query", "key", "c_attn")) and p.dim() == 2:
                p.normal_(0, 0.5)
    return model


def _direct(model, idx, half):
    """induction / previous_token / sink per (layer, head) straight from output_attentions."""
    with torch.no_grad():
        atts = model(idx, output_attentions=True).attentions
    out = {}
    i2 = torch.arange(half + 1, 2 * half + 1)  # the second copy
    i1 = torch.arange(1, 2 * half + 1)
    for layer, a in enumerate(atts):  # a [b, h, L, L]
        a = a.double()
        out[layer] = {
            "induction": a[:, :, i2, i2 - half + 1].mean((0, 2)).numpy(),
            "previous_token": a[:, :, i1, i1 - 1].mean((0, 2)).numpy(),
            "sink": a[:, :, :, 0].mean((0, 2)).numpy(),
        }
    return out


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3", "gpt2", "bert"])
def test_random_probe_equals_a_direct_computation(family):
    model = _family(family)
    mm = MapModel.from_hf(model, _tokenizer(), name=family)
    half, n = 9, 3
    df = run_probes(mm, probes="random", random_windows_n=n, random_length=half, seed=4)
    idx = random_windows(mm, n, half, seed=4)
    want = _direct(model, idx, half)
    assert df["probe"].eq("random").all() and df["length"].eq(2 * half + 1).all()
    assert len(df) == 2 * 4 and set(df["layer"]) == {0, 1}
    for layer, cols in want.items():
        sub = df[df["layer"] == layer].sort_values("head")
        for name, vals in cols.items():
            np.testing.assert_allclose(sub[name].to_numpy(), vals, rtol=1e-5, atol=1e-7, err_msg=f"{family} {name}")
    assert df["stack"].iloc[0] == ("encoder" if family == "bert" else "decoder")


def test_random_windows_repeat_distinct_ordinary_tokens():
    mm = MapModel.from_hf(_family("llama"), _tokenizer())
    idx = random_windows(mm, 4, 20, seed=0)
    assert idx.shape == (4, 41)
    assert (idx[:, 0] == VOCAB.index("<s>")).all()  # the BOS
    assert torch.equal(idx[:, 1:21], idx[:, 21:])
    for row in idx[:, 1:21]:
        assert len(set(row.tolist())) == 20 and min(row.tolist()) >= 3  # no specials, no repeats
    assert not torch.equal(idx[0], idx[1])
    assert torch.equal(idx, random_windows(mm, 4, 20, seed=0))  # seeded
    with pytest.raises(InputError, match="distinct ordinary tokens"):
        random_windows(mm, 1, 300)
    with pytest.raises(InputError, match="longer than the model's maximum 128"):
        random_windows(mm, 1, 64)
    with pytest.raises(InputError, match="probes must be random, text or both"):
        check_probes("wiki")


def _hand_set_model(n_heads: int = 4) -> MapModel:
    """A 2-layer model whose heads are set by hand: previous token, induction target, BOS sink, uniform.

    The induction head attends to the key after the latest earlier occurrence of the query's token
    (the BOS where there is none); layer 1 swaps heads 0 and 1 so the scores follow the heads.
    """
    def maps(idx: torch.Tensor) -> torch.Tensor:  # idx [b, L] -> [b, h, L, L]
        b, L = idx.shape
        A = torch.zeros(b, n_heads, L, L)
        i = torch.arange(L)
        A[:, 0, i[1:], i[1:] - 1] = 1.0
        A[:, 0, 0, 0] = 1.0
        for bb in range(b):
            for q in range(L):
                hits = [j for j in range(1, q + 1) if idx[bb, j - 1] == idx[bb, q] and j - 1 < q]
                A[bb, 1, q, hits[-1] if hits else 0] = 1.0
        A[:, 2, :, 0] = 1.0
        A[:, 3] = torch.tril(torch.ones(L, L)) / torch.arange(1, L + 1)[:, None]
        return A

    def forward(idx, on_layer):
        A = maps(idx)
        on_layer(0, A)
        on_layer(1, A[:, [1, 0, 2, 3]])

    from attnscope.training.tokenizers import HFTokenizer

    return MapModel(name="hand-set", kind="hf", n_layers=2, n_heads=n_heads, causal=True, max_len=None,
                    tokenizer=HFTokenizer(_tokenizer(), "words"), byte_level=False, _forward=forward)


def test_hand_set_heads_score_one_where_they_should_and_about_zero_elsewhere():
    df = run_probes(_hand_set_model(), probes="random", random_windows_n=3, random_length=30)
    df = df.set_index(["layer", "head"])
    for layer, (prev, ind) in ((0, (0, 1)), (1, (1, 0))):
        assert df.loc[(layer, prev), "previous_token"] == pytest.approx(1.0)
        assert df.loc[(layer, ind), "induction"] == pytest.approx(1.0)
        assert df.loc[(layer, 2), "sink"] == pytest.approx(1.0)
        assert df.loc[(layer, ind), "previous_token"] < 0.05  # an induction head is no previous-token head
        assert df.loc[(layer, prev), "induction"] == 0.0
        for h in (prev, ind):
            assert df.loc[(layer, h), "sink"] < 0.55  # the induction head sits on BOS only in the first copy
        assert df.loc[(layer, 2), "induction"] == 0.0 and df.loc[(layer, 2), "previous_token"] < 0.05
        assert df.loc[(layer, 3), "induction"] < 0.1 and df.loc[(layer, 3), "previous_token"] < 0.2


def test_text_probe_and_both(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(" ".join(VOCAB[3 + (k * 7) % 256] for k in range(4000)))
    df = run_probes(_hand_set_model(), probes="both", data=str(corpus), windows=2, length=40,
                    random_windows_n=2, random_length=10)
    assert list(df["probe"].unique()) == ["random", "text"]
    text = df[df["probe"] == "text"].set_index(["layer", "head"])
    assert text.loc[(0, 0), "previous_token"] == pytest.approx(1.0)
    assert text.loc[(0, 2), "sink"] == pytest.approx(1.0)
    assert text["length"].eq(40).all() and df[df["probe"] == "random"]["length"].eq(21).all()
    with pytest.raises(InputError, match="windows"):  # a corpus too short for the windows
        run_probes(_hand_set_model(), probes="text", data=str(corpus), windows=50, length=100)
