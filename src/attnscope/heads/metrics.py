"""Per-head metrics of attention maps: pure functions on [b, h, L, L] maps (rows = queries, sum to 1).

Einstein legend: b batch (window), h head, i query position, j key position, L window length.

The three profile metrics of the dense-vs-sparse byte-model study, exactly as it defined them (docs/heads.md):

* ``entropy``   (1/L) sum_i [-sum_j A_ij ln A_ij], nats, mean over ALL rows
* ``sparsity``  #{(i,j): A_ij < 1e-4} / L^2 (ALL entries: a causal map's upper triangle counts)
* ``distance``  (1/L) sum_i sum_j A_ij abs(i - j)

Causal-aware versions, under names of their own ("visible" = j <= i for causal maps, all j otherwise):

* ``entropy_norm``      per row H_i / ln(#visible keys of row i), mean over rows with >= 2 visible keys
                        (1 = uniform over what the row could see, 0 = one-hot)
* ``sparsity_visible``  fraction of the VISIBLE entries below 1e-4
* ``lookback``          mean over rows of E[i - j] (signed: negative = looks ahead, for encoders)

From the literature (Clark et al. 2019, Voita et al. 2019, TransformerLens head detectors):

* ``confidence``   mean over rows of max_j A_ij
* ``sink_first``   mean mass on key 0; ``sink_cls`` / ``sink_sep`` mass on keys whose token is
                   [CLS] / [SEP] (NaN unless token ids and those ids are given)
* ``diag_mass``    mean A_ii; ``prev_mass`` mean over rows i >= 1 of A_{i,i-1} (this IS the
                   previous-token score: fraction of each row's mass on the previous token);
                   ``next_mass`` mean over rows i <= L-2 of A_{i,i+1}
* ``dup_score``    duplicate-token score: mass on earlier keys with the same token as the query,
                   averaged over the rows that have such a key (NaN if none)
* ``induction_score`` mass on keys j <= i whose PREVIOUS token equals the query's token (the token
                   after an earlier occurrence), averaged over the rows that have such a key

Causal-only metrics (:data:`CAUSAL_DEFINED`): ``dup_score`` and ``induction_score`` describe
copying from the PAST and keep their causal definition (earlier keys only) on every model. On a
bidirectional encoder they are still well defined but measure only part of what a head may do (it
can copy from a later occurrence as well); the extraction table says so in its ``causal`` column
and the CLI labels them. ``prev_mass`` needs no label: A_{i,i-1} is one position for either kind.

Periodicity (for ``attnscope heads derive``; strided heads attend to keys ``j % s == 0``):

* ``period_enrichment`` with a far radius R = L // 8, for each s in :data:`PERIODS` with s <= R: the
  mass on far visible keys (``abs(i-j) > R``) with ``j % s == 0`` and ``j > 0`` (key 0 is the sink,
  measured on its own), divided by what a head spreading its far mass uniformly over the far keys
  would put there (1 = no preference, s = everything on the stride). One far region for every s, so a
  local window does not favour large s; scanning s upwards, a larger s is taken only when its ratio
  beats the current one by 25% (multiples of a true stride tie with it)
* ``period``       the s chosen, when its enrichment is >= 2 and the far mass is >= 5%; else NaN.
                   Over windows the table reports its most frequent value (not a mean)

:func:`map_overview` shrinks a map to at most ``side`` x ``side`` cells for a picture: each cell the
largest weight of its ``b`` x ``b`` block of (query, key) positions, ``b = ceil(L / side)``, so a one-hot
stripe (previous token, induction, a sink column) stays at full strength wherever it lies.

:func:`window_metrics` returns one value per (window, head); :func:`head_metrics` averages over
windows and reports the spread (sample std). Everything here runs on torch tensors (numpy arrays
are accepted) and never loops in Python over positions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnscope.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd
    import torch

SPARSE_EPS = 1e-4

PROFILE_METRICS = ("entropy", "sparsity", "distance")
METRICS = (
    "entropy",
    "sparsity",
    "distance",
    "entropy_norm",
    "sparsity_visible",
    "lookback",
    "confidence",
    "sink_first",
    "sink_cls",
    "sink_sep",
    "diag_mass",
    "prev_mass",
    "next_mass",
    "dup_score",
    "induction_score",
    "period",
    "period_enrichment",
)

#: metrics defined on earlier keys only (their causal definition), whatever the model's masking
CAUSAL_DEFINED = ("dup_score", "induction_score")

#: candidate absolute strides for the periodicity metric
PERIODS = (4, 8, 16, 32, 64)
#: enrichment needed before a head is called periodic
PERIOD_MIN_ENRICHMENT = 2.0
#: a larger stride replaces a smaller one only when its enrichment is this much higher (a head on
#: every 8th key is as enriched on every 16th: multiples of the true stride must not win ties)
PERIOD_SWITCH = 1.25


def as_maps(maps: Any) -> "torch.Tensor":
    """Maps as a float tensor [b, h, L, L] (a [h, L, L] input becomes b = 1); shape checked."""
    import numpy as np
    import torch

    if isinstance(maps, np.ndarray):
        maps = torch.from_numpy(maps)
    if not isinstance(maps, torch.Tensor):
        raise InputError(f"attention maps must be an array or tensor, not {type(maps).__name__}")
    if maps.dim() == 3:
        maps = maps.unsqueeze(0)
    if maps.dim() != 4 or maps.shape[-1] != maps.shape[-2] or maps.shape[-1] == 0:
        raise InputError(f"attention maps must be [heads, L, L] or [batch, heads, L, L], got {tuple(maps.shape)}")
    if not maps.is_floating_point():
        maps = maps.float()
    return maps.detach()


def check_rows(maps: "torch.Tensor", tol: float = 1e-3) -> None:
    """Raise InputError unless every row is a probability distribution (finite, >= 0, sums to 1)."""
    import torch

    finite = torch.isfinite(maps)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        raise InputError(f"attention maps hold {bad:,} NaN or infinite weights of {maps.numel():,}: the forward pass "
                         "overflowed or the model's weights or config hold a NaN (e.g. its norm epsilon)")
    if (maps < -tol).any():
        raise InputError("attention maps have negative entries: pass post-softmax probabilities")
    err = (maps.sum(-1) - 1).abs().max().item()
    if not err <= tol:
        raise InputError(f"attention map rows must sum to 1 (worst row is off by {err:.3g}): pass post-softmax maps")


def map_overview(maps: Any, side: int) -> tuple["np.ndarray", int]:
    """([..., n, n] block maxima, b) of maps [..., L, L]: b = ceil(L / side), n = ceil(L / b) <= side.

    Cell (q, k) is the largest weight with query in ``q*b .. q*b + b - 1`` and key in ``k*b .. k*b + b - 1``
    (the last block may be narrower); b = 1 returns the maps themselves.
    """
    import numpy as np

    a = np.asarray(maps, dtype=np.float64)  # ints and bools too (the -inf padding must stay below every weight)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.shape[-1] == 0:
        raise InputError(f"a map must be [..., L, L] with L >= 1, got shape {a.shape}")
    if side < 1:
        raise InputError(f"side must be at least 1, not {side}")
    L = a.shape[-1]
    b = -(-L // side)
    if b == 1:
        return a.copy(), 1
    n = -(-L // b)
    pad = n * b - L
    widths = [(0, 0)] * (a.ndim - 2) + [(0, pad), (0, pad)]
    full = np.pad(a, widths, constant_values=-np.inf) if pad else a  # padding never wins a max
    blocks = full.reshape(*a.shape[:-2], n, b, n, b)
    return blocks.max(axis=(-3, -1)), b


def window_metrics(
    maps: Any,
    causal: bool,
    token_ids: Any = None,
    cls_id: int | None = None,
    sep_id: int | None = None,
    check: bool = True,
) -> dict[str, "torch.Tensor"]:
    """Every metric of :data:`METRICS` per (window, head): maps [b,h,L,L] -> {name: [b, h] float64}.

    ``token_ids`` [b, L] (or [L]) enables the token-based metrics (sink_cls/sink_sep with the given
    ids, dup_score, induction_score); without it those are NaN.
    """
    import torch

    A = as_maps(maps)
    if check:
        check_rows(A)
    b, h, L, _ = A.shape
    dev, dt = A.device, A.dtype
    nan = torch.full((b, h), float("nan"), dtype=torch.float64, device=dev)
    i = torch.arange(L, device=dev)
    offset = (i[:, None] - i[None, :]).to(dt)  # [i, j] = i - j
    visible = offset >= 0 if causal else torch.ones(L, L, dtype=torch.bool, device=dev)

    def rowmean(x: "torch.Tensor") -> "torch.Tensor":  # [b,h,i] -> [b,h]
        return x.to(torch.float64).mean(-1)

    out: dict[str, torch.Tensor] = {}
    H = -torch.special.xlogy(A, A).sum(-1)  # [b,h,i] row entropy, nats (0 ln 0 = 0)
    out["entropy"] = rowmean(H)
    small = A < SPARSE_EPS
    out["sparsity"] = small.sum((-1, -2)).to(torch.float64) / (L * L)
    out["distance"] = rowmean((A * offset.abs()).sum(-1))

    n_vis = visible.sum(-1).to(torch.float64)  # [i]
    rows = n_vis >= 2
    if rows.any():
        out["entropy_norm"] = (H.to(torch.float64)[..., rows] / torch.log(n_vis[rows])).mean(-1)
    else:
        out["entropy_norm"] = nan.clone()
    out["sparsity_visible"] = (small & visible).sum((-1, -2)).to(torch.float64) / visible.sum().item()
    out["lookback"] = rowmean((A * offset).sum(-1))
    out["confidence"] = rowmean(A.amax(-1))
    out["sink_first"] = rowmean(A[..., 0])
    diag = torch.diagonal(A, dim1=-2, dim2=-1)  # [b,h,i]
    out["diag_mass"] = rowmean(diag)
    out["prev_mass"] = rowmean(torch.diagonal(A, offset=-1, dim1=-2, dim2=-1)) if L > 1 else nan.clone()
    out["next_mass"] = rowmean(torch.diagonal(A, offset=1, dim1=-2, dim2=-1)) if L > 1 else nan.clone()

    out["period"], out["period_enrichment"] = _periodicity(A, offset, visible)

    out["sink_cls"], out["sink_sep"] = nan.clone(), nan.clone()
    out["dup_score"], out["induction_score"] = nan.clone(), nan.clone()
    if token_ids is not None:
        tok = torch.as_tensor(token_ids, device=dev)
        if tok.dim() == 1:
            tok = tok.unsqueeze(0)
        if tok.shape[-1] != L or tok.shape[0] not in (1, b):
            raise InputError(f"token ids {tuple(tok.shape)} do not match maps {tuple(A.shape)}")
        tok = tok.expand(b, L)
        for name, tid in (("sink_cls", cls_id), ("sink_sep", sep_id)):
            if tid is not None:
                keys = (tok == tid).to(dt)  # [b, j]
                out[name] = rowmean(torch.einsum("bhij,bj->bhi", A, keys))
        same = tok[:, :, None] == tok[:, None, :]  # [b,i,j]
        dup = same & (offset > 0)  # earlier key (j < i) with the query's token
        out["dup_score"] = _pattern_score(A, dup)
        # induction: key j (j >= 1, j <= i) whose previous token tok[j-1] equals tok[i]
        ind = torch.zeros_like(same)
        ind[:, :, 1:] = tok[:, :, None] == tok[:, None, :-1]
        ind &= offset >= 0
        out["induction_score"] = _pattern_score(A, ind)
    return out


def _periodicity(A: "torch.Tensor", offset: "torch.Tensor", visible: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    """(period, enrichment) per (window, head); see the module docstring."""
    import torch

    b, h, L, _ = A.shape
    best = torch.full((b, h), float("nan"), dtype=torch.float64, device=A.device)
    period = torch.full((b, h), float("nan"), dtype=torch.float64, device=A.device)
    R = max(1, L // 8)
    far = visible & (offset.abs() > R)  # [i, j], the same far region for every s
    n_far = far.sum(-1).to(torch.float64)  # [i]
    rows = n_far > 0
    if not rows.any():
        return period, best
    m_far = (A * far.to(A.dtype)).sum(-1).to(torch.float64)  # [b,h,i]
    j = torch.arange(L, device=A.device)
    for s in PERIODS:
        if s > R:
            break
        on = far & ((j % s == 0) & (j > 0))[None, :]  # key 0 is the sink: measured on its own
        frac = torch.where(rows, on.sum(-1) / n_far.clamp_min(1), torch.zeros_like(n_far))  # [i]
        m_on = (A * on.to(A.dtype)).sum(-1).to(torch.float64)
        expected = (m_far * frac).sum(-1)
        ratio = torch.where(expected > 0, m_on.sum(-1) / expected.clamp_min(1e-300), torch.zeros_like(expected))
        better = torch.isnan(best) | (ratio > PERIOD_SWITCH * best)
        best = torch.where(better, ratio, best)
        period = torch.where(better, torch.full_like(period, float(s)), period)
    called = (best >= PERIOD_MIN_ENRICHMENT) & (m_far.mean(-1) >= 0.05)
    return torch.where(called, period, torch.full_like(period, float("nan"))), best


def _pattern_score(A: "torch.Tensor", pattern: "torch.Tensor") -> "torch.Tensor":
    """Mean over rows with a non-empty pattern of the row mass on the pattern: A [b,h,i,j], pattern [b,i,j]."""
    import torch

    mass = (A * pattern[:, None].to(A.dtype)).sum(-1).to(torch.float64)  # [b,h,i]
    has = pattern.any(-1)[:, None, :].expand_as(mass)  # [b,h,i]
    n = has.sum(-1)
    total = torch.where(has, mass, torch.zeros_like(mass)).sum(-1)
    return torch.where(n > 0, total / n.clamp_min(1), torch.full_like(total, float("nan")))


def summarize_windows(values: dict[str, Any], layer: int | None = None) -> "pd.DataFrame":
    """Per-window values {name: [n, h]} -> per-head rows with the mean (NaN-skipping) and sample std."""
    import numpy as np
    import pandas as pd

    arrs = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    n, h = next(iter(arrs.values())).shape
    rows: dict[str, Any] = {}
    if layer is not None:
        rows["layer"] = np.full(h, layer)
    rows["head"] = np.arange(h)
    rows["n_windows"] = np.full(h, n)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for name in METRICS:
                if name in arrs:
                    rows[name] = _mode(arrs[name]) if name == "period" else np.nanmean(arrs[name], axis=0)
            for name in METRICS:
                if name in arrs:
                    rows[f"{name}_std"] = np.nanstd(arrs[name], axis=0, ddof=1) if n > 1 else np.full(h, np.nan)
    return pd.DataFrame(rows)


def _mode(x: "Any") -> "Any":
    """Most frequent non-NaN value per column of [n, h] (ties: the smaller; all NaN: NaN)."""
    import numpy as np

    out = np.full(x.shape[1], np.nan)
    for c in range(x.shape[1]):
        col = x[:, c][np.isfinite(x[:, c])]
        if len(col):
            vals, counts = np.unique(col, return_counts=True)
            out[c] = vals[np.argmax(counts)]
    return out


def head_metrics(
    maps: Any,
    causal: bool,
    token_ids: Any = None,
    cls_id: int | None = None,
    sep_id: int | None = None,
) -> "pd.DataFrame":
    """Per-head table of every metric, averaged over the batch (windows) with the spread.

    ``maps``: [h, L, L] or [b, h, L, L] post-softmax attention (rows sum to 1), from any model.
    Columns: head, n_windows, one column per metric in :data:`METRICS` and ``<metric>_std``.
    """
    vals = window_metrics(maps, causal, token_ids, cls_id, sep_id)
    return summarize_windows({k: v.cpu().numpy() for k, v in vals.items()})


def js_divergence_rows(p: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
    """Jensen-Shannon divergence (nats) between matching rows: p, q [..., L] -> [...]."""
    import torch

    m = 0.5 * (p + q)
    kl_pm = (torch.special.xlogy(p, p) - torch.special.xlogy(p, m)).sum(-1)
    kl_qm = (torch.special.xlogy(q, q) - torch.special.xlogy(q, m)).sum(-1)
    return (0.5 * (kl_pm + kl_qm)).clamp_min(0.0)


def pairwise_js(rows: "torch.Tensor", budget: int = 500_000) -> "torch.Tensor":
    """Mean JS divergence between every pair of heads on the same rows: rows [n_heads, r, L] -> [n, n].

    Works head against a block of heads, so at most ~``budget`` elements are live per temporary
    (a [72, 64, 512] float64 block would be 19 MB per temporary; the default keeps each near 4 MB).
    """
    import torch

    n = rows.shape[0]
    block = max(1, budget // max(1, rows[0].numel()))  # heads b per temporary [block, r, L]
    out = torch.zeros(n, n, dtype=torch.float64)
    for a in range(n):
        for b0 in range(0, n, block):
            out[a, b0 : b0 + block] = js_divergence_rows(rows[a][None], rows[b0 : b0 + block]).mean(-1).to(torch.float64).cpu()
    return 0.5 * (out + out.T)


__all__ = [
    "CAUSAL_DEFINED",
    "METRICS",
    "PROFILE_METRICS",
    "window_metrics",
    "head_metrics",
    "summarize_windows",
    "js_divergence_rows",
    "pairwise_js",
]
