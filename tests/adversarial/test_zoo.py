"""Hostile input for the zoo survey (``attnscope geometry --zoo``) and ``attnscope zoo``.

A foreign file in a finished survey, a lost or corrupt settings file with another ``--k``, a
non-text registry: never a wrong result with exit 0, never a traceback.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import InputError
from attnscope.runs import ResultsStore
from attnscope.runs.store import QuarantineWarning
from attnscope.zoo.survey import run_zoo

from ._helpers import assert_one_line_error, cli

MODELS = ["tiny/a", "tiny/b"]


def _survey(zoo, out, k=2.0):
    return run_zoo("tiny", out, zoo_file=zoo, executor="inline", k=k, progress=False)


def _direct(zoo, model, k):
    from attnscope.geometry import score
    from attnscope.zoo import load_registry

    entry = next(e for e in load_registry(zoo) if e.id == model)
    return score(entry.source, k=k)


def _same_scores(got: pd.DataFrame, want: pd.DataFrame) -> None:
    key = ["stack", "level", "layer", "head"]
    cols = ["symmetry", "directionality", "n_outlier_rows"]
    a = got.sort_values(key)[cols].to_numpy(float)
    b = want.sort_values(key)[cols].to_numpy(float)
    np.testing.assert_allclose(a, b, rtol=0, atol=0)


@pytest.fixture()
def finished(tiny_zoo, tmp_path):
    out = tmp_path / "survey"
    df = _survey(tiny_zoo, out)
    assert sorted(df["model"].unique()) == MODELS
    return out, df


@pytest.mark.parametrize("forgery", ["one-column", "other-model"])
def test_a_foreign_task_file_is_quarantined_not_merged(tiny_zoo, finished, forgery):
    out, first = finished
    store = ResultsStore(out)
    victim = store.path("tiny/a")
    if forgery == "one-column":
        pd.DataFrame({"x": [1.0, 2.0]}).to_parquet(victim)
    else:  # a valid result file, of the other model
        victim.write_bytes(store.path("tiny/b").read_bytes())
    with pytest.warns(QuarantineWarning, match="tiny%2Fa.parquet cannot be reused"):
        df = _survey(tiny_zoo, out)
    assert sorted(df["model"].unique()) == MODELS and "x" not in df.columns
    assert not df[["symmetry", "directionality"]].isna().any().any()
    merged = pd.read_parquet(out / "merged.parquet")
    assert list(merged.columns) == list(first.columns) and len(merged) == len(first)
    _same_scores(merged[merged["model"] == "tiny/a"], first[first["model"] == "tiny/a"])
    assert len(list((out / "set-aside").iterdir())) == 1


@pytest.mark.parametrize("damage", ["deleted", "garbage", "a-list"])
def test_lost_settings_and_another_k_recompute_instead_of_mixing(tiny_zoo, finished, damage):
    out, _ = finished
    settings = out / "survey.json"
    if damage == "deleted":
        settings.unlink()
    elif damage == "garbage":
        settings.write_text("{not json")
    else:
        settings.write_text("[1, 2]")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = _survey(tiny_zoo, out, k=0.5)
    assert sum(issubclass(w.category, QuarantineWarning) for w in caught) == 2  # both old results set aside
    assert df.attrs["summary"].done == MODELS
    for model in MODELS:  # every number is the k = 0.5 one
        _same_scores(df[df["model"] == model], _direct(tiny_zoo, model, 0.5))
    assert json.loads(settings.read_text()) == {"k": 0.5, "stacks": None}
    with pytest.raises(InputError, match=r"k=0.5 \(now 2.0\)"):  # and the survey is consistent again
        _survey(tiny_zoo, out, k=2.0)


def test_cli_quarantine_warning_is_one_readable_line(tiny_zoo, finished):
    out, _ = finished
    pd.DataFrame({"x": [1]}).to_parquet(ResultsStore(out).path("tiny/b"))
    res = cli("geometry", "--zoo", f"{tiny_zoo}:tiny", "--out", out, "--executor", "inline")
    assert res.returncode == 0, res.stderr
    warn = [ln for ln in res.stderr.splitlines() if "warning" in ln]
    assert len(warn) == 1 and warn[0].startswith("attnscope: warning: results store: tiny%2Fb.parquet")
    assert "warnings.warn" not in res.stderr and "Warning:" not in res.stderr
    assert sorted(pd.read_parquet(out / "merged.parquet")["model"].unique()) == MODELS


@pytest.mark.slow
def test_cli_plot_after_a_forged_file_works(tiny_zoo, finished):
    out, _ = finished
    pd.DataFrame({"x": [1]}).to_parquet(ResultsStore(out).path("tiny/a"))
    assert cli("geometry", "--zoo", f"{tiny_zoo}:tiny", "--out", out, "--executor", "inline").returncode == 0
    res = cli("geometry", "plot", out, "--out", out / "figs")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("content", [b"\x00\xff\xfe", b"models: [", b"models: 5"])
def test_cli_zoo_file_that_is_not_a_registry(tmp_path, content):
    p = tmp_path / "zoo.yaml"
    p.write_bytes(content)
    assert_one_line_error(cli("zoo", "list", "--zoo-file", p), str(p))
    out = tmp_path / "survey"
    assert_one_line_error(cli("geometry", "--zoo", f"{p}", "--out", out), str(p))
    assert not out.exists()
