"""The formation rule: first revision from which a score stays past half of its change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.emergence.formation import formation, formation_index
from attnscope.errors import InputError


def _reference(v, min_change):
    """Slow reference: try every index, check every later value by hand."""
    if any(not np.isfinite(x) for x in v):
        return None
    change = v[-1] - v[0]
    if abs(change) < min_change or change == 0:
        return None
    for i in range(len(v)):
        if all((v[j] - v[0]) * np.sign(change) >= abs(change) / 2 for j in range(i, len(v))):
            return i
    return None  # pragma: no cover - the last value always qualifies


def test_known_trajectories():
    assert formation_index([0, 0.1, 0.6, 0.4, 0.7, 1.0]) == 4  # passes 0.5 at 2, dips at 3, stays from 4
    assert formation_index([1.0, 0.9, 0.3, 0.2]) == 2  # a fall counts too (symmetric init losing s)
    assert formation_index([0.2, 0.2, 0.22]) is None  # change below min_change
    assert formation_index([0.0, 0.5, 1.0], min_change=0) == 1  # exactly half way counts
    assert formation_index([0.0, np.nan, 1.0]) is None
    with pytest.raises(InputError, match="at least 2"):
        formation_index([0.3])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=30), st.floats(0, 0.5))
def test_matches_the_reference(values, min_change):
    assert formation_index(values, min_change) == _reference(values, min_change)


def test_per_head_table():
    rows = []
    steps = [0, 10, 100, 1000]
    for i, step in enumerate(steps):
        for head, traj in enumerate(([0, 0.1, 0.8, 0.9], [0.3, 0.3, 0.3, 0.3])):
            rows.append({"model": "m", "revision": f"step{step}", "step": step, "tokens": step * 10, "stack": "encoder",
                         "level": "head", "layer": 0, "head": head, "symmetry": traj[i], "directionality": 0.0})
    got = formation(pd.DataFrame(rows))
    sym = got[got["metric"] == "symmetry"].set_index("head")
    assert sym.loc[0, "formed_step"] == 100 and sym.loc[0, "formed_tokens"] == 1000
    assert sym.loc[0, "formed_revision"] == "step100" and sym.loc[0, "change"] == pytest.approx(0.9)
    assert pd.isna(sym.loc[1, "formed_step"])  # identical values: no formation
    assert got[got["metric"] == "directionality"]["formed_step"].isna().all()
    with pytest.raises(InputError, match="at least 2 revisions"):
        formation(pd.DataFrame(rows[:2]))
