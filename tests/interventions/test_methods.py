"""methods.md: the methods paragraph holds each fact of the run; the weights' sha256 and stored types; the CLI writes it."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
sys.path.insert(0, str(Path(__file__).parent))
from _requires import skip_unless_bert_calls_the_interface  # noqa: E402
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402

needs_gguf = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)",
)

VERSIONS = {"attnscope": "9.8.7", "torch": "2.99.1", "transformers": "7.6.5", "numpy": "3.2.1", "python": "3.11.42"}


def _info() -> dict:
    return {"model": "org/tiny-model", "interventions": ["sym", "anti", "ablate", "scale:0.5"], "data": "enwik8",
            "windows": 7, "length": 193, "random_windows": 5, "random_length": 61, "seed": 1234,
            "precision": "bf16-delta", "n_layers": 12, "n_heads": 6, "heads": 3, "exact": "auto", "exact_heads": 2,
            "exact_rule": "the 4 heads with the largest screened |change in loss|",
            "loss": "mean next-token cross-entropy (nats) per window",
            "screen_method": "first order after the softmax (QK-fix)", "screen_samples": 11,
            "products": "bf16-delta: intervened copies' linear layers in bfloat16",
            "interval": "mean over windows, 95% t interval (n windows); p: one-sample t-test",
            "detectable_change": "smallest true mean change a two-sided 5% t-test detects with 80% power",
            "agreement": {"sym": {"heads": 2, "spearman_rho": 0.875,
                                  "largest_disagreement": {"head": "L3H1", "screen": 0.125, "exact": 0.5}}}}


def _table() -> pd.DataFrame:
    return pd.DataFrame({"layer": [3, 3, 5, 5], "head": [1, 1, 0, 2], "intervention": ["sym", "anti", "sym", "sym"],
                         "measure": "loss"})


ATLAS = {"model": "org/tiny-model", "n_boot": 4321, "seed": 99, "probes": ["random", "text"], "data": "enwik8",
         "windows": {"text": 11, "random": 13}, "lengths": {"text": 129, "random": 255}, "cluster_k": 4}


def test_the_methods_text_holds_each_fact_of_the_run():
    from attnscope.interventions.methods import methods_text

    weights = {"available": True, "source": "/m/tiny.Q4_1.gguf",
               "files": [{"path": "/m/tiny.Q4_1.gguf", "sha256": "ab" * 32, "bytes": 123456}], "total_bytes": 123456,
               "stored": {"Q4_1": 84, "F32": 25}, "file_type": "Q4_1", "quantised": True,
               "quantisation": "GGUF Q4_1: quantised tensors Q4_1 x 84"}
    text = methods_text(_info(), _table(), ATLAS, weights, versions=VERSIONS)
    assert text.startswith("# Methods\n")
    for fact in ("attnscope 9.8.7", "PyTorch 2.99.1", "transformers 7.6.5", "NumPy 3.2.1", "Python 3.11.42",
                 "org/tiny-model", "/m/tiny.Q4_1.gguf", "ab" * 32, "123,456 bytes", "Q4_1 x 84", "F32 x 25",
                 "quantised: GGUF Q4_1", "bf16-delta: intervened copies' linear layers in bfloat16",
                 "enwik8", "7 text windows of 193 tokens", "5 windows of 61 repeated random tokens", "seed 1234",
                 "`sym`", "`anti`", "`ablate`", "`scale:0.5`", "as the control of `sym` and `anti`",
                 "3 heads of 72 (12 layers x 6 heads)", "first order after the softmax (QK-fix)",
                 "2 heads were then measured exactly", "exact=auto", "| screen label draws | 11 per text window |",
                 "one forward and 12 backward passes per text window, 11 of them against next tokens drawn", "the 4 heads with the largest screened",
                 "Spearman rho +0.88 over 2 heads", "L3H1", "95% t interval", "80% power", "Benjamini-Hochberg",
                 "4321 resamples", "| atlas resamples (n_boot) | 4321 |", "| atlas seed | 99 |",
                 "| atlas text windows | 11 x 129 tokens |", "| atlas cluster k | 4 |"):
        assert fact in text, fact
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0] == "| setting | value |" and all(line.count(" | ") == 1 for line in table[1:])  # two cells a row


def test_the_methods_text_says_what_it_does_not_know():
    from attnscope.interventions.methods import methods_text

    info = {**_info(), "random_windows": 0, "random_length": None}
    del info["agreement"]
    text = methods_text(info, _table(), None, {"available": False, "source": "a model in memory (X)",
                                               "why": "a model in memory has no weight file to hash"},
                        versions=VERSIONS)
    assert "not available: a model in memory has no weight file to hash" in text
    assert "| random-probe windows | none |" in text and "repeated random tokens" not in text
    assert "not compared" in text and "atlas resamples" not in text
    assert "| weight files | not fingerprinted |" in methods_text(info, _table(), None, None, versions=VERSIONS)
    off = methods_text({**info, "interventions": ["sym", "anti"], "controls": False}, _table(), versions=VERSIONS)
    assert "| controls | none (controls=False) |" in off


def test_the_default_versions_are_this_process_s():
    import platform

    import numpy as np
    import torch

    from attnscope.interventions.methods import methods_text

    text = methods_text(_info(), _table())
    assert f"PyTorch {torch.__version__}" in text and f"NumPy {np.__version__}" in text
    assert f"Python {platform.python_version()}" in text


def test_a_model_in_memory_and_a_missing_one_are_not_available(tmp_path, monkeypatch):
    from attnscope.interventions.methods import weights_fingerprint

    got = weights_fingerprint(object())
    assert got["available"] is False and "in memory" in got["why"]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    got = weights_fingerprint("nobody/no-such-model")
    assert got["available"] is False and "cache" in got["why"]


def test_an_hf_directory_hashes_its_safetensors_and_reads_awq_from_its_config(tmp_path):
    import torch
    from safetensors.torch import save_file

    from attnscope.interventions.methods import BLOCK, weights_fingerprint

    d = tmp_path / "model"
    d.mkdir()
    save_file({"a": torch.zeros(3, 4, dtype=torch.bfloat16), "b": torch.ones(BLOCK // 2 + 7)}, d / "model.safetensors")
    (d / "config.json").write_text(json.dumps({"torch_dtype": "float16", "quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128}}))
    (d / "training_args.bin").write_bytes(b"not weights")
    got = weights_fingerprint(str(d))
    raw = (d / "model.safetensors").read_bytes()
    assert [Path(f["path"]).name for f in got["files"]] == ["model.safetensors"]
    assert got["files"][0]["sha256"] == hashlib.sha256(raw).hexdigest() and got["total_bytes"] == len(raw)
    assert got["stored"] == {"BF16": 1, "F32": 1} and got["config_dtype"] == "float16"
    assert got["quantised"] is True and got["quantisation"].startswith("AWQ (4-bit, group size 128")


def _quantised_gguf(path: Path) -> Path:
    """A GGUF file with one Q8_0 tensor and one F32 tensor, and its file type (MOSTLY_Q8_0)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0))
    x = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.attn_q.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output_norm.weight", np.ones(64, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@needs_gguf
