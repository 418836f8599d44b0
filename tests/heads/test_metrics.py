"""Head metrics vs an explicit python-loop reference, plus properties of known maps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import AttnscopeError
from attnscope.heads.metrics import METRICS, PERIODS, head_metrics, js_divergence_rows, pairwise_js, window_metrics


def slow_metrics(A: np.ndarray, causal: bool, tok=None, cls_id=None, sep_id=None) -> dict[str, float]:
    """One head, one window: A [L, L]. Loops over every entry, straight from the definitions."""
    L = A.shape[0]
    vis = lambda i, j: (j <= i) if causal else True  # noqa: E731
    out: dict[str, float] = {}
    H = []
    for i in range(L):
        h = 0.0
        for j in range(L):
            if A[i, j] > 0:
                h -= A[i, j] * math.log(A[i, j])
        H.append(h)
    out["entropy"] = sum(H) / L
    out["sparsity"] = sum(A[i, j] < 1e-4 for i in range(L) for j in range(L)) / L**2
    out["distance"] = sum(A[i, j] * abs(i - j) for i in range(L) for j in range(L)) / L
    norm = [H[i] / math.log(sum(vis(i, j) for j in range(L))) for i in range(L) if sum(vis(i, j) for j in range(L)) >= 2]
    out["entropy_norm"] = sum(norm) / len(norm) if norm else float("nan")
    n_vis = sum(vis(i, j) for i in range(L) for j in range(L))
    out["sparsity_visible"] = sum(A[i, j] < 1e-4 and vis(i, j) for i in range(L) for j in range(L)) / n_vis
    out["lookback"] = sum(A[i, j] * (i - j) for i in range(L) for j in range(L)) / L
    out["confidence"] = sum(max(A[i]) for i in range(L)) / L
    out["sink_first"] = sum(A[i, 0] for i in range(L)) / L
    out["diag_mass"] = sum(A[i, i] for i in range(L)) / L
    out["prev_mass"] = sum(A[i, i - 1] for i in range(1, L)) / (L - 1) if L > 1 else float("nan")
    out["next_mass"] = sum(A[i, i + 1] for i in range(L - 1)) / (L - 1) if L > 1 else float("nan")
    nan = float("nan")
    best, period, ok = nan, nan, False
    R = max(1, L // 8)
    far = [[vis(i, j) and abs(i - j) > R for j in range(L)] for i in range(L)]
    m_far_rows = [sum(A[i, j] for j in range(L) if far[i][j]) for i in range(L)]
    for s in PERIODS:
        if s > R or not any(any(r) for r in far):
            break
        expected = observed = 0.0
        for i in range(L):
            nf = sum(far[i])
            if nf:
                expected += m_far_rows[i] * sum(far[i][j] and j % s == 0 and j > 0 for j in range(L)) / nf
            observed += sum(A[i, j] for j in range(L) if far[i][j] and j % s == 0 and j > 0)
        ratio = observed / expected if expected > 0 else 0.0
        if math.isnan(best) or ratio > 1.25 * best:
            best, period = ratio, s
    ok = sum(m_far_rows) / L >= 0.05
    out["period_enrichment"] = best
    out["period"] = period if (best >= 2 and ok) else nan
    out["sink_cls"] = out["sink_sep"] = out["dup_score"] = out["induction_score"] = nan
    if tok is not None:
        if cls_id is not None:
            out["sink_cls"] = sum(A[i, j] for i in range(L) for j in range(L) if tok[j] == cls_id) / L
        if sep_id is not None:
            out["sink_sep"] = sum(A[i, j] for i in range(L) for j in range(L) if tok[j] == sep_id) / L
        dup, ind = [], []
        for i in range(L):
            dj = [j for j in range(i) if tok[j] == tok[i]]
            if dj:
                dup.append(sum(A[i, j] for j in dj))
            ij = [j for j in range(1, i + 1) if tok[j - 1] == tok[i]]
            if ij:
                ind.append(sum(A[i, j] for j in ij))
        out["dup_score"] = sum(dup) / len(dup) if dup else nan
        out["induction_score"] = sum(ind) / len(ind) if ind else nan
    return out


def random_maps(rng, b, h, L, causal, peaky=False):
    logits = rng.normal(size=(b, h, L, L)) * (8.0 if peaky else 1.0)
    if causal:
        logits = np.where(np.tril(np.ones((L, L), bool)), logits, -np.inf)
    A = np.exp(logits - logits.max(-1, keepdims=True))
    return A / A.sum(-1, keepdims=True)


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 12), causal=st.booleans(), peaky=st.booleans(), seed=st.integers(0, 10_000))
def test_matches_slow_reference(L, causal, peaky, seed):
    rng = np.random.default_rng(seed)
    A = random_maps(rng, 2, 2, L, causal, peaky)
    tok = rng.integers(0, 3, size=(2, L))
    got = window_metrics(torch.from_numpy(A), causal, token_ids=tok, cls_id=0, sep_id=2)
    assert set(got) == set(METRICS)
    for b in range(2):
        for h in range(2):
            ref = slow_metrics(A[b, h], causal, tok[b], 0, 2)
            for name in METRICS:
                assert got[name][b, h].item() == pytest.approx(ref[name], abs=1e-9, nan_ok=True), name


@settings(max_examples=20, deadline=None)
@given(L=st.integers(2, 40))
def test_uniform_causal_map(L):
    A = torch.tril(torch.ones(L, L, dtype=torch.float64))
    A = A / A.sum(-1, keepdim=True)
    m = window_metrics(A[None], causal=True)
    assert m["entropy_norm"].item() == pytest.approx(1.0, abs=1e-12)
    assert m["sparsity_visible"].item() == 0.0
    # all upper-triangle entries are exact zeros: seed sparsity counts them
    assert m["sparsity"].item() == pytest.approx((L * (L - 1) / 2) / L**2)
    assert m["lookback"].item() == pytest.approx(m["distance"].item())
    assert m["lookback"].item() == pytest.approx(sum(i / 2 for i in range(L)) / L)


@settings(max_examples=20, deadline=None)
@given(L=st.integers(2, 40), causal=st.booleans())
def test_one_hot_previous_token_map(L, causal):
    A = torch.zeros(1, L, L, dtype=torch.float64)
    A[0, 0, 0] = 1.0
    for i in range(1, L):
        A[0, i, i - 1] = 1.0
    m = window_metrics(A, causal=causal, token_ids=torch.arange(L))
    assert m["prev_mass"].item() == 1.0
    assert m["distance"].item() == pytest.approx((L - 1) / L)  # row 0 attends to itself
    assert m["confidence"].item() == 1.0
    assert m["entropy"].item() == 0.0 and m["entropy_norm"].item() == 0.0
    assert m["diag_mass"].item() == pytest.approx(1 / L)
    assert math.isnan(m["dup_score"].item())  # all tokens distinct: no row has a duplicate


@pytest.mark.parametrize("causal", [True, False])
def test_periodicity_matches_slow_reference_at_longer_length(causal):
    rng = np.random.default_rng(7)
    A = random_maps(rng, 1, 2, 40, causal, peaky=True)
    got = window_metrics(torch.from_numpy(A), causal)
    for h in range(2):
        ref = slow_metrics(A[0, h], causal)
        for name in ("period", "period_enrichment"):
            assert got[name][0, h].item() == pytest.approx(ref[name], abs=1e-9, nan_ok=True)


def test_strided_head_is_found_periodic():
    L = 96
    A = torch.zeros(1, L, L, dtype=torch.float64)
    for i in range(L):
        keys = [j for j in range(i + 1) if j % 8 == 0 or j == i]
        A[0, i, keys] = 1.0 / len(keys)
    m = window_metrics(A, causal=True)
    assert m["period"].item() == 8.0 and m["period_enrichment"].item() > 4
    # byte-sparse-8h heads 3-5: local(32) | stride(8) at L = 256 -> period 8, not a multiple
    L2 = 256
    mask = torch.from_numpy(__import__("attnscope.sparse", fromlist=["x"]).load_pattern("byte-sparse-8h").mask(L2, True)[3])
    B = mask.to(torch.float64) / mask.sum(-1, keepdim=True)
    assert window_metrics(B[None], causal=True)["period"].item() == 8.0
    local = torch.tril(torch.ones(L, L, dtype=torch.float64)) - torch.tril(torch.ones(L, L, dtype=torch.float64), -3)
    local = local / local.sum(-1, keepdim=True)
    assert math.isnan(window_metrics(local[None], causal=True)["period"].item())


def test_induction_map_scores_one():
    # tokens "a b c a b c": an induction head at i attends to the token after the previous occurrence
    tok = torch.tensor([0, 1, 2, 0, 1, 2])
    L = 6
    A = torch.zeros(1, L, L, dtype=torch.float64)
    for i in range(L):
        A[0, i, i + 1 - 3 if i >= 3 else 0] = 1.0
    m = window_metrics(A, causal=True, token_ids=tok)
    assert m["induction_score"].item() == 1.0
    assert m["dup_score"].item() == 0.0


def test_head_metrics_table_and_batch_spread():
    rng = np.random.default_rng(0)
    A = random_maps(rng, 5, 3, 12, causal=True)
    df = head_metrics(A, causal=True)
    assert list(df["head"]) == [0, 1, 2] and (df["n_windows"] == 5).all()
    per = window_metrics(torch.from_numpy(A), causal=True)
    np.testing.assert_allclose(df["entropy"], per["entropy"].mean(0).numpy())
    np.testing.assert_allclose(df["entropy_std"], per["entropy"].std(0).numpy())  # sample std
    # [h, L, L] input is one window
    one = head_metrics(A[0], causal=True)
    assert (one["n_windows"] == 1).all() and one["entropy_std"].isna().all()


@pytest.mark.parametrize(
    "bad",
    [np.ones((2, 3, 4)), np.ones((4, 4)), np.full((1, 2, 3, 3), 0.5), -np.eye(3)[None], "maps"],
)
def test_bad_maps_are_clear_errors(bad):
    with pytest.raises(AttnscopeError):
        head_metrics(bad, causal=False)


def test_js_divergence():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    d = js_divergence_rows(p, q)
    assert d[0].item() == pytest.approx(math.log(2)) and d[1].item() == pytest.approx(0.0)
    rows = torch.stack([p, q, p])  # [3 heads, 2 rows, 2 keys]
    D = pairwise_js(rows)
    assert torch.allclose(D, D.T) and torch.allclose(torch.diagonal(D), torch.zeros(3, dtype=torch.float64))
    assert D[0, 1].item() == pytest.approx(math.log(2) / 2) and D[0, 2].item() == pytest.approx(0.0)


@pytest.mark.parametrize("budget", [1, 7, 10_000_000])
def test_pairwise_js_blocks_do_not_change_the_result(budget):
    g = torch.Generator().manual_seed(0)
    rows = torch.rand(5, 3, 6, generator=g, dtype=torch.float64)
    rows = rows / rows.sum(-1, keepdim=True)  # [5 heads, 3 rows, 6 keys]
    ref = torch.tensor([[js_divergence_rows(rows[a], rows[b]).mean().item() for b in range(5)] for a in range(5)],
                       dtype=torch.float64)  # one pair at a time
    assert torch.allclose(pairwise_js(rows, budget=budget), ref, atol=1e-12)


# --------------------------------------------------------------------------- map_overview


def slow_overview(A: np.ndarray, side: int) -> tuple[np.ndarray, int]:
    """One [L, L] map: block side b = ceil(L / side); cell (q, k) = max over the block, by loops."""
    L = A.shape[0]
    b = 1
    while b * side < L:
        b += 1
    n = (L + b - 1) // b
    out = np.full((n, n), -np.inf)
    for i in range(L):
        for j in range(L):
            out[i // b, j // b] = max(out[i // b, j // b], A[i, j])
    return out, b


@settings(max_examples=60)
@given(L=st.integers(1, 90), side=st.integers(1, 70), seed=st.integers(0, 2**16))
def test_map_overview_equals_block_maxima_by_loops(L, side, seed):
    from attnscope.heads.metrics import map_overview

    A = np.random.default_rng(seed).random((2, L, L))
    got, b = map_overview(A, side)
    for h in range(2):
        want, wb = slow_overview(A[h], side)
        assert b == wb and got.shape[-1] <= side
        np.testing.assert_array_equal(got[h], want)


def test_map_overview_keeps_a_one_token_stripe_at_full_strength():
    """An induction-like stripe (one key per query, far off the diagonal) survives the shrink at weight 1."""
    from attnscope.heads.metrics import map_overview

    T = 127
    L = 2 * T + 1
    A = np.zeros((L, L))
    A[np.arange(L), 0] = 1.0  # rows of the first copy: all on the start token
    A[np.arange(T + 1, L), np.arange(T + 1, L) - T + 1] = 1.0  # second copy: the token after the earlier one
    A[T + 1 :, 0] = 0.0
    got, b = map_overview(A, 64)
    assert b == 4 and got.shape == (64, 64)
    q = np.arange(-(-(T + 1) // b), 64)  # query blocks wholly in the second copy
    assert (got[q, (q * b - T + 1) // b] == 1.0).all()  # row q*b's key q*b - T + 1, at full weight
    assert (got[: (T + 1) // b, 0] == 1.0).all()  # the first copy's sink column
    assert not A[:64, 1:64].any()  # the top-left 64 x 64 corner shows only the sink: no stripe at all


def test_map_overview_refuses_what_is_not_a_square_map():
    from attnscope.heads.metrics import map_overview

    with pytest.raises(AttnscopeError, match="must be"):
        map_overview(np.zeros((3, 4)), 2)
    with pytest.raises(AttnscopeError, match="side"):
        map_overview(np.zeros((3, 3)), 0)
