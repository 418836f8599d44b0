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


@needs_runtime
def test_only_the_base_model_is_kept_and_it_holds_the_files_weights(same_weights):
    """No language-model head (maps never need it); every weight is the file's, not a random init."""
    from transformers import AutoModelForCausalLM

    from attnscope.heads.load import _load_gguf

    gguf_path, _ = same_weights
    model, _ = _load_gguf(Path(gguf_path))
    assert not any(n.startswith("lm_head") for n, _ in model.named_parameters())
    assert type(model).__name__ == "LlamaModel"
    full = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    want = full.base_model.state_dict()
    got = model.state_dict()
    assert sorted(got) == sorted(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)


class _Loaded:
    """A stand-in for transformers' Auto classes: from_pretrained -> (model, loading info)."""

    def __init__(self, missing, base=None):
        self.missing, self.base, self.calls = missing, base, 0

    def from_pretrained(self, *args, **kwargs):
        self.calls += 1
        assert kwargs.get("output_loading_info") is True
        return _Model(self.base), {"missing_keys": self.missing}


class _Model:
    def __init__(self, base=None):
        self.base_model = base

    def eval(self):
        return self


def test_a_base_model_the_file_did_not_fill_falls_back_to_the_lm_class_then_refuses(monkeypatch, tmp_path):
    """transformers 4.x fills only ...ForCausalLM from a GGUF file and leaves AutoModel at random init
    (silently): attnscope then loads the LM class and keeps its base; if that too leaves weights unfilled,
    one line, never maps of random weights."""
    import transformers

    from attnscope.heads import load

    class Tok:
        @staticmethod
        def from_pretrained(*a, **k):
            return "tok"

    gguf = tmp_path / "m.gguf"
    kept = _Model()
    base, lm = _Loaded(["layers.0.self_attn.q_proj.weight"]), _Loaded(["lm_head.weight"], base=kept)
    monkeypatch.setattr(transformers, "AutoModel", base)
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", lm)
    monkeypatch.setattr(transformers, "AutoTokenizer", Tok)
    model, tok = load._load_gguf(gguf)
    assert model is kept and tok == "tok" and (base.calls, lm.calls) == (1, 1)  # a missing lm_head alone is fine
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", _Loaded(["embed_tokens.weight", "model.norm.weight"]))
    with pytest.raises(UnsupportedError, match=r"2 weights of the model \(e.g. embed_tokens.weight\) are not filled"):
        load._load_gguf(gguf)
