"""Claims decided with their uncertainty (summary.contrasts, sym_collapse, becomes) on synthetic heads built to be
each case: directional, symmetric, both parts, halving (neither), noise; the paired contrast is 0 on identical
inputs and covers 0 on pure noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

CLEAN = 0.8
N = 12  # windows


def _per_window(cases: dict[int, dict[str, float]], sd: float = 0.02, seed: int = 0) -> pd.DataFrame:
    """Per-window rows of previous_token_random for heads 0.. with the given mean score per intervention."""
    rng = np.random.default_rng(seed)
    rows = []
    for head, means in cases.items():
        for kind, value in means.items():
            for w in range(N):
                v = value + rng.normal(0, sd)
                rows.append(dict(layer=0, head=head, intervention=kind, measure="previous_token_random", window=w,
                                 clean=CLEAN, value=v, delta=v - CLEAN))
    return pd.DataFrame(rows)


def _table(per_window: pd.DataFrame) -> pd.DataFrame:
    from attnscope.interventions.summary import add_bh, contrasts, summarise

    return contrasts(add_bh(summarise(per_window)), per_window)


DIRECTIONAL, SYMMETRIC, BOTH, HALVING, NOISE = 0, 1, 2, 3, 4
CASES = {
    DIRECTIONAL: {"sym": 0.10, "anti": 0.76, "scale:0.5": 0.60},  # lost under sym, kept under anti, beyond control
    SYMMETRIC: {"sym": 0.78, "anti": 0.10, "scale:0.5": 0.60},  # kept under sym: no collapse to explain
    BOTH: {"sym": 0.10, "anti": 0.10, "scale:0.5": 0.60},  # lost under either part, the control keeps it
    HALVING: {"sym": 0.30, "anti": 0.30, "scale:0.5": 0.30},  # halving the logits alone loses it: not a claim
    NOISE: {"sym": CLEAN, "anti": CLEAN, "scale:0.5": CLEAN},  # nothing happens
}


def test_each_synthetic_head_gets_its_claim_or_undecided_with_the_reason():
    from attnscope.interventions.summary import ANTISYMMETRIC, BOTH as BOTH_PARTS, needs_direction, sym_collapse

    hit = sym_collapse(_table(_per_window(CASES))).set_index("head")
    assert set(hit.index) == {DIRECTIONAL, BOTH, HALVING}  # the symmetric and the noise head do not collapse
    assert hit.loc[DIRECTIONAL, "lives_in"] == ANTISYMMETRIC
    assert hit.loc[BOTH, "lives_in"] == BOTH_PARTS
    assert hit.loc[HALVING, "lives_in"].startswith("undecided: sym's loss is not beyond scale:0.5's")
    assert hit.loc[DIRECTIONAL, "anti_ci_low"] <= hit.loc[DIRECTIONAL, "anti_value"] <= hit.loc[DIRECTIONAL, "anti_ci_high"]
    assert hit.loc[DIRECTIONAL, "sym_vs_control"] == pytest.approx(0.10 - 0.60, abs=0.03)
    assert needs_direction(_table(_per_window(CASES)))["head"].tolist() == [DIRECTIONAL]


def test_without_the_control_nothing_is_claimed():
    from attnscope.interventions.summary import sym_collapse

    cases = {h: {k: v for k, v in m.items() if k != "scale:0.5"} for h, m in CASES.items()}
    hit = sym_collapse(_table(_per_window(cases))).set_index("head")
    assert hit["lives_in"].str.startswith("undecided: no scale:0.5 control run").all()
    no_anti = {h: {"sym": m["sym"], "scale:0.5": m["scale:0.5"]} for h, m in CASES.items()}
    assert set(sym_collapse(_table(_per_window(no_anti)))["lives_in"]) == {"unknown (anti not run)"}


def test_an_anti_interval_reaching_below_the_threshold_leaves_it_undecided():
    from attnscope.interventions.summary import sym_collapse

    wide = {0: {"sym": 0.10, "anti": 0.45, "scale:0.5": 0.30}}  # anti keeps ~56%, but its noise is large
    hit = sym_collapse(_table(_per_window(wide, sd=0.3)))
    assert len(hit) in (0, 1)
    if len(hit):
        assert hit["lives_in"].iloc[0].startswith("undecided")


def test_the_contrast_is_zero_on_identical_inputs_and_covers_zero_on_noise():
    same = _table(_per_window({0: {"sym": 0.5, "scale:0.5": 0.5}}, sd=0.0))
    row = same[same["intervention"] == "sym"].iloc[0]
    assert row["vs_control"] == 0 and row["vs_control_ci_low"] == 0 and row["vs_control_ci_high"] == 0
    covered = 0
    for seed in range(40):
        noise = _table(_per_window({0: {"sym": 0.5, "scale:0.5": 0.5}}, sd=0.05, seed=seed))
        r = noise[noise["intervention"] == "sym"].iloc[0]
        covered += r["vs_control_ci_low"] <= 0 <= r["vs_control_ci_high"]
    assert covered >= 34  # a 95% interval: ~38 of 40


def test_becomes_names_the_behaviour_that_rises_most():
    from attnscope.interventions.summary import becomes

    rows = []
    for measure, clean, value in (("induction_random", 0.9, 0.1), ("previous_token_random", 0.01, 0.42),
                                  ("sink_random", 0.1, 0.15)):
        for w in range(N):
            v = value + 0.01 * np.sin(w)
            rows.append(dict(layer=16, head=2, intervention="sym", measure=measure, window=w, clean=clean, value=v,
                             delta=v - clean))
    table = _table(pd.DataFrame(rows))
    out = becomes(table)
    assert len(out) == 1
    r = out.iloc[0]
    assert r["was"] == "induction_random" and r["measure"] == "previous_token_random"
    assert r["text"].startswith("L16H2: induction_random -> previous_token_random under sym")
    assert r["ci_low"] <= r["delta"] <= r["ci_high"]


def test_a_head_that_only_strengthens_its_own_behaviour_becomes_nothing_new():
    from attnscope.interventions.summary import becomes

    rows = []
    for measure, clean, value in (("sink_text", 0.70, 0.85), ("sink_random", 0.5, 0.9), ("induction_random", 0.0, 0.0)):
        for w in range(N):
            v = value + 0.01 * np.sin(w)
            rows.append(dict(layer=17, head=3, intervention="sym", measure=measure, window=w, clean=clean, value=v,
                             delta=v - clean))
    assert becomes(_table(pd.DataFrame(rows))).empty  # was: "sink_text -> sink_random", the same behaviour


def test_an_undecided_claim_says_which_way_the_control_went():
    from attnscope.interventions.summary import sym_collapse

    keeps_less = {0: {"sym": 0.10, "anti": 0.10, "scale:0.5": 0.05}}  # the control loses even more than anti
    hit = sym_collapse(_table(_per_window(keeps_less)))
    assert hit["lives_in"].iloc[0].startswith("undecided") and "vs scale:0.5 +" in hit["why"].iloc[0]
