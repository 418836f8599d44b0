"""The gold test's capture routes agree with each other, and its checks can fail.

On transformers 4.x most cases fall back from the AttentionInterface route to the eager ``matmul`` route;
these tests show, on a release that has both, that the two see the same per-head logits and inputs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from .gold import Case, ConfigOf, _Frame, _query_key, _unfold, build, model_logits, run
from .test_gold import CASES, _case

transformers = pytest.importorskip("transformers")

#: one case per way a model lays out its attention call: separate / fused projections, GQA and MQA,
#: a prescaled q (Whisper), relative position bias (T5), cross-attention, a vision encoder
CROSS_CHECKED = ["bert", "LlamaConfig-kv2", "gpt2", "gpt_bigcode-mqa", "whisper", "t5", "vit"]


@pytest.mark.parametrize("case_id", CROSS_CHECKED)
def test_matmul_route_sees_what_the_attention_interface_sees(case_id: str) -> None:
    case = _case(case_id)
    if not hasattr(transformers, "AttentionInterface"):
        pytest.skip(f"transformers {transformers.__version__} has no AttentionInterface: only the matmul route runs")
    model, cfg = build(case)
    via_interface = run(case, model, cfg)
    if {c.via for c in via_interface} != {"interface"}:
        pytest.skip(f"{case_id} does not call AttentionInterface on transformers {transformers.__version__}")
    eager = dataclasses.replace(case, capture="matmul")
    model, cfg = build(eager)
    via_matmul = run(eager, model, cfg)
    assert {c.via for c in via_matmul} == {"matmul"}
    assert [(c.stack, c.layer) for c in via_interface] == [(c.stack, c.layer) for c in via_matmul]
    # the capture function stands in for the attention with an unmasked, unbiased sdpa, so past the first
    # layer the two runs differ in their inputs; where the inputs are the same the logits must be too
    same = [(a, b) for a, b in zip(via_interface, via_matmul) if torch.equal(a.x, b.x) and torch.equal(a.xk, b.xk)]
    assert {a.stack for a, _ in same} >= {c.stack for c in via_interface if c.layer == 0 and c.stack != "cross"}
    for a, b in same:
        want = model_logits(a, case.prescaled)
        np.testing.assert_allclose(model_logits(b, case.prescaled), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _frame(scale: float) -> tuple[Case, _Frame, dict, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 3, 8, generator=g)  # [b, h, i, e]
    k = torch.randn(2, 4, 3, 8, generator=g)
    frame = _Frame(torch.nn.Identity(), qk=(q * scale, k), q_out=q.transpose(1, 2).reshape(2, 3, 32))
    case = Case("toy", ConfigOf("BertConfig"), "BertModel", {}, "query", "key")
    return case, frame, {"q": torch.nn.Linear(32, 32), "k": torch.nn.Linear(32, 32)}, q


@pytest.mark.parametrize("scale", [1.0, 8**-0.5])
def test_a_prescaled_query_is_brought_back_to_the_projection(scale: float) -> None:
    case, frame, subs, q = _frame(scale)
    got, _ = _query_key(case, frame, subs, "toy")
    torch.testing.assert_close(got, q)


@pytest.mark.parametrize("scale", [2.0, 0.5, 8**-0.25])
def test_a_query_scaled_otherwise_fails_the_capture(scale: float) -> None:
    case, frame, subs, _ = _frame(scale)
    with pytest.raises(AssertionError, match="neither 1 nor"):
        _query_key(case, frame, subs, "toy")


def test_a_module_without_a_visible_product_fails_the_capture() -> None:
    case, frame, subs, _ = _frame(1.0)
    frame.qk = None
    with pytest.raises(AssertionError, match="no query-key product"):
        _query_key(case, frame, subs, "toy")


def test_folded_products_unfold_to_heads() -> None:
    g = torch.Generator().manual_seed(1)
    n, h, i, j, e = 2, 4, 3, 5, 8
    q, k = torch.randn(n, h, i, e, generator=g), torch.randn(n, h, j, e, generator=g)
    # [(n h), i, e] as bmm-based eager code makes it
    uq, uk = _unfold(q.reshape(n * h, i, e), k.reshape(n * h, j, e), n, i)
    assert torch.equal(uq, q) and torch.equal(uk, k)
    # multi-query [n, (i h), e] with one key head, as GPTBigCode's MQA did before the AttentionInterface
    uq, uk = _unfold(q.transpose(1, 2).reshape(n, i * h, e), k[:, 0], n, i)
    assert torch.equal(uq, q) and torch.equal(uk, k[:, :1])


def test_every_cross_checked_case_exists() -> None:
    assert set(CROSS_CHECKED) <= {c.id for c in CASES}
