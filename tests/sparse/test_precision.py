"""The gathered kernel in query chunks (recomputed in backward) equals the dense reference, and in bf16 it meets
the fair rule: no more than 2x the error dense SDPA makes in bf16 against the same float32 reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from attnscope.sparse import HeadPattern, Pattern, load_pattern, sparse_attention
from attnscope.sparse import attention
from attnscope.sparse.attention import dense_attention
from attnscope.sparse.exactness import failures, low_precision_errors

from ._strategies import head_patterns


@settings(max_examples=30, deadline=None)
@given(heads=st.lists(head_patterns, min_size=1, max_size=3), t=st.integers(1, 90), causal=st.booleans(),
       chunk=st.sampled_from([1, 40, 300]))
@example(heads=[HeadPattern(window=None, stride=None, anchors=(), positions=(1,), dense=False)], t=1, causal=False,
         chunk=1)  # a query with no key at all: its gradients are exactly 0, not an autograd error
def test_chunked_kernel_matches_dense_reference(heads, t, causal, chunk):
    pat = Pattern(tuple(heads))
    gen = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(2, pat.n_heads, t, 4, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    old = attention.CHUNK_ELEMENTS
    attention.CHUNK_ELEMENTS = chunk  # a few score entries per chunk: many chunks, each recomputed in backward
    try:
        out = sparse_attention(q, k, v, pat, causal=causal, impl="gather")
        _, probs = sparse_attention(q.detach(), k.detach(), v.detach(), pat, causal=causal, impl="gather", return_probs=True)
    finally:
        attention.CHUNK_ELEMENTS = old
    ref, ref_probs = dense_attention(q, k, v, torch.from_numpy(pat.mask(t, causal)))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(probs, ref_probs.detach(), rtol=1e-10, atol=1e-10)
    g = torch.randn_like(out)
    grads = [torch.autograd.grad((o * g).sum(), (q, k, v), allow_unused=True, materialize_grads=True) for o in (out, ref)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("chunk", [attention.CHUNK_ELEMENTS, 2000])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spec, n_heads", [("byte-sparse-8h", None), ("strided:16:8", 4),
                                           ([{"window": 5, "positions": [3, 60]}, {"window": 0, "stride": 7}], None)])
def test_bf16_gathered_kernel_meets_the_sdpa_rule(spec, n_heads, causal, chunk, monkeypatch):
    monkeypatch.setattr(attention, "CHUNK_ELEMENTS", chunk)
    pat = load_pattern(spec, n_heads=n_heads)
    errors = low_precision_errors(lambda q, k, v: sparse_attention(q, k, v, pat, causal=causal, impl="gather"),
                                  pat, 200, 2, 16, "cpu", torch.bfloat16, causal=causal)
    assert failures(errors) == []
    assert all(err["kernel"] > 0 for err in errors.values())  # bf16: never exact, so the rule is what holds


def test_the_rule_rejects_a_kernel_that_rounds_inside():
    """Dense masked attention computed in bf16 throughout (scores and probabilities rounded): outside the rule."""
    pat = load_pattern("byte-sparse-8h")
    mask = torch.from_numpy(pat.mask(300, True))
    errors = low_precision_errors(lambda q, k, v: dense_attention(q, k, v, mask)[0], pat, 300, 2, 32, "cpu", torch.bfloat16)
    assert failures(errors)
    same = low_precision_errors(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                pat, 300, 1, 8, "cpu", torch.bfloat16)
    assert failures(same) == []  # dense SDPA itself is within its own rule


def test_bf16_output_and_gradients_keep_the_input_dtype():
    q, k, v = (torch.randn(1, 2, 50, 8, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = sparse_attention(q, k, v, Pattern((HeadPattern(window=3, stride=5),) * 2), impl="gather")
    out.sum().backward()
    assert out.dtype == q.grad.dtype == torch.bfloat16
