"""A hostile user's result folders: attnscope deletes only files it wrote and can prove it wrote.

Each case once lost a user's file: ``compare --out`` into a folder without a manifest removed every name
compare may write (even one this run did not write); a manifest edited to list a user's file, or a crafted
dead staging folder, made the next write, or a mere read, delete the user's file and the previous result.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from attnscope.errors import FormatError, InputError
from attnscope.outputs import MANIFEST, STAGING_PREFIX, check_result_set, write_result_set
from attnscope.tables import read_table
from tests.training.test_compare import seeds_experiment

from ._helpers import assert_one_line_error, cli

MINE = b"the user's own figure"


def _compare(runs, out):
    from attnscope.cli.compare import compare

    compare([str(r) for r in runs], out=str(out), baseline=None, at=None, target=None, smooth=1, speedup="matched",
            curve="auto", json_out=True)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return seeds_experiment(tmp_path_factory.mktemp("runs"))


def test_compare_out_keeps_a_users_file_by_a_name_this_run_does_not_write(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "loss_differences.png").write_bytes(MINE)  # one init only below: this run writes no such figure
    _compare(runs[0::2], out)
    assert (out / "loss_differences.png").read_bytes() == MINE
    assert "loss_differences.png" not in check_result_set(out)["compare"]["files"]


def test_compare_out_refuses_a_users_file_by_a_name_it_writes_in_one_line(runs, tmp_path):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "loss_curves.png").write_bytes(MINE)
    res = cli("compare", *runs, "--out", out)
    assert_one_line_error(res, "loss_curves.png exists", "cannot prove it wrote it", "choose another output folder")
    assert sorted(os.listdir(out)) == ["loss_curves.png"] and (out / "loss_curves.png").read_bytes() == MINE
    assert res.stdout == ""  # refused before any work


@pytest.mark.slow  # draws every figure of a comparison (core/test_outputs.py: the same rules, fast)
def test_compare_out_refuses_a_figure_only_this_run_writes_and_keeps_it(runs, tmp_path):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "loss_differences.png").write_bytes(MINE)  # two inits: this run draws the differences
    with pytest.raises(InputError, match="loss_differences.png exists"):
        _compare(runs, out)
    assert sorted(os.listdir(out)) == ["loss_differences.png"] and (out / "loss_differences.png").read_bytes() == MINE


@pytest.mark.slow  # draws every figure of a comparison (core/test_outputs.py: the same rules, fast)
def test_a_rerun_replaces_its_own_files_and_only_those(runs, tmp_path):
    out = tmp_path / "cmp"
    _compare(runs, out)  # writes loss_differences.png
    assert (out / "loss_differences.png").exists()
    (out / "notes.md").write_text("mine")
    _compare(runs[0::2], out)  # one init: its own earlier loss_differences.png goes, proven by its hash
    assert not (out / "loss_differences.png").exists() and (out / "notes.md").read_text() == "mine"


@pytest.mark.slow  # draws every figure of a comparison (core/test_outputs.py: the same rules, fast)
def test_an_edited_result_file_is_the_users_and_never_removed(runs, tmp_path):
    out = tmp_path / "cmp"
    _compare(runs, out)
    (out / "loss_differences.png").write_bytes(MINE)  # the user drew over it
    _compare(runs[0::2], out)
    assert (out / "loss_differences.png").read_bytes() == MINE


def _edited_manifest(out: Path, victim: str, sha: str, fix_entry_hash: bool) -> None:
    manifest = json.loads((out / MANIFEST).read_text())
    entry = manifest["results"]["atlas"]
    entry["files"][victim] = {"sha256": sha, "bytes": len(MINE)}
    if fix_entry_hash:  # what a careful forger would do
        from attnscope.outputs import _set_hash

        entry["sha256"] = _set_hash(entry["files"])
    (out / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("how", ["other-hash", "entry-hash-stale"])
def test_a_manifest_edited_to_list_a_users_file_never_removes_it(tmp_path, how):
    """(A forger who also writes the user's true hash into the entry and re-hashes it has made attnscope's
    record say the file is attnscope's; nothing on disk can tell that from the truth.)"""
    out = tmp_path / "out"
    write_result_set(out, {"a.csv": "x\n1\n", "b.png": b"png"}, kind="atlas")
    (out / "mine.png").write_bytes(MINE)
    _edited_manifest(out, "mine.png", _sha(b"what it once was"), fix_entry_hash=how == "other-hash")
    with pytest.raises(FormatError, match="mine.png differs" if how == "other-hash" else "its atlas entry was edited"):
        check_result_set(out)
    with pytest.raises(FormatError):
        read_table(out / "a.csv")
    assert (out / "mine.png").read_bytes() == MINE  # reading deletes nothing
    if how == "other-hash":  # the entry is sound: its own unchanged files are replaced as before
        write_result_set(out, {"a.csv": "x\n2\n"}, kind="atlas")
        assert not (out / "b.png").exists() and read_table(out / "a.csv")["x"].tolist() == [2]
    else:  # an entry edited by hand proves nothing: its files are the user's now
        with pytest.raises(InputError, match="a.csv exists"):
            write_result_set(out, {"a.csv": "x\n2\n"}, kind="atlas")
        write_result_set(out, {"c.csv": "x\n2\n"}, kind="atlas")
        assert (out / "b.png").read_bytes() == b"png" and (out / "a.csv").read_text() == "x\n1\n"
        assert set(check_result_set(out)["atlas"]["files"]) == {"c.csv"}
    assert (out / "mine.png").read_bytes() == MINE


def _crafted_staging(out: Path, *, record: bool, base: str | None, victim: str = "mine.png") -> Path:
    """A dead staging folder as a forger makes it: a commit that writes a.csv and removes ``victim``."""
    staging = out / f"{STAGING_PREFIX}atlas-999999-forged"
    staging.mkdir()
    (staging / "a.csv").write_text("x\nforged\n")
    files = {"a.csv": {"sha256": _sha(b"x\nforged\n")}}
    from attnscope.outputs import _set_hash

    entry = {"files": files, "sha256": _set_hash(files)}
    if record:
        (staging / ".attnscope-staging.json").write_text(json.dumps({"format": "attnscope-staging/1", "files": files}))
    commit = {"format": "attnscope-staging/1", "kind": "atlas", "entry": entry, "base": base,
              "replace": {"a.csv": _sha(b"x\n1\n")}, "remove": {victim: _sha(b"what it once was"), "b.png": "0" * 64},
              "results": {"atlas": entry}}
    (staging / ".attnscope-commit.json").write_text(json.dumps(commit))
    (staging / "commit.json").write_text(json.dumps({"kind": "atlas", "entry": entry, "replaces": [victim, "b.png"]}))
    return staging


@pytest.mark.parametrize("how", ["old-format", "no-record", "stale-base", "current-base"])
def test_a_crafted_dead_staging_folder_never_deletes_a_users_file(tmp_path, how):
    out = tmp_path / "out"
    write_result_set(out, {"a.csv": "x\n1\n", "b.png": b"png"}, kind="atlas")
    (out / "mine.png").write_bytes(MINE)
    base = {"stale-base": "1" * 64, "current-base": _sha((out / MANIFEST).read_bytes())}.get(how)
    staging = _crafted_staging(out, record=how != "no-record", base=base)
    if how == "old-format":
        (staging / ".attnscope-commit.json").unlink()
        (staging / ".attnscope-staging.json").unlink()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert read_table(out / "a.csv")["x"].tolist() == [1]  # a read sees the result as it is and changes nothing
    check_result_set(out)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before and staging.exists()
    with pytest.warns(UserWarning) if how in ("old-format", "no-record") else _nothing():
        write_result_set(out, {"z.png": b"z"}, kind="heads")
    assert (out / "mine.png").read_bytes() == MINE and (out / "b.png").read_bytes() == b"png"
    if how == "current-base":  # replayed as attnscope's journal: its a.csv in place; nothing unproven removed
        assert (out / "a.csv").read_text() == "x\nforged\n"
    else:
        assert (out / "a.csv").read_text() == "x\n1\n"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_staging_folder_holding_a_file_it_did_not_stage_is_left_in_place(tmp_path):
    out = tmp_path / "out"
    write_result_set(out, {"a.csv": "x\n1\n"}, kind="atlas")
    staging = out / f"{STAGING_PREFIX}atlas-999999-abcdefgh"
    staging.mkdir()
    (staging / ".attnscope-staging.json").write_text(json.dumps(
        {"format": "attnscope-staging/1", "files": {"a.csv": {"sha256": _sha(b"staged")}}}))
    (staging / "a.csv").write_bytes(MINE)  # not what was staged there
    (staging / "mine.txt").write_bytes(MINE)
    with pytest.warns(UserWarning, match="holds files that are not the ones attnscope staged"):
        write_result_set(out, {"a.csv": "x\n2\n"}, kind="atlas")
    assert (staging / "a.csv").read_bytes() == MINE and (staging / "mine.txt").read_bytes() == MINE


def test_a_user_file_in_place_of_a_results_file_is_never_overwritten_by_a_replay(tmp_path, monkeypatch):
    """A write killed after its commit; before the replay, the user puts their own file where one goes."""
    out = tmp_path / "out"
    write_result_set(out, {"a.csv": "x\n1\n", "b.png": b"old"}, kind="atlas")
    real, n = os.replace, [0]

    class Killed(BaseException):
        pass

    def replace(src, dst):
        n[0] += 1
        if n[0] == 4:  # two staging records, the commit record, then the first move
            raise Killed
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        write_result_set(out, {"a.csv": "x\n2\n", "b.png": b"new"}, kind="atlas")
    monkeypatch.setattr(os, "replace", real)
    (out / "b.png").write_bytes(MINE)
    write_result_set(out, {"z.png": b"z"}, kind="heads")
    assert (out / "b.png").read_bytes() == MINE
