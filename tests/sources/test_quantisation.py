"""Simulated GGUF quantisation of float weights, and the error band attnscope geometry prints for quantised files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnscope.errors import UnsupportedError
from attnscope.geometry import score
from attnscope.sources import open_source
from attnscope.sources.quantisation import ERROR_BANDS, QUANT_TYPES, QuantisedSource, band_line, fake_quantise

pytest.importorskip("gguf")


def _q8_0_reference(x: np.ndarray) -> np.ndarray:
    """Q8_0 by its definition: blocks of 32, scale d = max|x| / 127 stored as fp16, q = round(x / d) in int8."""
    blocks = x.astype(np.float64).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / 127.0
    q = np.where(d > 0, np.trunc(blocks / np.where(d > 0, d, 1) + np.copysign(0.5, blocks)), 0)
    return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)


def test_q8_0_matches_its_definition():
    x = np.random.default_rng(0).standard_normal((8, 96)).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block
    got = fake_quantise(x, "Q8_0")
    np.testing.assert_allclose(got, _q8_0_reference(x), rtol=0, atol=1e-6 * np.abs(x).max())
    assert not np.array_equal(got, x)


def test_coarser_types_move_weights_further():
    x = np.random.default_rng(1).standard_normal((16, 256)).astype(np.float32)
    err = dict(zip(QUANT_TYPES, (np.abs(fake_quantise(x, t) - x).mean() for t in QUANT_TYPES)))
    assert err["Q8_0"] < err["Q6_K"] < err["Q5_1"] < err["Q4_K"] < err["Q4_1"] and err["Q5_0"] < err["Q4_0"]
    with pytest.raises(UnsupportedError, match="cannot simulate Q3_K"):
        fake_quantise(x, "Q3_K")
    with pytest.raises(UnsupportedError, match="Q6_K needs rows of a multiple of 256"):
        fake_quantise(x[:, :96], "Q6_K")


@pytest.mark.parametrize(("qtype", "n_bytes"), [("Q6_K", 210), ("Q4_K", 144)])
def test_k_quant_blocks_are_what_the_gguf_dequantiser_reads(qtype, n_bytes):
    """Our K-quant ports pack llama.cpp's byte layout: gguf's own dequantiser returns our values exactly."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from attnscope.sources.quantisation import q4_k, q6_k

    x = np.random.default_rng(2).standard_normal((6, 256)).astype(np.float32) * np.linspace(0.1, 3, 256)
    x[2] = 0.0  # an all-zero block
    x[3] = np.abs(x[3])  # no negative values: the min clamps to 0
    values, blocks = (q6_k if qtype == "Q6_K" else q4_k)(x)
    assert blocks.shape == (6, n_bytes) and blocks.dtype == np.uint8
    np.testing.assert_array_equal(dequantize(blocks, GGMLQuantizationType[qtype]).reshape(x.shape), values)
    assert (values[2] == 0).all() and 0 < np.abs(values - x).max() < 0.2 * np.abs(x).max()


def test_quantised_source_scores_near_float(hf_llama_dirs):
    src = open_source(str(hf_llama_dirs["single"]))
    qsrc = QuantisedSource(src, "Q8_0")
    name = "model.norm.weight"
    np.testing.assert_array_equal(qsrc.get(name).numpy(), src.get(name).numpy())  # 1-D: untouched
    base = score(src, levels="layer")
    q8 = score(qsrc, levels="layer")
    q4 = score(QuantisedSource(src, "Q4_0"), levels="layer")
    d8 = np.abs(q8["symmetry"] - base["symmetry"]).max()
    d4 = np.abs(q4["symmetry"] - base["symmetry"]).max()
    assert 0 < d8 < d4 < 0.1


def test_band_lines():
    assert band_line(["F16"]) is None and band_line([]) is None
    line = band_line(["Q5_0"])
    assert f"|delta s| <= {ERROR_BANDS['Q5_0'][0]:.3f}" in line and "Q5_0" in line
    assert "no measured band for Q3_K" in band_line(["Q3_K"])


def test_cli_prints_the_band_of_a_quantised_gguf(tmp_path):
    sys.path.insert(0, str(Path(__file__).parents[1] / "zoo"))
    from _fakes import tiny_llama, write_llama_gguf

    model, cfg = tiny_llama(n_layers=2, d=64, n_heads=4, n_kv=2, seed=3)
    path = write_llama_gguf(tmp_path / "m.gguf", model, cfg, qtype="Q8_0")
    res = subprocess.run([sys.executable, "-m", "attnscope", "geometry", "score", str(path), "--level", "layer"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "q/k weights quantised as Q8_0; measured error vs float per layer" in res.stderr
    assert "quantised" not in res.stdout
