"""No command writes over, replaces or deletes a file it did not write (issue 49, item 1).

For every command that writes: the user's files under each of its output names, as plain files, read-only
files and symbolic links, are refused in one line naming one of them before any work, and every one of them
has the same bytes (and kind) afterwards. A second run over the command's own result still replaces it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnscope.cli.dynamics import BIFURCATION_FILES, TRAJECTORY_FILES
from attnscope.cli.heads import HEADS_FIGURES, STUDY_FIGURES, STUDY_TABLES
from attnscope.emergence.sweep import RESULT_FILES
from attnscope.zoo.survey import SURVEY_FILES

KINDS = ("plain", "readonly", "symlink")


def _plant(path: Path, kind: str, elsewhere: Path) -> None:
    """A file of the user's at ``path``: plain, read-only, or a link to a file of theirs elsewhere."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        target = elsewhere / f"target-{path.name}"
        target.write_text(f"the user's {path.name}\n")
        path.symlink_to(target)
    else:
        path.write_text(f"the user's {path.name}\n")
        if kind == "readonly":
            path.chmod(stat.S_IRUSR)


def _state(paths: list[Path]) -> dict[str, tuple[bool, str]]:
    return {str(p): (p.is_symlink(), hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths}


def _metrics_table(path: Path) -> Path:
    rng = np.random.default_rng(0)
    pd.DataFrame({"layer": np.repeat(range(3), 4), "head": list(range(4)) * 3, "entropy": rng.random(12),
                  "sparsity": rng.random(12), "distance": rng.random(12), "sink_first": rng.random(12),
                  "prev_mass": rng.random(12), "entropy_norm": rng.random(12)}).to_csv(path, index=False)
    return path


PHASE = ["--x-start", "1.0", "--x-stop", "1.4", "--x-num", "2", "--y", "eps", "--y-start", "0.0", "--y-stop", "0.05",
         "--y-num", "2", "--transient", "10", "--steps", "10", "--executor", "inline"]

# (name, command line with {d} the output folder / {f} the output file, the output names planted in {d})
CASES = [
    ("train", ["train", "--tokenizer", "bytes", "--steps", "3", "--out", "{d}"],
     ["run.json", "summary.json", "tokenizer.json", "checkpoints", "tensorboard"]),
    ("train-metrics", ["train", "--tokenizer", "bytes", "--steps", "3", "--resume", "--out", "{d}"], ["metrics.jsonl"]),
    ("report", ["report", "{model}", "--out", "{d}"], ["report.html"]),
    ("dynamics-phase", ["dynamics", "phase", *PHASE, "--out", "{d}"], ["phase.csv", "phase.png"]),
    ("dynamics-finite", ["dynamics", "finite", "--repeats", "1", "--steps", "2", "--seeds", "1", "--out", "{d}"],
     ["finite.csv", "finite.png"]),
    ("dynamics-trajectory", ["dynamics", "trajectory", "--steps", "5", "--out", "{d}"], list(TRAJECTORY_FILES)),
    ("dynamics-bifurcation", ["dynamics", "bifurcation", "--start", "1", "--stop", "1.1", "--num", "2",
                              "--total-steps", "20", "--transient", "10", "--lyap-steps", "0", "--executor", "none",
                              "--out", "{d}"], list(BIFURCATION_FILES)),
    ("dynamics-lyapunov", ["dynamics", "lyapunov", "--steps", "10", "--transient", "0", "--out", "{d}/l.csv"],
     ["l.csv"]),
    ("emergence", ["emergence", "{d}/missing-run", "--out", "{d}"], [*RESULT_FILES]),
    ("geometry-zoo", ["geometry", "--zoo", "offline-demo", "--out", "{d}"], [*SURVEY_FILES, "survey.json"]),
    ("geometry-zoo-settings", ["geometry", "--zoo", "offline-demo", "--out", "{d}"], ["survey.json"]),
    ("geometry-out", ["geometry", "{model}", "--out", "{d}/scores.csv"], ["scores.csv"]),
    ("heads-measure", ["heads", "{model}", "--out", "{d}/h.csv", "--js", "{d}/js.csv", "--plot", "{d}"],
     ["h.csv", "js.csv", *HEADS_FIGURES]),
    ("heads-cluster", ["heads", "cluster", "{metrics}", "--k-max", "3", "--out", "{d}/x.csv", "--plot", "{d}"],
     ["x.csv", "x_silhouette.csv", "cluster_silhouette.png", "cluster_js_mds.png", "cluster_map_ward.png",
      "cluster_map_kmeans.png"]),
    ("heads-derive", ["heads", "derive", "{metrics}", "--out", "{d}/p.yaml"], ["p.yaml"]),
    ("heads-study", ["heads", "study", "{d}", "--steps", "2"], list(STUDY_TABLES)),
    ("heads-study-figures", ["heads", "study", "{d}", "--steps", "2"], [f"figures/{n}" for n in STUDY_FIGURES]),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_users_files_are_refused_untouched(case, kind, tmp_path, cli_inproc, tiny_bert_dir):
    name, argv, names = case
    d = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    metrics = _metrics_table(tmp_path / "m.csv")
    planted = []
    for n in names:
        _plant(d / n, kind, elsewhere)
        planted.append(d / n)
    before = _state(planted)
    listing = sorted(os.listdir(d))
    args = [a.format(d=d, model=tiny_bert_dir, metrics=metrics) for a in argv]
    code, out, err = cli_inproc(*args)
    assert code == 2, (code, err)
    lines = [line for line in err.strip().splitlines() if line.startswith("attnscope: error")]
    assert len(lines) == 1 and len(err.strip().splitlines()) == 1, err
    assert any(Path(n).name in err for n in names), err
    assert "never replaces" in err, err
    assert _state(planted) == before
    if not name.startswith("geometry-zoo"):  # the survey's store may be made beside them  # nothing written beside them, before or after
        assert sorted(os.listdir(d)) == listing, sorted(os.listdir(d))
    for p in planted:
        if kind == "readonly":
            p.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_own_result_files_are_replaced_and_others_kept(tmp_path, cli_inproc):
    """A command's own single-file result is replaced by the next run; another file in the folder is untouched."""
    metrics = _metrics_table(tmp_path / "m.csv")
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    for _ in range(2):
        code, _, err = cli_inproc("heads", "cluster", metrics, "--k-max", "3", "--out", tmp_path / "x.csv")
        assert code == 0, err
    assert (tmp_path / "x_silhouette.csv").is_file() and mine.read_text() == "mine\n"
    for _ in range(2):
        code, _, err = cli_inproc("heads", "derive", metrics, "--out", tmp_path / "p.yaml")
        assert code == 0, err
    # an edited result is the user's now: read as it is, never replaced
    (tmp_path / "x.csv").write_text((tmp_path / "x.csv").read_text())  # same bytes: still attnscope's
    code, _, err = cli_inproc("heads", "cluster", metrics, "--k-max", "3", "--out", tmp_path / "x.csv")
    assert code == 0, err
    with open(tmp_path / "x.csv", "a") as fh:
        fh.write("\n")
    code, _, err = cli_inproc("heads", "cluster", metrics, "--k-max", "3", "--out", tmp_path / "x.csv")
    assert code == 2 and "x.csv exists" in err, err
    from attnscope.tables import read_table

    assert len(read_table(tmp_path / "x.csv")) > 0  # an edited single file is no "mixed result"


def test_dynamics_folders_replace_their_own_result(tmp_path, cli_inproc):
    for _ in range(2):
        code, _, err = cli_inproc("dynamics", "finite", "--repeats", "1", "--steps", "2", "--seeds", "1",
                                  "--out", tmp_path / "fin")
        assert code == 0, err
    assert {"finite.csv", "finite.png", "attnscope-manifest.json"} <= set(os.listdir(tmp_path / "fin"))


@pytest.mark.parametrize("content", ["mine\n", '{"k": 2.0, "mine": 1}\n', "[1]\n"])
def test_a_users_settings_file_is_never_rewritten(tmp_path, content):
    """emergence.json / survey.json of the user's (any content) is refused, not rewritten (it was, when unreadable)."""
    from attnscope.errors import InputError
    from attnscope.zoo.survey import _check_settings

    (tmp_path / "emergence.json").write_text(content)
    with pytest.raises(InputError, match="emergence.json exists and is not the settings file"):
        _check_settings(tmp_path, {"k": 2.0, "stacks": None}, "emergence.json")
    assert (tmp_path / "emergence.json").read_text() == content
    (tmp_path / "survey.json").write_text('{"k": 2.0, "stacks": null}')  # attnscope's own: accepted
    _check_settings(tmp_path, {"k": 2.0, "stacks": None})
    store = tmp_path / "store"
    (store / "tasks").mkdir(parents=True)
    (store / "tasks" / "a.parquet").write_bytes(b"x")
    if content.startswith("mine"):  # beside a store's results: attnscope's damaged settings, rewritten (as before)
        with pytest.warns(UserWarning, match="unreadable; rewriting it"):
            _check_settings(tmp_path, {"k": 2.0, "stacks": None}, "emergence.json", store=store)
        assert json.loads((tmp_path / "emergence.json").read_text()) == {"k": 2.0, "stacks": None}


def test_a_shared_sticky_folder_whose_manifest_is_another_users_is_refused_first(tmp_path, monkeypatch):
    """/tmp: the manifest of another user cannot be replaced there; said before any work, not after it."""
    from attnscope.errors import InputError
    from attnscope.outputs import check_result_file, write_result_file

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    write_result_file(shared / "a.csv", "x\n1\n", kind="test")  # the other user's result (and manifest)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(shared).st_uid + 4242)  # this user is someone else
    with pytest.raises(InputError, match="belongs to another user"):
        check_result_file(shared / "b.csv")
