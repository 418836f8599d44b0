"""The FlexAttention path: the pattern's mask_mod equals the dense mask; forward equals the dense reference (CPU)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import ConfigError
from attnscope.sparse import HeadPattern, Pattern, load_pattern, sparse_attention
from attnscope.sparse.attention import dense_attention
from attnscope.sparse.flex import available, block_mask, mask_mod

pytestmark = pytest.mark.skipif(not available(), reason="this torch has no FlexAttention")


def _mask_from_mod(pat: Pattern, L: int, causal: bool) -> torch.Tensor:
    fn = mask_mod(pat, L, causal)
    i = torch.arange(L)[:, None].expand(L, L)
    j = torch.arange(L)[None, :].expand(L, L)
    return torch.stack([fn(0, torch.full_like(i, h), i, j) for h in range(pat.n_heads)])


head_patterns = st.fixed_dictionaries({
    "window": st.one_of(st.none(), st.integers(0, 20)),
    "stride": st.one_of(st.none(), st.integers(1, 12)),
    "anchors": st.lists(st.floats(0, 1), max_size=3).map(tuple),
    "positions": st.lists(st.integers(0, 40), max_size=3).map(tuple),
    "dense": st.booleans(),
}).filter(lambda d: d["dense"] or d["window"] is not None or d["stride"] or d["anchors"] or d["positions"]).map(
    lambda d: HeadPattern(**d))


@settings(max_examples=40, deadline=None)
@given(heads=st.lists(head_patterns, min_size=1, max_size=4), L=st.integers(1, 48), causal=st.booleans())
def test_mask_mod_is_the_dense_mask(heads, L, causal):
    pat = Pattern(tuple(heads))
    assert torch.equal(_mask_from_mod(pat, L, causal), torch.from_numpy(pat.mask(L, causal)))


@pytest.mark.parametrize("causal", [True, False])
def test_flex_forward_equals_dense_reference(causal):
    torch.manual_seed(0)
    L, e = 256, 16
    pat = load_pattern("byte-sparse-8h")
    q, k, v = (torch.randn(2, 8, L, e) for _ in range(3))
    with torch.no_grad():
        out = sparse_attention(q, k, v, pat, causal=causal, impl="flex")
        ref, _ = dense_attention(q, k, v, torch.from_numpy(pat.mask(L, causal)))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_rows_without_keys_give_zero_vectors():
    pat = Pattern((HeadPattern(positions=(200,)), HeadPattern(window=2)))
    q, k, v = (torch.randn(1, 2, 256, 8) for _ in range(3))
    with torch.no_grad():
        out = sparse_attention(q, k, v, pat, causal=True, impl="flex")
        ref, _ = dense_attention(q, k, v, torch.from_numpy(pat.mask(256, True)))
    assert torch.count_nonzero(out[0, 0, :200]) == 0
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_block_mask_skips_empty_blocks():
    pat = load_pattern("local:8", n_heads=2)
    bm = block_mask(pat, 1024, True, "cpu")
    kept_blocks = bm.kv_num_blocks.sum().item()
    all_blocks = 2 * (1024 // 128) ** 2
    assert kept_blocks < all_blocks / 4  # a narrow band keeps ~ the diagonal blocks only


def test_cpu_training_through_flex_is_refused_with_one_line():
    q, k, v = (torch.randn(1, 8, 64, 8, requires_grad=True) for _ in range(3))
    with pytest.raises(ConfigError, match="no backward on CPU"):
        sparse_attention(q, k, v, "byte-sparse-8h", impl="flex")


def test_auto_on_cpu_keeps_the_gathered_kernel_and_gradients():
    q, k, v = (torch.randn(1, 8, 64, 8, requires_grad=True) for _ in range(3))
    out = sparse_attention(q, k, v, "byte-sparse-8h")  # auto: CPU -> gather, autograd works
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_flex_cannot_return_probabilities():
    q, k, v = (torch.randn(1, 8, 32, 8) for _ in range(3))
    with pytest.raises(ConfigError, match="probabilities"):
        sparse_attention(q, k, v, "byte-sparse-8h", impl="flex", return_probs=True)


def test_kernel_cache_filled_in_inference_mode_still_trains():
    """Head extraction runs under inference_mode; a later training step of the same shape must work."""
    from attnscope.sparse.attention import _plan

    _plan.cache_clear()
    q, k, v = (torch.randn(1, 8, 96, 8) for _ in range(3))
    with torch.inference_mode():
        sparse_attention(q, k, v, "byte-sparse-8h", impl="gather")
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    sparse_attention(qg, kg, vg, "byte-sparse-8h", impl="gather").sum().backward()
    assert torch.isfinite(qg.grad).all()


@pytest.mark.gpu  # FlexAttention has no CPU backward
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_flex_forward_and_backward_equal_dense_on_cuda(dtype, tol):
    torch.manual_seed(0)
    L, e = 512, 64
    pat = load_pattern("byte-sparse-8h")
    base = [torch.randn(2, 8, L, e, device="cuda", dtype=dtype) for _ in range(3)]
    g = torch.randn(2, 8, L, e, device="cuda", dtype=dtype)
    xs = [x.clone().requires_grad_() for x in base]
    out = sparse_attention(*xs, pat, causal=True, impl="flex")
    out.backward(g)
    ref_in = [x.float().clone().requires_grad_() for x in base]
    ref, _ = dense_attention(*ref_in, torch.from_numpy(pat.mask(L, True)).cuda())
    ref.backward(g.float())
    for got, want in zip([out, *(x.grad for x in xs)], [ref, *(x.grad for x in ref_in)]):
        torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)
