"""bf16-delta products (:mod:`attnscope.interventions.deltas`): against float32 products on random matrices
(hypothesis) and on tiny random models of every family; a copy that changes nothing stays exactly the clean
copy; ``precision`` is checked and resolved."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")


@settings(max_examples=40, deadline=None)
@given(c=st.integers(2, 5), i=st.integers(1, 7), n=st.integers(1, 40), m=st.integers(1, 40),
       scale=st.sampled_from([1e-6, 1e-3, 1.0, 50.0]), seed=st.integers(0, 2**16))
def test_delta_product_is_the_float32_product_to_a_fraction_of_each_difference(c, i, n, m, scale, seed):
    import torch

    from attnscope.interventions.deltas import LowWeights, delta_product

    g = torch.Generator().manual_seed(seed)
    w, b = torch.randn(m, n, generator=g), torch.randn(m, generator=g)
    x0 = torch.randn(1, i, n, generator=g) * 3
    x = torch.cat([x0, x0 + scale * torch.randn(c - 1, i, n, generator=g)])  # [c, i, n]
    x[-1] = x0[0]  # the last copy changes nothing
    y = delta_product(x, torch.nn.functional.linear(x[:1], w, b), LowWeights().of(w))
    ref = torch.nn.functional.linear(x.double(), w.double(), b.double())
    assert torch.equal(y[0], torch.nn.functional.linear(x[:1], w, b)[0])  # the clean copy as the model computes it
    assert torch.equal(y[-1], y[0])  # no difference: exactly the clean copy
    # the error is a fraction of the difference's product, not of the activation
    dx = (x - x[:1]).double()
    size = x.double().abs() @ w.double().abs().T + b.double().abs()  # float32's own rounding scales with this
    bound = 2.0**-6 * (dx.abs() @ w.double().abs().T) + 1e-6 * size  # dx, W and dy each rounded: 3 x 2^-8
    assert ((y.double() - ref).abs() <= bound).all()


def test_delta_product_with_a_big_difference_is_still_the_product():
    import torch

    from attnscope.interventions.deltas import LowWeights, delta_product

    torch.manual_seed(0)
    w, x = torch.randn(64, 48), torch.randn(3, 10, 48)
    y = delta_product(x, torch.nn.functional.linear(x[:1], w), LowWeights().of(w))
    ref = torch.nn.functional.linear(x, w)
    rel = ((y - ref).norm() / ref.norm()).item()
    assert 0 < rel < 1e-2  # bfloat16's rounding, not an error of the algebra


def test_a_precision_is_checked_and_auto_follows_the_hardware(monkeypatch):
    from attnscope.errors import InputError
    from attnscope.interventions import deltas

    with pytest.raises(InputError, match="precision must be one of"):
        deltas.resolve_precision("half")
    assert deltas.resolve_precision("full") == "full" and deltas.resolve_precision("bf16-delta") == "bf16-delta"
    monkeypatch.setattr(deltas, "native_bf16", lambda device="cpu": True)
    assert deltas.resolve_precision("auto") == "bf16-delta"
    monkeypatch.setattr(deltas, "native_bf16", lambda device="cpu": False)
    assert deltas.resolve_precision("auto") == "full"
    assert deltas.native_bf16("meta") is False


@needs_transformers
@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3", "gpt2", "bert"])
def test_a_models_copies_in_bf16_delta_equal_float32_to_a_fraction_of_each_effect(family):
    """Every linear of the layers after the intervention switched (GPT-2's Conv1D included): the clean copy
    exact, a clean copy later in the batch equal to it, the intervened copies within 2% of their effect."""
    import torch

    from attnscope.interventions.attention import CLEAN, Plan, layer_list
    from attnscope.interventions.deltas import LowWeights, delta_linears

    sys.path.insert(0, str(Path(__file__).parent))
    from test_attention import _ids, _model, _run  # the family models of the sibling test (private names only)

    model = _model(family)
    ids = _ids(11)
    layer = 0
    copies = [(CLEAN, -1), ("sym", 1), ("anti", 2), ("ablate", 3), (CLEAN, -1)]
    plan = Plan(layer=layer, copies=copies)
    full = _run(model, ids, plan, layer, len(copies))
    suffix = [m for block in list(layer_list(model))[layer:] for m in block.modules()]
    with delta_linears(suffix, LowWeights()) as switched:
        got = _run(model, ids, plan, layer, len(copies))
    assert switched >= 4 * len(layer_list(model))  # q, k, v (or fused), output, MLP of every layer
    assert not any("forward" in vars(m) for m in suffix)  # put back
    torch.testing.assert_close(got[0], full[0], rtol=0, atol=1e-6)
    assert torch.equal(got[-1], got[0])
    for ci in range(1, len(copies) - 1):
        effect = (full[ci] - full[0]).abs().max()
        assert effect > 1e-5, copies[ci]  # the intervention does something
        assert (got[ci] - full[ci]).abs().max() <= 0.02 * effect, copies[ci]


needs_gguf = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)",
)


@needs_gguf
def test_intervene_in_bf16_delta_agrees_with_full_precision_and_nothing_stays_zero(tmp_path):
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
    from _tiny_gguf import tiny_llama_model, write_llama_gguf_model

    from attnscope.heads.maps import make_windows
    from attnscope.interventions import intervene
    from attnscope.interventions.attention import CLEAN, patched
    from attnscope.interventions.deltas import LowWeights
    from attnscope.interventions.run import clean_pass, layer_pass, open_subject

    path = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=3, d=32, n_heads=4, n_kv=2))
    opts = dict(interventions="sym,anti,ablate", windows=3, length=40, random_windows=2, random_length=10, exact="all")
    full = intervene(str(path), precision="full", **opts)
    fast = intervene(str(path), precision="bf16-delta", **opts)
    assert full.info["precision"] == "full" and fast.info["products"].startswith("bf16-delta")
    key = ["layer", "head", "intervention", "measure"]
    a, b = full.table.set_index(key).sort_index(), fast.table.set_index(key).sort_index()
    assert a.index.equals(b.index)
    loss = a.index.get_level_values("measure") == "loss"
    err = (a["delta"] - b["delta"]).abs()
    half_width = (a["ci_high"] - a["ci_low"]) / 2
    # the rounding is a fraction of each window's effect, bounded by the mean's size plus its interval's
    assert (err[loss] <= 0.02 * (a["delta"].abs() + half_width)[loss] + 1e-6).all()
    assert (err[loss] > 0).any()  # the fast products did run
    np.testing.assert_allclose(b["delta"][~loss], a["delta"][~loss], atol=1e-5)  # the head's own map: exact products
    # copies that change nothing: a loss delta of exactly 0 in either precision
    subject = open_subject(str(path))
    wins = {"text": make_windows(subject.maps, "builtin", 2, 40)}
    with torch.inference_mode(), patched(subject.model) as ctl:
        clean = clean_pass(subject, wins, ctl)
        for low in (None, LowWeights()):
            df = layer_pass(subject, 1, [0, 2], (CLEAN,), wins, clean, ctl, low)
            assert len(df) == 4 and (df["delta"] == 0).all() and np.allclose(df["value"], df["clean"])


@needs_gguf
@pytest.mark.gpu
def test_on_cuda_auto_is_bf16_delta_and_agrees_with_full_precision_on_the_cpu(tmp_path):
    import torch

    sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
    from _tiny_gguf import tiny_llama_model, write_llama_gguf_model

    from attnscope.interventions import intervene

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch sees none")
    path = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=3, d=32, n_heads=4, n_kv=2))
    opts = dict(interventions="sym,anti,ablate", windows=3, length=40, random_windows=2, random_length=10, exact="all")
    cpu = intervene(str(path), precision="full", **opts)
    gpu = intervene(str(path), device="cuda", **opts)
    assert gpu.info["precision"] == "bf16-delta"
    key = ["layer", "head", "intervention", "measure"]
    a, b = cpu.table.set_index(key).sort_index(), gpu.table.set_index(key).sort_index()
    half = (a["ci_high"] - a["ci_low"]) / 2
    loss = a.index.get_level_values("measure") == "loss"
    assert ((a["delta"] - b["delta"]).abs()[loss] <= 0.01 * half[loss] + 1e-5).all()
    np.testing.assert_allclose(b["delta"][~loss], a["delta"][~loss], atol=1e-4)  # TF32-free float32 maps


def test_low_weights_keep_a_matrix_and_its_transpose_apart():
    import torch

    from attnscope.interventions.deltas import LowWeights

    w = torch.randn(3, 5)
    low = LowWeights()
    assert low.of(w).shape == (3, 5) and low.of(w, transposed=True).shape == (5, 3)
    assert low.of(w) is low.of(w) and low.of(w).dtype == torch.bfloat16  # made once
    torch.testing.assert_close(low.of(w, transposed=True).float(), w.T.bfloat16().float())


@settings(max_examples=30, deadline=None)
@given(i=st.integers(1, 9), e=st.integers(2, 24), v=st.integers(2, 300), scale=st.sampled_from([1e-4, 1e-2, 0.3, 3.0]),
       far=st.sampled_from([0, 1, 3]), seed=st.integers(0, 2**16))
def test_loss_deltas_are_the_float64_loss_change_to_a_fraction_of_each_positions_effect(i, e, v, scale, far, seed):
    """Against the plain float64 difference of two cross-entropies; ``far`` positions get a difference so large
    (logit changes past exp's range among them) that they take the plain route, alone."""
    import torch

    from attnscope.interventions.deltas import LossDeltas, LowWeights

    g = torch.Generator().manual_seed(seed)
    w = torch.randn(v, e, generator=g)
    h0 = torch.randn(i, e, generator=g) * 2
    diff = scale * torch.randn(i, e, generator=g)
    diff[: min(far, i)] *= 1000.0 / scale  # dz of hundreds: the clean distribution loses its weight there
    target = torch.randint(0, v, (i,), generator=g)
    p0 = LossDeltas.distribution(h0 @ w.T)
    got = LossDeltas(p0, target, w, LowWeights().of(w)).of(diff, h0)

    def ce(logits):  # [i] float64 per position
        return torch.logsumexp(logits, -1) - logits.gather(1, target[:, None])[:, 0]

    w64, h64 = w.double(), h0.double()
    per = ce((h64 + diff.double()) @ w64.T) - ce(h64 @ w64.T)  # [i] each position's effect
    # bfloat16 inputs err by 2^-9 each: a logit change errs by at most ~2^-8 sum_k |diff_k w_vk| (A), and the
    # loss change by about as much; the far positions' full products by float32's rounding of their logits
    reach = (diff.double().abs() @ w64.abs().T).amax(-1)  # [i] max_v A_iv
    logits = ((h64.abs() + diff.double().abs()) @ w64.abs().T).amax(-1)  # [i] bound on the logits' size
    near = torch.arange(i) >= min(far, i)
    tol = (2**-6 * float(reach[near].sum()) + 1e-6 * float(logits[~near].sum())) / i + 1e-6
    assert np.isfinite(got)
    assert abs(got - float(per.mean())) <= tol
    assert LossDeltas(p0, target, w, LowWeights().of(w)).of(torch.zeros(i, e), h0) == 0.0  # no change: exactly 0
