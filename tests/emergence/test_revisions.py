"""Revision names -> steps and tokens, training order, and the SPECs that choose revisions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.emergence.revisions import Revision, log_spaced, order, parse_step, select_revisions, series_of
from attnscope.errors import InputError


@pytest.mark.parametrize(("name", "step", "tokens"), [
    ("step1000", 1000, None),                                   # Pythia
    ("step0", 0, None),
    ("step1000-tokens4B", 1000, 4_000_000_000),                 # OLMo
    ("stage1-step140000-tokens1175B", 140000, 1_175_000_000_000),  # OLMo-2
    ("stage2-ingredient3-step11931-tokens50B", 11931, 50_000_000_000),
    ("step-500", 500, None),                                    # attnscope train
    ("checkpoint-500", 500, None),                              # the HF Trainer
    ("global_step250", 250, None),
    ("step20-tokens500M", 20, 500_000_000),
    ("main", None, None),
    ("v1.0", None, None),
    ("stepper", None, None),
])
def test_parse_step(name, step, tokens):
    assert parse_step(name) == (step, tokens)


def test_series_and_order_put_stages_first_then_steps():
    names = ["stage2-ingredient1-step100-tokens1B", "stage1-step2000-tokens8B", "stage1-step1000-tokens4B",
             "stage2-ingredient1-step0-tokens0B"]
    assert series_of(names[0]) == "stage2-ingredient1" and series_of(names[1]) == "stage1"
    revs = [Revision(n, parse_step(n)[0], parse_step(n)[1], n, series_of(n)) for n in names]
    assert [r.name for r in order(revs)] == [names[2], names[1], names[3], names[0]]


def _revs(steps):
    return order([Revision(f"step{s}", s, None, f"x@step{s}") for s in steps])


PYTHIA = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512] + list(range(1000, 143001, 1000))


def test_spec_forms():
    revs = _revs(PYTHIA)
    assert len(select_revisions(revs, "all")) == len(PYTHIA) == 154
    assert [r.step for r in select_revisions(revs, "step4,step0,step1000")] == [0, 4, 1000]
    assert [r.step for r in select_revisions(revs, "100:3000")] == [128, 256, 512, 1000, 2000, 3000]
    assert [r.step for r in select_revisions(revs, ":2")] == [0, 1, 2]
    assert [r.step for r in select_revisions(revs, "step14*")] == [14000] + list(range(140000, 143001, 1000))
    logn = select_revisions(revs, "log:10")
    assert len(logn) == 10 and logn[0].step == 0 and logn[1].step == 1 and logn[-1].step == 143000
    ratios = [b.step / a.step for a, b in zip(logn[1:], logn[2:])]
    assert max(ratios) / min(ratios) < 2.5  # about even in log(step), on the grid Pythia has (powers of 2, then 1000s)
    assert [r.step for r in select_revisions(revs, "1000:,log:2")] == [1000, 143000]


@pytest.mark.parametrize(("spec", "match"), [
    ("step3", "no such revision"), ("5:1", "ends before"), ("log:x", "whole number"), ("log:0", "1 to"),
    ("nope*", "matches no revision"), ("step1,,step2", "empty item"), ("200000:", "selects no revision"),
])
def test_bad_specs_are_one_line(spec, match):
    with pytest.raises(InputError, match=match) as err:
        select_revisions(_revs(PYTHIA), spec)
    assert "\n" not in str(err.value)


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 10**6), min_size=1, max_size=60), st.integers(1, 70))
def test_log_spaced_properties(steps, n):
    revs = _revs(sorted(steps))
    got = log_spaced(revs, n)
    assert len(got) == min(n, len(revs))
    assert len({r.name for r in got}) == len(got)  # each revision once
    assert [r.step for r in got] == sorted(r.step for r in got)  # training order
    if 0 in steps and n < len(revs):
        assert got[0].step == 0
    pos = [s for s in steps if s > 0]
    if pos and n < len(revs) and n - (0 in steps) >= 1:
        assert max(pos) in {r.step for r in got}
    if pos and n < len(revs) and n - (0 in steps) >= 2:
        assert min(pos) in {r.step for r in got}
    assert all(math.isfinite(r.step) for r in got)


def test_training_loss_of_a_run_a_trainer_folder_and_a_hub_model(tmp_path):
    import json

    from attnscope.emergence.revisions import training_loss

    run = tmp_path / "run"
    run.mkdir()
    lines = [{"step": 0, "loss": 5.0, "eval_loss": 4.9}, {"step": 10, "loss": 4.0}, "torn{",
             {"step": 20, "loss": 3.0, "eval_loss": 3.2}, {"step": 30, "lr": 0.1}]
    (run / "metrics.jsonl").write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines))
    got = training_loss(str(run), "run")
    assert list(got["step"]) == [0, 10, 20] and list(got["loss"]) == [5.0, 4.0, 3.0]
    assert got["eval_loss"].isna().tolist() == [False, True, False]
    folder = tmp_path / "ckpts"
    for step in (5, 10):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
        history = [{"step": s, "loss": 6.0 - s / 10} for s in range(1, step + 1)] + [{"step": step, "eval_loss": 5.5}]
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    got = training_loss(str(folder), "folder")  # the last checkpoint's history, train and eval rows of a step merged
    assert list(got["step"]) == list(range(1, 11)) and got.loc[got["step"] == 10, "eval_loss"].item() == 5.5
    assert training_loss(str(tmp_path), "hub") is None and training_loss(str(tmp_path / "none"), "run") is None