def test_a_gguf_files_hash_is_hashlibs_and_its_stored_types_are_named(tmp_path):
    from attnscope.interventions.methods import weights_fingerprint

    f32 = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=1, d=16, n_heads=2, n_kv=1))
    got = weights_fingerprint(str(f32))
    assert got["available"] and got["files"][0]["sha256"] == hashlib.sha256(f32.read_bytes()).hexdigest()
    assert got["total_bytes"] == f32.stat().st_size
    assert set(got["stored"]) == {"F32"} and got["quantised"] is False and "not quantised" in got["quantisation"]
    q8 = _quantised_gguf(tmp_path / "q8.gguf")
    got = weights_fingerprint(q8)
    assert got["files"][0]["sha256"] == hashlib.sha256(q8.read_bytes()).hexdigest()
    assert got["stored"] == {"Q8_0": 1, "F32": 1} and got["file_type"] == "Q8_0"
    assert got["quantised"] is True and "Q8_0" in got["quantisation"]


@needs_gguf
def test_the_cli_writes_methods_md_beside_the_interventions(tmp_path, cli_inproc):
    model = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))
    out = tmp_path / "out"
    code, _, err = cli_inproc("atlas", str(model), "--out", str(out), "--windows", "2", "--length", "40",
                              "--random-windows", "2", "--random-length", "10", "--n-boot", "50",
                              "--interventions", "sym,ablate", "--exact", "all", "--intervention-windows", "3")
    assert code == 0, err
    text = (out / "methods.md").read_text()
    info = json.loads((out / "interventions.json").read_text())
    assert hashlib.sha256(model.read_bytes()).hexdigest() in text and "F32 x" in text
    assert "8 heads of 8 (2 layers x 4 heads)" in text and "3 text windows of 40 tokens" in text
    assert f"{info['exact_heads']} heads were then measured exactly" in text and "exact=all" in text
    assert "| atlas resamples (n_boot) | 50 |" in text and info["products"] in text
    manifest = json.loads((out / "attnscope-manifest.json").read_text())
    assert "methods.md" in json.dumps(manifest)  # one of the result's files, hashed with them


def test_an_encoders_methods_say_it_has_no_loss():
    from attnscope.interventions.methods import methods_text

    info = {**_info(), "loss": "none (no output matrix: an encoder)", "exact_heads": 0}
    text = methods_text(info, _table(), versions=VERSIONS)
    assert "The model has no next-token loss (none (no output matrix: an encoder))" in text
    assert "The change in the loss" not in text and "5 windows of 61 repeated random tokens" in text


def test_a_hub_id_is_fingerprinted_from_its_cached_files_without_the_network(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import save_file

    from attnscope.interventions.methods import weights_fingerprint

    cache = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = cache / "models--org--cached-model" / "snapshots" / commit
    snap.mkdir(parents=True)
    (cache / "models--org--cached-model" / "refs").mkdir()
    (cache / "models--org--cached-model" / "refs" / "main").write_text(commit)
    save_file({"w": torch.ones(4, 4, dtype=torch.float16)}, snap / "model.safetensors")
    (snap / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    got = weights_fingerprint("org/cached-model")
    assert got["available"] and "cached files" in got["kind"]
    assert got["files"][0]["sha256"] == hashlib.sha256((snap / "model.safetensors").read_bytes()).hexdigest()
    assert got["stored"] == {"F16": 1} and got["quantised"] is False


def test_an_encoders_screen_records_no_draws_and_no_backward(minilm_dir):
    """An encoder has no loss: its screen draws no labels and runs no backward, and its methods say so."""
    from attnscope.interventions import intervene
    from attnscope.interventions.methods import methods_text

    skip_unless_bert_calls_the_interface()
    res = intervene(str(minilm_dir), interventions="ablate", heads=[(0, 1)], windows=2, length=16, random_windows=0)
    assert res.info["screen_samples"] == 0 and res.info["screen_method"].startswith("behaviour only")
    text = methods_text(res.info, res.table, versions=VERSIONS)
    assert "backward" not in text.split("| setting |")[0] and "drawn" not in text.split("| setting |")[0]
