"""Attention maps from GGUF files (transformers' GGUF loader) and one-line refusals for weights-only formats."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from attnscope.errors import AttnscopeError, UnsupportedError
from attnscope.heads.maps import open_model

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402

pytest.importorskip("transformers")
needs_runtime = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("accelerate", "gguf")),
    reason="the gguf extra (accelerate, gguf) is not installed",
)


@pytest.fixture(scope="module")
def same_weights(tmp_path_factory):
    """One tiny llama as a GGUF file and as an HF directory (tokenizer rebuilt from the GGUF vocabulary)."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("gguf_maps")
    model = tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2)
    gguf_path = write_llama_gguf_model(root / "tiny.gguf", model)
    hf_dir = root / "hf"
    model.save_pretrained(hf_dir)
    if importlib.util.find_spec("accelerate") is not None:
        AutoTokenizer.from_pretrained(str(root), gguf_file="tiny.gguf").save_pretrained(hf_dir)
    return gguf_path, hf_dir


def _maps(mm, idx):
    got = {}
    mm.run(idx, lambda layer, p: got.__setitem__(layer, p.clone()))
    return got


@needs_runtime
def test_gguf_gives_the_same_maps_as_the_hf_directory(same_weights):
    gguf_path, hf_dir = same_weights
    g, h = open_model(str(gguf_path)), open_model(str(hf_dir))
    assert g.causal and h.causal and g.n_layers == h.n_layers == 2 and g.n_heads == 4
    idx = torch.randint(3, 259, (2, 24), generator=torch.Generator().manual_seed(1))
    mg, mh = _maps(g, idx), _maps(h, idx)
    assert sorted(mg) == [0, 1]
    for layer in mg:
        assert mg[layer].shape == (2, 4, 24, 24)
        torch.testing.assert_close(mg[layer], mh[layer], rtol=1e-4, atol=1e-5)
    # the maps are not trivially equal (heads differ from each other)
    assert (mg[0][:, 0] - mg[0][:, 1]).abs().max() > 1e-2
    # the tokenizer came from the file: text encodes to the same ids
    assert g.tokenizer.encode("hello world") == h.tokenizer.encode("hello world")


def _cli(cli_inproc, *args):
    return cli_inproc("heads", *args)


@needs_runtime
def test_heads_cli_runs_a_gguf_file(same_weights, tmp_path, cli_inproc):
    gguf_path, _ = same_weights
    out = tmp_path / "m.csv"
    code, _, err = cli_inproc("heads", str(gguf_path), "--windows", "2", "--length", "32", "--out", str(out))
    assert code == 0, err
    import pandas as pd

    df = pd.read_csv(out)
    assert len(df) == 8 and df["stack"].eq("decoder").all()


def test_gguf_without_the_extra_is_one_line_naming_the_fix(same_weights, monkeypatch, cli_inproc):
    gguf_path, _ = same_weights
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    with pytest.raises(UnsupportedError, match=r"accelerate.*pip install 'attnscope\[gguf\]'"):
        open_model(str(gguf_path))
    code, _, err = cli_inproc("heads", str(gguf_path))
    assert code == 2 and "attnscope[gguf]" in err and len(err.strip().splitlines()) == 1


def test_weights_only_formats_are_one_line(tmp_path, cli_inproc):
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"not really onnx")
    with pytest.raises(UnsupportedError, match="ONNX graph cannot be run for attention maps"):
        open_model(str(onnx))
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"\0" * 16)
    (ct2 / "config.json").write_text("{}")
    code, _, err = cli_inproc("heads", str(ct2))
    assert code == 2 and "CTranslate2 model cannot be run" in err and len(err.strip().splitlines()) == 1


def test_a_file_that_is_no_model_is_still_refused(tmp_path):
    p = tmp_path / "weights.bin"
    p.write_bytes(b"x")
    with pytest.raises(AttnscopeError, match="not a file attnscope can run"):
        open_model(str(p))
