"""Maps out of models: HF eager (MiniLM) streamed per layer, attnscope checkpoints via attn_callback."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnscope.errors import AttnscopeError
from attnscope.heads.maps import extract, make_windows, open_model
from attnscope.heads.metrics import window_metrics


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return open_model(str(minilm_dir))


def test_minilm_streams_the_same_maps_as_output_attentions(minilm, minilm_dir):
    from transformers import AutoModel

    assert minilm.streaming and minilm.n_layers == 6 and minilm.n_heads == 12 and not minilm.causal
    assert minilm.max_len == 512 and minilm.cls_id is not None
    idx = make_windows(minilm, "builtin", 2, 32)
    assert idx.shape == (2, 32) and (idx[:, 0] == minilm.cls_id).all() and (idx[:, -1] == minilm.sep_id).all()
    got: dict[int, torch.Tensor] = {}
    minilm.run(idx, lambda layer, p: got.__setitem__(layer, p.clone()))
    ref = AutoModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    with torch.no_grad():
        atts = ref(idx, output_attentions=True).attentions
    assert sorted(got) == list(range(6))
    for layer, a in enumerate(atts):
        torch.testing.assert_close(got[layer], a)


def test_extract_minilm_table(minilm):
    res = extract(minilm, data="builtin", windows=2, length=48, batch_size=2, js_rows=8, example_layers=(0,))
    df = res.metrics
    assert len(df) == 6 * 12 and set(df["layer"]) == set(range(6)) and (df["n_windows"] == 2).all()
    assert df["stack"].eq("encoder").all()
    for col in ("entropy", "sparsity", "distance", "entropy_norm", "sink_cls", "sink_sep", "dup_score"):
        assert df[col].notna().all(), col
    assert ((df["entropy_norm"] >= 0) & (df["entropy_norm"] <= 1 + 1e-6)).all()
    assert len(res.js) == 72 * 71 // 2 and (res.js["js"] >= 0).all() and (res.js["js"] <= np.log(2) + 1e-9).all()
    assert res.examples[0].shape == (12, 48, 48)


def test_window_longer_than_model_max(minilm):
    with pytest.raises(AttnscopeError, match="longer than the model's maximum"):
        extract(minilm, windows=1, length=513)


def _tiny_checkpoint(tmp_path, pattern=None):
    from attnscope.training.model import ModelConfig, Transformer, save_model

    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2, n_heads=8, d_model=32, d_ff=64, vocab_size=256, max_seq_len=64, causal=True,
                      norm="pre", dropout=0.0, attn_pattern=pattern)
    return save_model(Transformer(cfg), tmp_path / "ckpt", extra_config={"tokenizer": "bytes", "run": "tiny"})


def test_attnscope_checkpoint_metrics_match_direct_maps(tmp_path):
    ckpt = _tiny_checkpoint(tmp_path)
    model = open_model(str(ckpt))
    assert model.kind == "attnscope" and model.byte_level and model.causal and model.default_length() == 64
    res = extract(model, windows=3, length=64, batch_size=2)
    df = res.metrics
    assert len(df) == 16 and (df["model"] == "tiny").all() and df["stack"].eq("decoder").all()
    # the same numbers from the model's full return_attn output
    from attnscope.training.model import load_model

    net, _ = load_model(ckpt)
    idx = make_windows(model, "builtin", 3, 64)
    with torch.no_grad():
        _, maps = net(idx, return_attn=True)
    for layer, m in enumerate(maps):
        vals = window_metrics(m, causal=True, token_ids=idx)
        sub = df[df["layer"] == layer].sort_values("head")
        np.testing.assert_allclose(sub["entropy"], vals["entropy"].mean(0).numpy(), rtol=1e-6)
        np.testing.assert_allclose(sub["prev_mass"], vals["prev_mass"].mean(0).numpy(), rtol=1e-6)
    # a causal model never looks ahead
    assert (df["lookback"] >= -1e-9).all() and np.allclose(df["lookback"], df["distance"])


def test_sparse_checkpoint_maps_respect_pattern(tmp_path):
    ckpt = _tiny_checkpoint(tmp_path, pattern="byte-sparse-8h")
    df = extract(str(ckpt), windows=2, length=64).metrics
    # head 0 is local(8): it never looks back further than 8
    assert (df[df["head"] == 0]["lookback"] <= 8).all()


@pytest.mark.parametrize(
    "source, msg",
    [("/nonexistent/model/dir", "no such file or directory"), ("__file__", "not a file")],
)
def test_bad_sources(source, msg, tmp_path):
    if source == "__file__":
        p = tmp_path / "x.bin"
        p.write_bytes(b"x")
        source = str(p)
    with pytest.raises(AttnscopeError, match=msg):
        open_model(source)


def test_empty_corpus_is_one_line(tmp_path):
    ckpt = _tiny_checkpoint(tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(AttnscopeError) as info:
        extract(str(ckpt), data=str(empty), windows=2, length=32)
    assert "empty" in str(info.value) and "\n" not in str(info.value)
    small = tmp_path / "small.txt"
    small.write_text("tiny corpus " * 20)
    with pytest.raises(AttnscopeError, match="windows"):
        extract(str(ckpt), data=str(small), windows=5, length=64)


def test_model_without_attention_maps_is_one_line(tmp_path, minilm_dir):
    """A Mamba model (no attention at all) is refused with one clear line."""
    import shutil

    from transformers import MambaConfig, MambaModel

    cfg = MambaConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, state_size=4, intermediate_size=32,
                      conv_kernel=2, time_step_rank=2)
    MambaModel(cfg).save_pretrained(tmp_path / "mamba")
    shutil.copy(minilm_dir / "tokenizer.json", tmp_path / "mamba" / "tokenizer.json")
    with pytest.raises(AttnscopeError, match="cannot return attention maps") as info:
        open_model(str(tmp_path / "mamba"))
    assert "\n" not in str(info.value)


def test_hub_id_offline_is_one_line():
    with pytest.raises(AttnscopeError, match="hub"):
        open_model("someorg/surely-not-cached-model")


def test_measure_cli_writes_table_and_figures(tmp_path, capsys, monkeypatch):
    import sys

    from attnscope.cli import main

    ckpt = _tiny_checkpoint(tmp_path)
    monkeypatch.setattr(sys, "argv", ["attnscope", "heads", str(ckpt), "--windows", "2", "--length", "32",
                                      "--out", str(tmp_path / "h.parquet"), "--plot", str(tmp_path / "figs"),
                                      "--js", str(tmp_path / "js.csv")])
    try:
        main()
    except SystemExit as exc:
        assert not exc.code
    import pandas as pd

    df = pd.read_parquet(tmp_path / "h.parquet")
    assert len(df) == 16 and {"entropy", "entropy_std", "induction_score"} <= set(df.columns)
    # both probes by default: the random probe's columns say where they came from
    assert {"induction_random", "previous_token_random", "sink_random"} <= set(df.columns)
    assert df["induction_random"].between(0, 1).all() and df["sink_random"].notna().all()
    assert len(pd.read_csv(tmp_path / "js.csv")) == 16 * 15 // 2
    for name in ("heads_heatmaps.png", "heads_scatter.png", "heads_maps.png"):
        assert (tmp_path / "figs" / name).stat().st_size > 1000
    assert "per layer" in capsys.readouterr().err


def test_default_window_is_the_models_maximum_capped_at_512():
    """A long-context decoder (SmolLM2: 8192) is measured on 512-token windows unless told otherwise (10 of
    them fit the built-in corpus); a 128-token model on its full 128; a byte model on 1024 bytes; a model
    that names no maximum must be told."""
    from attnscope.errors import InputError
    from attnscope.heads.maps import MapModel

    def model(max_len, byte_level=False):
        return MapModel(name="m", kind="hf", n_layers=1, n_heads=1, causal=True, max_len=max_len, tokenizer=None,
                        byte_level=byte_level)

    assert [model(n).default_length() for n in (8192, 1024, 512, 128)] == [512, 512, 512, 128]
    assert model(None, byte_level=True).default_length() == 1024 and model(256, byte_level=True).default_length() == 256
    with pytest.raises(InputError, match="maximum length"):
        model(None).default_length()


@pytest.mark.parametrize("drop, refused", [
    # W_q: the config is checked against the q/k weights before transformers builds the model
    ("encoder.layer.0.attention.self.query.weight", r"missing tensor ending in 'encoder\.layer\.0\.attention\.self\.query"),
    # W_v: transformers' own report of what it left at random
    ("encoder.layer.0.attention.self.value.weight", r"no weights for 1 parameter\(s\) of BertModel \(e\.g\. encoder\.layer\.0"),
    ("pooler.dense.weight", None)])
def test_a_checkpoint_missing_weights_on_the_map_path_is_refused(tmp_path, minilm_dir, drop, refused):
    """transformers fills a parameter the checkpoint lacks with a random init and only logs it: a missing
    attention weight would give maps of random weights, so it is one line; the pooler (after the last
    layer) changes no map and may be absent."""
    import shutil

    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertModel

    from attnscope.errors import FormatError

    cfg = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64)
    d = tmp_path / "bert"
    BertModel(cfg).save_pretrained(d)
    shutil.copy(minilm_dir / "tokenizer.json", d / "tokenizer.json")
    weights = load_file(d / "model.safetensors")
    assert drop in weights
    del weights[drop]
    save_file(weights, d / "model.safetensors", metadata={"format": "pt"})
    if refused:
        with pytest.raises(FormatError, match=refused):
            open_model(str(d))
    else:
        assert open_model(str(d)).n_layers == 1


def test_an_encoder_window_needs_room_for_cls_and_sep(minilm_dir):
    """[CLS] + text + [SEP]: a 2-token window has no room for text, which is one line, not a division by 0."""
    from attnscope.errors import InputError
    from attnscope.heads.maps import extract

    with pytest.raises(InputError, match=r"length must be at least 3 .*\[CLS\] \+ text \+ \[SEP\], not 2"):
        extract(str(minilm_dir), windows=1, length=2)
    assert extract(str(minilm_dir), windows=1, length=3).info["length"] == 3
