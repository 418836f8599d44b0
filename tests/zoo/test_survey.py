"""run_zoo on a tiny local fake zoo: scores, failures, resume, corrupt-file recovery, executors, Slurm."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from attnscope.runs import ResultsStore
from attnscope.zoo import load_registry
from attnscope.zoo.survey import run_zoo

GOOD = ["fake/llama-a", "fake/llama-b", "fake/whisper"]
BAD = "no-such-org/no-such-model-xyz"


@pytest.fixture(scope="module")
def first_run(fake_zoo, tmp_path_factory):
    out = tmp_path_factory.mktemp("survey")
    df = run_zoo("fake", out, zoo_file=fake_zoo, executor="inline", progress=False)
    return out, df


def test_scores_every_loadable_model_and_reports_the_failure(first_run, fake_zoo):
    out, df = first_run
    assert sorted(df["model"].unique()) == GOOD
    assert set(df.attrs["failures"]) == {BAD}
    fails = json.loads((out / "failures.json").read_text())
    assert [f["id"] for f in fails] == [BAD] and "\n" not in fails[0]["error"]
    merged = pd.read_parquet(out / "merged.parquet")
    assert len(merged) == len(df) and len(pd.read_csv(out / "merged.csv")) == len(df)
    w = merged[merged["model"] == "fake/whisper"]
    assert set(w["stack"]) == {"encoder", "decoder", "cross"}
    assert (w["modality"] == "audio").all() and (w["type"] == "encoder-decoder").all() and (w["params"] == 50_000).all()
    a = merged[(merged["model"] == "fake/llama-a") & (merged["level"] == "layer")]
    assert sorted(a["layer"]) == [0, 1] and a["n_kv_heads"].iloc[0] == 2


def test_values_equal_a_direct_score(first_run, fake_zoo):
    from attnscope.geometry import score

    _, df = first_run
    entry = next(e for e in load_registry(fake_zoo) if e.id == "fake/llama-b")
    direct = score(entry.source)
    got = df[df["model"] == "fake/llama-b"]
    key = ["stack", "level", "layer", "head"]
    a = got.sort_values(key)[["symmetry", "directionality"]].to_numpy(float)
    b = direct.sort_values(key)[["symmetry", "directionality"]].to_numpy(float)
    np.testing.assert_allclose(a, b, rtol=0, atol=0)


def test_rerun_skips_done_and_retries_failures(first_run, fake_zoo):
    out, df = first_run
    store = ResultsStore(out)
    mtimes = {k: store.path(k).stat().st_mtime_ns for k in GOOD}
    df2 = run_zoo("fake", out, zoo_file=fake_zoo, executor="inline", progress=False)
    s = df2.attrs["summary"]
    assert sorted(s.skipped) == GOOD and s.done == [] and set(s.failed) == {BAD}
    assert {k: store.path(k).stat().st_mtime_ns for k in GOOD} == mtimes  # nothing recomputed
    pd.testing.assert_frame_equal(df2.reset_index(drop=True), df.reset_index(drop=True))


def test_corrupt_file_is_recomputed_never_reused(fake_zoo, tmp_path):
    df = run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="inline", progress=False)
    store = ResultsStore(tmp_path)
    p = store.path("fake/llama-a")
    p.write_bytes(p.read_bytes()[:50])  # a half-written file from a killed run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df2 = run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="inline", progress=False)
    s = df2.attrs["summary"]
    assert s.done == ["fake/llama-a"] and s.skipped == ["fake/llama-b"]
    assert any((tmp_path / "set-aside").iterdir())  # kept aside for inspection
    pd.testing.assert_frame_equal(df2.reset_index(drop=True), df.reset_index(drop=True))


def test_local_process_pool(fake_zoo, tmp_path):
    df = run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="local", workers=2, progress=False)
    assert sorted(df["model"].unique()) == GOOD[:2] and not df.attrs["failures"]


def test_all_failed_group_writes_no_merged_table(fake_zoo, tmp_path):
    df = run_zoo("broken", tmp_path, zoo_file=fake_zoo, executor="inline", progress=False)
    assert df.empty and list(df.attrs["failures"]) == [BAD]
    assert not (tmp_path / "merged.parquet").exists()


def test_bad_arguments(fake_zoo, tmp_path):
    from attnscope.errors import InputError

    with pytest.raises(InputError):
        run_zoo("no-such-group", tmp_path, zoo_file=fake_zoo, progress=False)
    with pytest.raises(InputError):
        run_zoo("fake", tmp_path, zoo_file=fake_zoo, executor="cloud", progress=False)
    with pytest.raises(InputError):
        run_zoo("fake", tmp_path, zoo_file=fake_zoo, k=-1, progress=False)


@pytest.mark.slurm
def test_slurm_executor(fake_zoo, tmp_path, slurm_cluster):
    df = run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="slurm", progress=False,
                 slurm={"partition": slurm_cluster["partition"], "time_min": 10})
    assert sorted(df["model"].unique()) == GOOD[:2] and not df.attrs["failures"]
    again = run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="slurm", progress=False,
                    slurm={"partition": slurm_cluster["partition"], "time_min": 10})
    assert sorted(again.attrs["summary"].skipped) == GOOD[:2]


def test_group_spec_can_name_a_registry_file(fake_zoo, tmp_path):
    from attnscope.errors import InputError
    from attnscope.zoo.survey import split_group_spec

    assert split_group_spec(str(fake_zoo), None) == (None, str(fake_zoo))
    assert split_group_spec(f"{fake_zoo}:fake-text", None) == ("fake-text", str(fake_zoo))
    assert split_group_spec("paper-all", None) == ("paper-all", None)
    with pytest.raises(InputError, match="no such zoo file"):
        split_group_spec(str(tmp_path / "missing.yaml"), None)
    df = run_zoo(f"{fake_zoo}:fake-text", tmp_path / "o", executor="inline", progress=False)
    assert sorted(df["model"].unique()) == GOOD[:2]


def test_cli_zoo_survey_end_to_end(fake_zoo, tmp_path):
    """`attnscope geometry --zoo FILE.yaml:GROUP --out DIR` then `attnscope geometry plot DIR`."""
    import subprocess
    import sys

    out = tmp_path / "cli"
    p = subprocess.run([sys.executable, "-m", "attnscope", "geometry", "--zoo", f"{fake_zoo}:fake", "--out", str(out),
                        "--executor", "inline", "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr  # one model failed: reported, the others scored and stored
    assert "1 model(s) failed" in p.stderr and BAD in p.stderr
    rows = json.loads(p.stdout)
    assert sorted({r["model"] for r in rows}) == GOOD
    assert (out / "merged.parquet").is_file() and BAD in (out / "failures.json").read_text()
    p = subprocess.run([sys.executable, "-m", "attnscope", "geometry", "plot", str(out), "--out", str(out / "fig")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (out / "fig" / "survey_scores.png").is_file() and (out / "fig" / "survey_table.md").is_file()


def test_rerun_with_other_settings_is_refused(fake_zoo, tmp_path):
    from attnscope.errors import InputError

    run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="inline", progress=False)
    with pytest.raises(InputError, match="k=2.0"):
        run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="inline", k=3.0, progress=False)
    with pytest.raises(InputError, match="stacks"):
        run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="inline", stacks=("decoder",), progress=False)
    again = run_zoo("fake-text", tmp_path, zoo_file=fake_zoo, executor="inline", progress=False)
    assert sorted(again.attrs["summary"].skipped) == GOOD[:2]
