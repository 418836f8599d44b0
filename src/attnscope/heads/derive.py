"""Propose a sparse pattern per head from its measured metrics (the step the dense-vs-sparse byte-model study did by hand).

One pattern serves every layer (the training model's ``attn_pattern``), so by default each head
index is summarised by the median of its metrics over layers (``layer=`` picks one layer instead).
Rules, applied per head:

* window: a head spreading its mass evenly over the last w keys has a mean look-back of ~w/2, so
  ``w = next power of two >= 2 * lookback`` (``distance`` for encoders), at least ``min_window``.
* if that window exceeds ``max_window``, or covers the whole measured sequence (w >= length - 1, so
  it would not be local at all), the head is "global": it gets no window but a stride (its
  measured period, else ``global_stride``) plus the first-token anchor.
* stride: the measured ``period`` (see :mod:`attnscope.heads.metrics`; its most frequent value over
  layers) when the head has one.
* anchors: key 0 (``positions=[0]``) when the head's first-token sink mass >= ``sink_threshold``.

Output: a :class:`attnscope.sparse.Pattern` (save it as YAML/JSON; ``attn_pattern`` accepts the path)
and a table saying what was proposed for each head and why.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from attnscope.errors import InputError, check_type
from attnscope.tables import numeric_columns

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from attnscope.sparse.patterns import HeadPattern, Pattern

REQUIRED = ("head", "distance", "sink_first")


def _pow2_at_least(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(x, 1.0))))


def derive_pattern(
    df: "pd.DataFrame",
    layer: int | None = None,
    model: str | None = None,
    min_window: int = 4,
    max_window: int = 128,
    global_stride: int = 16,
    sink_threshold: float = 0.2,
) -> tuple["Pattern", "pd.DataFrame"]:
    """(pattern, explanation table) from a per-(layer, head) metrics table written by ``attnscope heads``.

    The explanation has one row per head: ``head``, ``summary`` (``median of N layers`` or ``layer N``:
    what the head's numbers are), ``pattern`` and ``reason``.
    """
    import pandas as pd

    from attnscope.sparse.patterns import Pattern

    _check_options(min_window, max_window, global_stride, sink_threshold)
    sub = _rows_to_use(df, model, layer)
    causal = bool(sub["causal"].iloc[0]) if "causal" in sub.columns else True
    reach_col = "lookback" if causal and "lookback" in sub.columns else "distance"
    med = _per_head(sub, reach_col)
    n_layers = sub["layer"].nunique() if "layer" in sub.columns else 1
    summary = f"layer {layer}" if layer is not None else f"median of {n_layers} layer{'s' if n_layers != 1 else ''}"
    seq_len = _sequence_length(sub)
    rule = _Rule(reach_col, min_window, max_window, global_stride, sink_threshold, seq_len)
    patterns, rows = [], []
    for h, r in med.iterrows():
        hp, why = rule.propose(r)
        patterns.append(hp)
        rows.append({"head": int(h), "summary": summary, "pattern": hp.describe(), "reason": why})
    name = "derived" + (f"-layer{layer}" if layer is not None else "")
    return Pattern(heads=tuple(patterns), name=name), pd.DataFrame(rows)


def _check_options(min_window: int, max_window: int, global_stride: int, sink_threshold: float) -> None:
    if min_window < 0 or max_window < min_window:
        raise InputError(f"need 0 <= min_window <= max_window, got {min_window} and {max_window}")
    if not (isinstance(sink_threshold, (int, float)) and math.isfinite(sink_threshold) and 0 <= sink_threshold <= 1):
        raise InputError(f"sink_threshold must be a number in [0, 1] (a share of attention mass), not {sink_threshold}",
                         params="sink_threshold")
    if global_stride < 1:
        raise InputError(f"global_stride must be at least 1, not {global_stride}")


def _rows_to_use(df: "pd.DataFrame", model: str | None, layer: int | None) -> "pd.DataFrame":
    """The rows of the one model (and layer) to derive from; the table's columns checked."""
    import pandas as pd

    check_type(df, pd.DataFrame, "df", "a pandas DataFrame (a metrics table from heads.extract(...).metrics)")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(f"metrics table has no column(s) {', '.join(missing)}: write it with `attnscope heads`")
    sub = df
    if model is not None:
        if "model" not in df.columns or model not in set(df["model"]):
            raise InputError(f"model {model!r} is not in the metrics table")
        sub = sub[sub["model"] == model]
    elif "model" in df.columns and df["model"].nunique() > 1:
        raise InputError(f"the metrics table holds {df['model'].nunique()} models; pick one with model=NAME", params="model")
    if layer is not None:
        if "layer" not in sub.columns or layer not in set(sub["layer"]):
            raise InputError(f"layer {layer} is not in the metrics table")
        sub = sub[sub["layer"] == layer]
    if sub.empty:
        raise InputError("the metrics table has no rows to derive a pattern from")
    return sub


def _per_head(sub: "pd.DataFrame", reach_col: str) -> "pd.DataFrame":
    """One row per head index: median reach and sink mass over layers, the most frequent period."""
    checked = numeric_columns(sub, ["head", reach_col, "sink_first"], "metrics table")
    if (checked["head"] != checked["head"].round()).any() or (checked["head"] < 0).any():
        raise InputError("the metrics table's head column must hold non-negative integers")
    sub = sub.assign(**{c: checked[c] for c in checked.columns})
    sub["head"] = sub["head"].astype(int)
    if "period" in sub.columns:  # NaN = no period; a string is an error
        sub["period"] = numeric_columns(sub, ["period"], "metrics table", finite=False)["period"]
    med = sub.groupby("head")[[reach_col, "sink_first"]].median(numeric_only=True).sort_index()
    if "period" in sub.columns:  # a stride is a category: the most frequent one over layers
        from .metrics import _mode

        med["period"] = [_mode(g["period"].to_numpy(dtype=float)[:, None])[0] for _, g in sub.groupby("head")]
    heads = list(med.index)
    if heads != list(range(len(heads))):
        raise InputError(f"heads in the metrics table are not 0..n-1: {heads[:10]}")
    return med


def _sequence_length(sub: "pd.DataFrame") -> int | None:
    """The measured window length (the table's ``length`` column), if it says one."""
    if "length" not in sub.columns:
        return None
    vals = numeric_columns(sub, ["length"], "metrics table")["length"]
    return int(vals.max()) if len(vals) else None


class _Rule:
    """The module docstring's rules for one head's summary row."""

    def __init__(self, reach_col: str, min_window: int, max_window: int, global_stride: int,
                 sink_threshold: float, seq_len: int | None) -> None:
        self.reach_col, self.min_window, self.max_window = reach_col, min_window, max_window
        self.global_stride, self.sink_threshold, self.seq_len = global_stride, sink_threshold, seq_len

    def propose(self, r: "pd.Series") -> tuple["HeadPattern", str]:
        """(pattern, reason) for one head."""
        import numpy as np

        from attnscope.sparse.patterns import HeadPattern

        reach = float(r[self.reach_col])
        period = r.get("period", np.nan)
        has_period = period is not None and np.isfinite(period)
        sink_mass = float(r["sink_first"])
        w = max(self.min_window, _pow2_at_least(2 * reach))
        need = f"2 x {self.reach_col} {reach:.1f} = {2 * reach:.1f} -> window {w}"
        whole = self.seq_len is not None and w >= self.seq_len - 1  # |i - j| <= w reaches every key
        if w > self.max_window or whole:
            stride = int(period) if has_period else self.global_stride
            limit = (f"the whole {self.seq_len}-token sequence" if whole else f"over --max-window {self.max_window}")
            why = f"global ({need}, {limit}): stride {stride}" + (" (measured period)" if has_period else " (default)")
            return HeadPattern(stride=stride, positions=(0,)), why + " + key 0"
        sink = sink_mass >= self.sink_threshold
        hp = HeadPattern(window=w, stride=int(period) if has_period else None, positions=(0,) if sink else ())
        why = f"local: {need}"
        if has_period:
            why += f"; stride {int(period)} (measured period)"
        if sink:
            why += f"; key 0 (first-token mass {sink_mass:.2f} >= {self.sink_threshold:g})"
        return hp, why
