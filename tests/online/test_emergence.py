"""``attnscope emergence`` on a hub model's branches, against the local hub (real huggingface_hub client).

The suite: a tiny random GPT-NeoX (fused query_key_value, as Pythia) at branches step0, step1, step2, step4,
step8, plus ``main`` and a tag ``v0`` that name no step. Every revision's scores are checked against the same
files scored from a local directory; the request log says what was fetched.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from online_hubserver import HubServer, Repo
from online_repos import checkpoint_suite

from attnscope.emergence import list_revisions, sweep
from attnscope.errors import InputError, OfflineError
from attnscope.geometry import score

STEPS = [0, 1, 2, 4, 8]
START = time.time()
REPO = "org/neox-suite"


@pytest.fixture(scope="module")
def suite():
    """(branch -> sha, sha -> files) of the checkpoint suite, built once."""
    return checkpoint_suite(STEPS)


def _repo(suite) -> Repo:  # noqa: ANN001
    revisions, trees = suite
    last = revisions[f"step{STEPS[-1]}"]
    return Repo(trees[last], sha=last, revisions={**revisions, "v0": revisions["step0"]}, trees=trees, tags={"v0"})


@pytest.fixture
def neox_hub(online_env, monkeypatch, suite):
    server = HubServer({REPO: _repo(suite)}, max_requests=2000, max_seconds=120)
    with server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def _local_scores(tmp_path, files: dict[str, bytes], name: str):  # noqa: ANN202
    root = tmp_path / "local" / name
    root.mkdir(parents=True, exist_ok=True)
    for fname, blob in files.items():
        (root / fname).write_bytes(blob)
    return score(str(root))


NUMBERS = ["symmetry", "directionality", "frobenius_norm", "n_outlier_rows", "n_outlier_cols"]


def _check_equal_per_revision(table, suite, tmp_path) -> None:  # noqa: ANN001
    revisions, trees = suite
    assert list(dict.fromkeys(table["revision"])) == [f"step{s}" for s in STEPS]
    for rev, grp in table.groupby("revision", sort=False):
        ref = _local_scores(tmp_path, trees[revisions[rev]], rev)
        assert len(grp) == len(ref)
        np.testing.assert_allclose(grp[NUMBERS].to_numpy(float), ref[NUMBERS].to_numpy(float), rtol=1e-6,
                                   equal_nan=True)
        assert (grp["step"] == int(rev[4:])).all()


def test_branches_are_listed_in_step_order_without_main_and_tags_without_steps(neox_hub):
    revs = list_revisions(REPO)
    assert [r.name for r in revs] == [f"step{s}" for s in STEPS]
    assert [r.step for r in revs] == STEPS
    assert all(r.commit == neox_hub.repos[REPO].revisions[r.name] for r in revs)
    assert [h.path for h in neox_hub.hits(contains="/refs")] == [f"/api/models/{REPO}/refs"]


def test_sweep_reads_only_qkv_by_range_and_equals_geometry_per_revision(neox_hub, suite, tmp_path, online_env):
    res = sweep(REPO, tmp_path / "out", executor="inline", progress=False)
    assert res.summary.ok and len(res.summary.done) == len(STEPS)
    _check_equal_per_revision(res.table, suite, tmp_path)
    # each revision resolved by its branch name, then read by range from the commit
    resolved = [h.path for h in neox_hub.hits(contains="/revision/")]
    assert resolved == [f"/api/models/{REPO}/revision/step{s}" for s in STEPS]
    weights = [h for h in neox_hub.hits("GET", "/cdn/") if h.path.endswith(".safetensors")]
    assert weights and all(h.status == 206 for h in weights)
    # bytes: exactly each file's header plus its fused q|k|v tensors, a fraction of the file
    from safetensors.numpy import load

    revisions, trees = suite
    for _, row in res.revisions.iterrows():
        blob = trees[revisions[row["revision"]]]["model.safetensors"]
        qkv = sum(a.nbytes for k, a in load(blob).items() if k.endswith("query_key_value.weight"))
        assert row["bytes_read"] == qkv + 8 + int.from_bytes(blob[:8], "little")
        assert row["shard_bytes"] == len(blob)
    assert sum(h.sent for h in weights) == res.revisions["bytes_read"].sum()
    # the tensors of each scored revision are removed (the disk holds one revision at a time)
    assert not list((online_env / "attnscope" / "hub-tensors").rglob("*.safetensors"))

    neox_hub.clear()  # a rerun reuses every stored revision: only the branch list is asked for
    again = sweep(REPO, tmp_path / "out", executor="inline", progress=False)
    assert sorted(again.summary.skipped) == sorted(t for t in res.summary.done)
    assert [h.path for h in neox_hub.hits()] == [f"/api/models/{REPO}/refs"]


def test_a_hub_that_goes_down_mid_sweep_fails_those_revisions_and_a_rerun_completes(neox_hub, suite, tmp_path,
                                                                                    monkeypatch):
    # the branch list, each revision's config.json (one model: checked before any is scored, 2 requests each),
    # then about two revisions' requests
    neox_hub.down_after = 1 + 2 * len(STEPS) + 2 * 4
    res = sweep(REPO, tmp_path / "out", executor="inline", progress=False)
    assert 1 <= len(res.summary.done) < len(STEPS) and res.summary.failed
    for msg in res.summary.failed.values():
        assert "\n" not in msg and REPO in msg
    assert (res.revisions["status"] == "failed").sum() == len(res.summary.failed)
    done = set(res.summary.done)

    back = HubServer({REPO: _repo(suite)}, max_requests=2000, max_seconds=120)  # the hub is back
    with back:
        monkeypatch.setenv("HF_ENDPOINT", back.url)
        again = sweep(REPO, tmp_path / "out", executor="inline", progress=False)
        assert again.summary.ok and set(again.summary.skipped) == done
        assert len(back.hits(contains="/revision/")) == len(STEPS) - len(done)
    _check_equal_per_revision(again.table, suite, tmp_path)


def test_unreachable_hub_is_one_line(online_env, closed_port, monkeypatch, cli_inproc, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", closed_port)
    with pytest.raises(OfflineError, match="cannot be reached"):
        list_revisions(REPO)
    code, out, err = cli_inproc("emergence", REPO, "--out", str(tmp_path / "o"))
    assert code == 2 and err.strip().count("\n") == 0 and "cannot list its revisions" in err


def test_missing_revision_and_missing_repo_are_one_line(neox_hub, cli_inproc, tmp_path):
    code, _, err = cli_inproc("emergence", REPO, "--revisions", "step3", "--out", str(tmp_path / "o"))
    assert code == 2 and err.strip().count("\n") == 0 and "--revisions step3" in err and "no such revision" in err
    code, _, err = cli_inproc("emergence", "org/nothing", "--out", str(tmp_path / "o"))
    assert code == 2 and err.strip().count("\n") == 0 and "org/nothing" in err
    with pytest.raises(InputError, match="without @revision"):
        list_revisions(f"{REPO}@step1")


def test_cli_writes_the_table_and_reports_bytes(neox_hub, cli_inproc, tmp_path):
    out = tmp_path / "o"
    code, stdout, err = cli_inproc("emergence", REPO, "--revisions", "log:3", "--out", str(out), "--executor", "inline")
    assert code == 0, err
    revs = json.loads((out / "emergence.json").read_text())
    assert revs["source"] == REPO
    import pandas as pd

    table = pd.read_parquet(out / "emergence.parquet")
    assert list(dict.fromkeys(table["revision"])) == ["step0", "step1", "step8"]  # log:3: step 0, then the smallest and largest step
    assert "read" in err and "%" in err
    for name in ("revisions.csv", "formation.csv", "emergence_layers.png", "emergence_heads.png"):
        assert (out / name).is_file()


@pytest.mark.parametrize("keep", [False, True])
def test_a_hub_refusing_ranges_downloads_whole_files_and_they_are_removed_unless_kept(neox_hub, suite, tmp_path,
                                                                                      online_env, keep):
    neox_hub.ranges = False
    res = sweep(REPO, tmp_path / "out", revisions="step0,step1", executor="inline", progress=False,
                keep_downloads=keep)
    assert res.summary.ok
    revisions, trees = suite
    for _, row in res.revisions.iterrows():
        size = len(trees[revisions[row["revision"]]]["model.safetensors"])
        assert row["bytes_read"] == row["shard_bytes"] == size  # the whole file, and it says so
    cached = list((online_env / "hf" / "hub").rglob("model.safetensors"))
    blobs = [p for p in (online_env / "hf" / "hub").rglob("blobs/*") if p.stat().st_size > 10_000]
    assert (len(cached), len(blobs)) == ((2, 2) if keep else (0, 0))
    assert list((online_env / "hf" / "hub").rglob("config.json"))  # the small files stay


@pytest.mark.parametrize("keep", [False, True])
def test_behaviour_downloads_each_revision_for_the_probes_and_removes_it(neox_hub, suite, tmp_path, online_env, keep):
    from attnscope.heads.probes import run_probes

    opts = {"probes": "random", "random_windows": 1}
    res = sweep(REPO, tmp_path / "out", revisions="step0,step8", executor="inline", progress=False, behaviour=opts,
                keep_downloads=keep)
    assert res.summary.ok, res.summary.failed
    revisions, trees = suite
    heads = res.table[res.table["level"] == "head"]
    for rev, grp in heads.groupby("revision"):
        root = tmp_path / "local" / rev
        root.mkdir(parents=True)
        for fname, blob in trees[revisions[rev]].items():
            (root / fname).write_bytes(blob)
        ref = run_probes(str(root), "random", random_windows_n=1).sort_values(["layer", "head"])
        np.testing.assert_allclose(grp["induction_random"].to_numpy(float), ref["induction"].to_numpy(float))
    weights = [p for p in (online_env / "hf" / "hub").rglob("*.safetensors")]
    assert len(weights) == (2 if keep else 0)  # the snapshots the probes ran on, kept or gone
    assert not [p for p in Path(tempfile.gettempdir()).glob("attnscope-revision-*") if p.stat().st_mtime > START]


def test_offline_the_cached_branches_are_listed_and_a_finished_sweep_is_reused(neox_hub, tmp_path, monkeypatch):
    first = sweep(REPO, tmp_path / "out", revisions="step1,step4", executor="inline", progress=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    neox_hub.clear()
    assert [r.name for r in list_revisions(REPO)] == ["step1", "step4"]  # what earlier runs resolved
    again = sweep(REPO, tmp_path / "out", executor="inline", progress=False)
    assert sorted(again.summary.skipped) == sorted(first.summary.done) and neox_hub.log == []
    pd_equal = again.table.reset_index(drop=True).equals(first.table.reset_index(drop=True))
    assert pd_equal


def test_a_branch_of_another_architecture_is_refused_before_any_weights_are_read(online_env, monkeypatch, suite,
                                                                                 tmp_path):
    from online_repos import neox_repo

    from attnscope.errors import AttnscopeWarning

    revisions, trees = suite
    revisions = {"step0": revisions["step0"], "step1": revisions["step1"], "step2": f"{99:040x}"}
    trees = {**trees, revisions["step2"]: neox_repo(seed=9, d=48, n_heads=2)}  # wider, fewer heads
    repo = Repo(trees[revisions["step2"]], sha=revisions["step2"], revisions=revisions, trees=trees)
    with HubServer({"org/mixed": repo}, max_requests=500, max_seconds=120) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        out = tmp_path
        with pytest.raises(InputError, match="step2 is another model than step0 .*width 48 vs 32, heads 2 vs 4"):
            sweep("org/mixed", out / "a", executor="inline", progress=False)
        assert not [h for h in server.hits("GET", "/cdn/") if h.path.endswith(".safetensors")]  # no weights read
        with pytest.warns(AttnscopeWarning, match="skipped 1 revision"):
            res = sweep("org/mixed", out / "b", executor="inline", progress=False, skip_mismatched=True)
        assert list(res.revisions["status"]) == ["scored", "scored", "skipped"]
        assert set(res.table["revision"]) == {"step0", "step1"} and res.loss is None
