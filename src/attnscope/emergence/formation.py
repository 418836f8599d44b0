"""When does a head "form"? The rule, as a pure function on one trajectory, and per head on a sweep's table.

**The rule.** A trajectory is a score v_0, v_1, ..., v_n at the revisions in training order. With
v_0 the first value and v_n the last, the change is ``v_n - v_0``. The head forms at the first revision i
from which every later value has covered at least half of the change, i.e.
``(v_j - v_0) * sign(v_n - v_0) >= |v_n - v_0| / 2`` for all j >= i, and stays there. A change smaller
than ``min_change`` (0.05 by default, in units of s or d) is no formation: NaN. A NaN value anywhere in
the trajectory gives NaN too (an unscorable head is not said to form).

Both directions count: a symmetric-init encoder whose s falls from 1 forms where it has fallen half way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from attnscope.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: smallest |final - initial| that counts as a formation (s and d live in [-1, 1])
MIN_CHANGE = 0.05
METRICS = ("symmetry", "directionality")


def formation_index(values: Sequence[float], min_change: float = MIN_CHANGE) -> int | None:
    """Index of the revision at which the trajectory ``values`` forms (module docstring), or None."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or len(v) < 2:
        raise InputError(f"values must be a trajectory of at least 2 revisions, got shape {v.shape}", params="values")
    if not np.isfinite(min_change) or min_change < 0:
        raise InputError(f"min_change must be a finite number >= 0, not {min_change}", params="min_change")
    if not np.isfinite(v).all():
        return None
    change = v[-1] - v[0]
    if abs(change) < min_change or change == 0:
        return None
    past = (v - v[0]) * np.sign(change) >= abs(change) / 2  # [n] at or beyond half way
    # the last index that is not past half way; formation is the one after it
    not_past = np.flatnonzero(~past)
    return int(not_past[-1] + 1) if len(not_past) else 0


def formation(table: "pd.DataFrame", metrics: Sequence[str] = METRICS, min_change: float = MIN_CHANGE,
              level: str = "head") -> "pd.DataFrame":
    """Per head (``level="head"``) or layer form: initial, final value and the revision / step / tokens at
    which each of ``metrics`` forms. ``table``: an emergence table (``revision``, ``step``, ``tokens`` and
    the score record), in training order. Rows: model, stack, level, layer, head, metric, initial, final,
    change, formed_revision, formed_step, formed_tokens (missing where nothing formed)."""
    import pandas as pd

    from attnscope.tables import check_table

    check_table(table, ("model", "stack", "level", "layer", "head", "revision", "step", *metrics), "table",
                "an emergence table (attnscope.emergence.sweep(...).table)")
    rows = table[table["level"] == level]
    order = list(dict.fromkeys(table["revision"]))  # the table's own (training) order
    if len(order) < 2:
        raise InputError(f"formation needs at least 2 revisions, the table has {len(order)}", params="table")
    at = {r: i for i, r in enumerate(order)}
    axis = table.drop_duplicates("revision").set_index("revision")
    keys = ["model", "stack", "layer"] + (["head"] if level == "head" else [])
    out = []
    for key, grp in rows.groupby(keys, sort=True, dropna=False):
        grp = grp.assign(_i=grp["revision"].map(at)).sort_values("_i")
        base = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        for metric in metrics:
            vals = grp[metric].to_numpy(dtype=float)
            idx = formation_index(vals, min_change) if len(vals) >= 2 else None
            rev = grp["revision"].iloc[idx] if idx is not None else None
            out.append({**base, "level": level, "metric": metric, "initial": vals[0], "final": vals[-1],
                        "change": vals[-1] - vals[0], "formed_revision": rev,
                        "formed_step": axis.loc[rev, "step"] if rev is not None else None,
                        "formed_tokens": axis.loc[rev, "tokens"] if rev is not None and "tokens" in axis else None})
    df = pd.DataFrame(out)
    for col in ("formed_step", "formed_tokens"):
        df[col] = pd.array([None if v is None or pd.isna(v) else int(v) for v in df[col]], dtype="Int64")
    if level != "head":
        df.insert(df.columns.get_loc("layer") + 1, "head", pd.array([None] * len(df), dtype="Int64"))
    return df
