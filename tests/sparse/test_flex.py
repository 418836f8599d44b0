"""The FlexAttention path: forward over the packed key layout equals the dense reference (CPU); a failed compile
falls back to the gathered kernel with one warning. (The layout's mask_mod and blocks: test_layout.py.)"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import ConfigError
from attnscope.sparse import HeadPattern, Pattern, load_pattern, sparse_attention
from attnscope.sparse.attention import dense_attention
from attnscope.sparse.flex import available
from attnscope.sparse.layout import block_mask

from ._strategies import head_patterns

pytestmark = pytest.mark.skipif(not available(), reason="this torch has no FlexAttention")


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
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flex_forward_and_backward_equal_dense_on_cuda(dtype):
    """Output and gradients within 2x the error dense SDPA makes in the same dtype (the fair rule)."""
    from attnscope.sparse.exactness import failures, low_precision_errors

    pat = load_pattern("byte-sparse-8h")
    errors = low_precision_errors(lambda q, k, v: sparse_attention(q, k, v, pat, causal=True, impl="flex"),
                                  pat, 512, 2, 64, "cuda", dtype)
    assert failures(errors) == []

@settings(max_examples=25, deadline=None)
@given(heads=st.lists(head_patterns, min_size=1, max_size=3), L=st.integers(1, 70), causal=st.booleans())
def test_flex_over_the_packed_layout_equals_dense_reference(heads, L, causal):
    """Eager CPU FlexAttention with the layout's BlockMask (8 x 8 blocks: many of them skipped or full)."""
    from attnscope.sparse import flex

    pat = Pattern(tuple(heads))
    torch.manual_seed(L)
    q, k, v = (torch.randn(1, pat.n_heads, L, 4, dtype=torch.float64) for _ in range(3))
    with torch.no_grad():
        out = flex._run(q, k, v, pat, causal, 0.5, compiled=False, block=8)
        ref, _ = dense_attention(q, k, v, torch.from_numpy(pat.mask(L, causal)), 0.5)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)


@pytest.fixture
def broken_compiler(monkeypatch):
    """FlexAttention 'on a GPU' whose compilation fails the way torch 2.11 did (InductorError)."""
    from torch._inductor.exc import InductorError

    from attnscope.sparse import attention, flex

    def compile_fails():
        def run(*args, **kwargs):
            raise InductorError(RuntimeError("backend compiler failed: no kernel for this GPU"), None)
        return run

    monkeypatch.setattr(attention, "_wants_flex", lambda q: flex.usable())
    monkeypatch.setattr(flex, "_compiled_flex", compile_fails)
    monkeypatch.setattr(flex, "_failed", [])
    monkeypatch.setattr(flex, "_verified", set())
    return flex


def test_failed_compile_falls_back_to_the_gathered_kernel_with_one_warning(broken_compiler, monkeypatch):
    from attnscope.errors import AttnscopeWarning

    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    q, k, v = (torch.randn(1, 8, 96, 8, requires_grad=True) for _ in range(3))
    with pytest.warns(AttnscopeWarning) as got:
        out = sparse_attention(q, k, v, "byte-sparse-8h")
        again = sparse_attention(q, k, v, "byte-sparse-8h")
    lines = [str(w.message) for w in got if isinstance(w.message, AttnscopeWarning)]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "InductorError" in lines[0] and "gathered kernel" in lines[0]
    assert "torch 2.11.0+cu130 is below the declared minimum 2.13" in lines[0]
    ref = sparse_attention(q, k, v, "byte-sparse-8h", impl="gather")
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(again, ref, rtol=0, atol=0)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert not broken_compiler.usable()


def test_failed_compile_on_a_current_torch_does_not_blame_the_version(broken_compiler, monkeypatch):
    from attnscope.errors import AttnscopeWarning

    monkeypatch.setattr(torch, "__version__", "2.13.0+cu130")
    q, k, v = (torch.randn(1, 8, 64, 8) for _ in range(3))
    with pytest.warns(AttnscopeWarning, match="FlexAttention failed to compile") as got:
        sparse_attention(q, k, v, "byte-sparse-8h")
    assert "below the declared minimum" not in str(got[0].message)


def test_training_goes_on_when_flex_fails_to_compile(broken_compiler):
    from attnscope.errors import AttnscopeWarning
    from attnscope.training.model import ModelConfig, Transformer

    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2, n_heads=8, d_model=32, d_ff=64, vocab_size=256, max_seq_len=64, causal=True,
                      norm="pre", dropout=0.0, attn_pattern="byte-sparse-8h")
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    idx = torch.randint(0, 256, (2, 64))
    losses = []
    with pytest.warns(AttnscopeWarning) as got:
        for _ in range(3):
            logits = model(idx[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), idx[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert sum(isinstance(w.message, AttnscopeWarning) for w in got) == 1
    assert losses[-1] < losses[0]
