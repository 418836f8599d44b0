"""The sparse kernel equals the dense masked reference (forward and gradients), never sees the future,
and gives zeros (not NaN) on rows with no allowed key."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import AttnscopeError
from attnscope.sparse import HeadPattern, Pattern, dense_mask
from attnscope.sparse.attention import dense_attention, sparse_attention


def _qkv(b, h, t, e, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, t, e, generator=g, dtype=dtype, requires_grad=True) for _ in range(3)]


def _slow_attention(q, k, v, mask):
    """Python loops: one row at a time, zero output for rows without keys."""
    b, h, t, e = q.shape
    out = torch.zeros_like(q)
    for bi in range(b):
        for hi in range(h):
            for i in range(t):
                js = [j for j in range(t) if mask[hi, i, j]]
                if not js:
                    continue
                s = torch.stack([(q[bi, hi, i] * k[bi, hi, j]).sum() / e**0.5 for j in js])
                p = torch.softmax(s, 0)
                out[bi, hi, i] = sum(p[n] * v[bi, hi, j] for n, j in enumerate(js))
    return out


@pytest.mark.parametrize("impl", ["gather", "dense", "auto"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("t", [1, 9, 70, 300])
def test_byte_sparse_8h_matches_sdpa_forward_and_backward(causal, t, impl):
    q, k, v = _qkv(2, 8, t, 8, seed=t)
    mask = dense_mask("byte-sparse-8h", t, causal)
    out = sparse_attention(q, k, v, "byte-sparse-8h", causal=causal, impl=impl)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(out)
    ga = torch.autograd.grad((out * g).sum(), (q, k, v))
    gb = torch.autograd.grad((ref * g).sum(), (q, k, v))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_matches_python_loop_reference():
    pat = Pattern(heads=(HeadPattern(window=1), HeadPattern(stride=3, anchors=(0.5,)), HeadPattern(window=0, positions=(4,))))
    q, k, v = _qkv(1, 3, 11, 4, seed=3)
    for causal in (True, False):
        out = sparse_attention(q, k, v, pat, causal=causal)
        slow = _slow_attention(q, k, v, pat.mask(11, causal))
        torch.testing.assert_close(out, slow, rtol=1e-10, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(
    t=st.integers(1, 40),
    window=st.one_of(st.none(), st.integers(0, 20)),
    stride=st.one_of(st.none(), st.integers(1, 9)),
    anchors=st.lists(st.floats(0, 1), max_size=3),
    causal=st.booleans(),
    dense_second=st.booleans(),
)
def test_random_patterns_match_dense_reference(t, window, stride, anchors, causal, dense_second):
    if window is None and not stride and not anchors:
        window = 0
    hp = HeadPattern(window=window, stride=stride, anchors=tuple(anchors))
    pat = Pattern(heads=(hp, HeadPattern(dense=True) if dense_second else hp, hp))
    q, k, v = _qkv(1, 3, t, 4, seed=t)
    mask = torch.from_numpy(pat.mask(t, causal))
    out, probs = sparse_attention(q, k, v, pat, causal=causal, return_probs=True, impl="gather")
    ref_out, ref_probs = dense_attention(q, k, v, mask)
    out_d, probs_d = sparse_attention(q, k, v, pat, causal=causal, return_probs=True, impl="dense")
    torch.testing.assert_close(out_d, ref_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(probs_d, ref_probs, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(probs, ref_probs, rtol=1e-10, atol=1e-10)
    assert (probs.masked_select(~mask.expand_as(probs)) == 0).all()
    g = torch.randn_like(out)
    ga = torch.autograd.grad((out * g).sum(), (q, k, v))
    gb = torch.autograd.grad((ref_out * g).sum(), (q, k, v))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("impl", ["gather", "dense"])
def test_rows_without_keys_are_zero_not_nan(impl):
    # anchor at the last position only: causal rows before it see nothing
    pat = Pattern(heads=(HeadPattern(anchors=(1.0,)), HeadPattern(positions=(3,))))
    q, k, v = _qkv(1, 2, 6, 4)
    out, probs = sparse_attention(q, k, v, pat, causal=True, return_probs=True, impl=impl)
    assert torch.isfinite(out).all()
    assert (out[0, 0, :5] == 0).all() and (probs[0, 0, :5] == 0).all()
    assert (out[0, 1, :3] == 0).all() and torch.allclose(out[0, 1, 3:], v[0, 1, 3].expand(3, -1))
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))


def test_kernel_cannot_see_the_future():
    t = 257
    q, k, v = _qkv(1, 8, t, 8, seed=5)
    out = sparse_attention(q, k, v, "byte-sparse-8h", causal=True)
    cut = 100
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[:, :, cut:] = torch.randn_like(k2[:, :, cut:]) * 10
    v2[:, :, cut:] = torch.randn_like(v2[:, :, cut:]) * 10
    out2 = sparse_attention(q, k2, v2, "byte-sparse-8h", causal=True)
    torch.testing.assert_close(out[:, :, :cut], out2[:, :, :cut], rtol=0, atol=0)
    assert not torch.allclose(out[:, :, cut:], out2[:, :, cut:])


def test_float32_close_to_sdpa():
    q, k, v = _qkv(1, 8, 513, 32, dtype=torch.float32)
    mask = dense_mask("byte-sparse-8h", 513, True)
    torch.testing.assert_close(
        sparse_attention(q, k, v, "byte-sparse-8h"), F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=1e-4, atol=1e-5
    )


def test_shape_and_head_count_errors():
    q, k, v = _qkv(1, 4, 8, 4)
    with pytest.raises(AttnscopeError):
        sparse_attention(q, k, v, "byte-sparse-8h")
    with pytest.raises(AttnscopeError):
        sparse_attention(q[0], k[0], v[0], "local:2")
    with pytest.raises(AttnscopeError):
        sparse_attention(q, k, v, "local:2", impl="flex")


@pytest.mark.parametrize("impl", ["gather", "dense", "auto"])
@pytest.mark.parametrize("causal", [True, False])
def test_values_with_their_own_head_dim_match_dense(impl, causal):
    """v [b,h,t,ev] with ev != e is accepted by the shape check, so every kernel must honour it (the gathered
    band once reshaped its output to q's head dim and failed)."""
    q, k, _ = _qkv(1, 8, 70, 8)
    v = torch.randn(1, 8, 70, 5, dtype=torch.float64, requires_grad=True)
    mask = dense_mask("byte-sparse-8h", 70, causal)
    out = sparse_attention(q, k, v, "byte-sparse-8h", causal=causal, impl=impl)
    ref, _ = dense_attention(q, k, v, mask)
    assert out.shape == (1, 8, 70, 5)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    got = torch.autograd.grad((out * g).sum(), (q, k, v))
    want = torch.autograd.grad((ref * g).sum(), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_rows_without_keys_give_zero_gradients_to_every_input():
    """Keys only beyond the sequence: every row attends to nothing; k and v get zero gradients (as in the dense
    reference), not None, and v's head dim is kept."""
    q, k, _ = _qkv(1, 2, 20, 4)
    v = torch.randn(1, 2, 20, 3, dtype=torch.float64, requires_grad=True)
    out = sparse_attention(q, k, v, {"all": {"positions": [100]}})
    assert out.shape == (1, 2, 20, 3) and not out.any()
    out.sum().backward()
    assert all(x.grad is not None and not x.grad.any() for x in (q, k, v))


@pytest.mark.parametrize(
    "args, kwargs, names",
    [
        (("q32", "k16", "v32"), {}, ("dtype", "float16")),
        (("q64i", "q64i", "q64i"), {}, ("floating", "int64")),
        (("empty_t", "empty_t", "empty_t"), {}, ("empty", "(1, 8, 0, 4)")),
        (("empty_b", "empty_b", "empty_b"), {}, ("empty", "(0, 8, 6, 4)")),
        (("q32", "q32", "q32"), {"scale": "x"}, ("scale",)),
        (("q32", "q32", "q32"), {"scale": float("nan")}, ("scale", "nan")),  # was an all-NaN output
        (("q32", [1.0], "q32"), {}, ("k must be a torch.Tensor",)),
        (("q32", "q32", "q32"), {"causal": "False"}, ("causal",)),  # a non-empty string was read as True
    ],
)
def test_bad_inputs_are_one_sentence_naming_them(args, kwargs, names):
    x = {
        "q32": torch.randn(1, 8, 6, 4), "k16": torch.randn(1, 8, 6, 4, dtype=torch.float16),
        "v32": torch.randn(1, 8, 6, 4), "q64i": torch.ones(1, 8, 6, 4, dtype=torch.int64),
        "empty_t": torch.randn(1, 8, 0, 4), "empty_b": torch.randn(0, 8, 6, 4),
    }
    q, k, v = (x[a] if isinstance(a, str) else a for a in args)
    with pytest.raises(AttnscopeError) as err:
        sparse_attention(q, k, v, "byte-sparse-8h", **kwargs)
    assert all(n in str(err.value) for n in names) and "\n" not in str(err.value)


@pytest.mark.parametrize("scale", [np.float32(0.3), torch.tensor(0.3), 0.3])
def test_a_scale_given_as_any_real_number_is_taken(scale):
    """numpy scalars and 0-dim tensors were taken as scale (float(scale)) before inputs were checked: still are."""
    q = torch.randn(1, 8, 12, 4, dtype=torch.float64)
    ref, _ = dense_attention(q, q, q, dense_mask("byte-sparse-8h", 12, True), scale=0.3)
    torch.testing.assert_close(sparse_attention(q, q, q, "byte-sparse-8h", scale=scale), ref.to(q.dtype),
                               atol=1e-5, rtol=1e-5)
    with pytest.raises(AttnscopeError, match="scale"):
        sparse_attention(q, q, q, "byte-sparse-8h", scale=True)


def test_mixed_dtypes_under_autocast_still_run():
    """Rotary positions under bf16 autocast give float32 q, k and a bf16 v: the training model's case."""
    q = torch.randn(1, 8, 70, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sparse_attention(q, q, q.bfloat16(), "byte-sparse-8h", impl="gather")
    ref, _ = dense_attention(q, q, q.bfloat16().float(), dense_mask("byte-sparse-8h", 70, True))
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


def test_an_edited_pattern_file_is_read_again(tmp_path):
    """A notebook edits its pattern file and runs again: the new pattern, never the cached old one."""
    path = tmp_path / "p.yaml"
    q, k, v = _qkv(1, 2, 20, 4)
    path.write_text("all: {window: 2}\n")
    sparse_attention(q, k, v, str(path))
    path.write_text("all: {window: 0, stride: 5}\n")
    out = sparse_attention(q, k, v, str(path))
    ref, _ = dense_attention(q, k, v, dense_mask({"all": {"window": 0, "stride": 5}}, 20, True, n_heads=2))
    torch.testing.assert_close(out, ref)


def test_one_head_pattern_serves_every_head():
    """sparse_attention(q, k, v, HeadPattern(window=3)) in a notebook: every head, as "local:3" (it was an error
    that did not say what a pattern may be)."""
    q, k, v = _qkv(1, 4, 30, 4)
    torch.testing.assert_close(sparse_attention(q, k, v, HeadPattern(window=3)), sparse_attention(q, k, v, "local:3"))
    with pytest.raises(AttnscopeError, match="a sparse pattern is a Pattern, HeadPattern, preset name"):
        sparse_attention(q, k, v, 3)
