"""A sparse-pattern model under torch.compile: the attention keeps its FlexAttention plan from the first eager
call, later calls run the plan's tensor work alone (same output), and dynamo traces the whole model without a
graph break. FlexAttention's path is CUDA-only in ``impl="auto"``; here it is forced on CPU (forward only)."""

from __future__ import annotations

import pytest
import torch

from attnscope.sparse import attention as sparse_attention_module
from attnscope.sparse.flex import available
from attnscope.training.model import Transformer, preset_config

pytestmark = pytest.mark.skipif(not available(), reason="this torch has no FlexAttention")


def _model() -> Transformer:
    torch.manual_seed(0)
    cfg = preset_config("bert-base", vocab_size=64, n_layers=2, n_heads=8, d_model=64, d_ff=64, causal=True,
                        norm="pre", pos="rotary", max_seq_len=256, attn_pattern="byte-sparse-8h")
    return Transformer(cfg).eval()


def _plans(model: Transformer) -> list[dict]:
    return [m._flex_plans for m in model.modules() if hasattr(m, "_flex_plans")]


@pytest.fixture
def flex_on_cpu(monkeypatch):
    monkeypatch.setattr(sparse_attention_module, "_wants_flex", lambda q: True)


def test_the_first_eager_call_keeps_a_plan_and_the_plan_gives_the_same_output(flex_on_cpu):
    model, x = _model(), torch.randint(0, 64, (2, 256))
    with torch.no_grad():
        first = model(x)
        plans = _plans(model)
        assert len(plans) == 2 and all(list(p) == [(256, torch.device("cpu"), torch.float32, False, "byte-sparse-8h", True)] for p in plans)
        again = model(x)  # through the plan
    torch.testing.assert_close(again, first)


def test_a_planned_model_traces_without_graph_breaks(flex_on_cpu):
    model, x = _model(), torch.randint(0, 64, (1, 256))
    with torch.no_grad():
        cold = torch._dynamo.explain(model)(x)  # no plan yet: the pattern's host-side set-up breaks the graph
        assert cold.graph_break_count > 0
        model(x)  # eager: keeps the plans
        warm = torch._dynamo.explain(model)(x)
    assert warm.graph_break_count == 0 and warm.graph_count == 1, [r.reason[:120] for r in warm.break_reasons]


def test_where_the_pattern_is_gathered_no_plan_is_kept():
    model, x = _model(), torch.randint(0, 64, (1, 256))
    with torch.no_grad():
        model(x)
    assert all(p == {} for p in _plans(model))


def test_where_the_pattern_is_gathered_compile_leaves_the_attention_eager_and_gives_the_same_output():
    """Without a plan (CPU: the gathered kernel) dynamo does not trace the attention's chunk loops (which took over
    10 minutes to compile for a 4-layer model): every graph break is the eager attention, and the rest compiles."""
    model, x = _model(), torch.randint(0, 64, (1, 256))
    with torch.no_grad():
        eager = model(x)
        explained = torch._dynamo.explain(model)(x)
        compiled = torch.compile(model)(x)
    reasons = [r.reason for r in explained.break_reasons]
    assert reasons and all("_unplanned" in r for r in reasons), [r[:120] for r in reasons]
    assert explained.graph_count == explained.graph_break_count + 1
    torch.testing.assert_close(compiled, eager)


def test_a_model_moved_to_another_dtype_or_given_another_pattern_makes_a_new_plan(flex_on_cpu, monkeypatch):
    """A plan's kernel options were chosen for one dtype and its layout is one pattern's: after model.to(bf16) or a
    new pattern, the next call plans again for what it now runs (and still matches the gathered attention)."""
    from attnscope.sparse import flex

    made = []
    real = flex.options_for

    def spy(q, k, v, pattern, causal, scale):
        made.append((q.dtype, pattern.n_heads))
        return real(q, k, v, pattern, causal, scale)

    monkeypatch.setattr(flex, "options_for", spy)
    model, x = _model(), torch.randint(0, 64, (1, 256))
    with torch.no_grad():
        model(x)
        assert made and set(made) == {(torch.float32, 8)}
        n = len(made)
        model.to(torch.bfloat16)
        planned = model(x)  # planned again: options chosen for bf16
        assert len(made) > n and set(made[n:]) == {(torch.bfloat16, 8)}
        n = len(made)
        with monkeypatch.context() as m:
            m.setattr(sparse_attention_module, "_wants_flex", lambda q: False)
            gathered = model(x)
        torch.testing.assert_close(planned.float(), gathered.float(), atol=3e-2, rtol=3e-2)
        attn = [m for m in model.modules() if hasattr(m, "_flex_plans")]
        for a in attn:
            a.pattern = "local:16"
        local = model(x)
        assert len(made) > n
        for a in attn:
            a._flex_plans.clear()
        with monkeypatch.context() as m:
            m.setattr(sparse_attention_module, "_wants_flex", lambda q: False)
            torch.testing.assert_close(local.float(), model(x).float(), atol=3e-2, rtol=3e-2)
