"""Results of several files are replaced whole (attnscope.outputs): staged, committed, moved, manifest last.

A fault (an exception, a real SIGKILL) at any moment leaves the folder with the complete old or the
complete new result once the next run has looked at it (a reader refuses the mix and changes nothing);
what killed writers leave is cleaned. A file attnscope cannot prove it wrote is never replaced or removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attnscope import outputs
from attnscope.errors import FormatError, InputError
from attnscope.outputs import MANIFEST, STAGING_PREFIX, check_result_set, clean_stale, write_result_set

SRC = str(Path(outputs.__file__).resolve().parents[1])


def _set(tag: str) -> dict[str, bytes]:
    return {"a.csv": f"x\n{tag}\n".encode(), "b.json": f'{{"tag": "{tag}"}}'.encode(), "c.png": tag.encode() * 100}


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}


def _staging(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(STAGING_PREFIX)]


def test_a_result_is_written_with_a_manifest_of_its_files_and_settings(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    paths = write_result_set(tmp_path, {**_set("old"), "d.md": "text"}, {"windows": 8}, kind="atlas")
    assert [p.name for p in paths] == ["a.csv", "b.json", "c.png", "d.md"]
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    entry = manifest["results"]["atlas"]
    assert sorted(entry["files"]) == ["a.csv", "b.json", "c.png", "d.md"] and entry["settings"] == {"windows": 8}
    assert entry["files"]["d.md"]["bytes"] == 4 and len(entry["sha256"]) == 64
    assert check_result_set(tmp_path)["atlas"]["sha256"] == entry["sha256"]
    assert (tmp_path / "notes.txt").read_text() == "mine" and not _staging(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted([MANIFEST, "notes.txt", "a.csv", "b.json", "c.png", "d.md"])


def test_a_new_result_replaces_the_old_whole_and_leaves_other_files_alone(tmp_path):
    write_result_set(tmp_path, _set("old"), kind="atlas")
    write_result_set(tmp_path, {"fig.png": b"heads"}, kind="heads")
    (tmp_path / "mine.csv").write_text("user")
    write_result_set(tmp_path, {"a.csv": b"new"}, kind="atlas")  # b.json and c.png belonged to the old atlas only
    assert _contents(tmp_path) == {"a.csv": b"new", "fig.png": b"heads", "mine.csv": b"user"}
    assert set(check_result_set(tmp_path)) == {"atlas", "heads"}
    with pytest.raises(InputError, match=r"mine.csv exists and no entry of attnscope-manifest.json .* move it away"):
        write_result_set(tmp_path, {"mine.csv": b"1", "x.png": b"2"}, kind="compare")
    assert (tmp_path / "mine.csv").read_text() == "user" and "x.png" not in os.listdir(tmp_path)
    assert not _staging(tmp_path)


def test_a_file_of_the_previous_result_edited_since_is_kept(tmp_path):
    write_result_set(tmp_path, _set("old"), kind="atlas")
    (tmp_path / "b.json").write_text("my notes")  # the user's now
    with pytest.raises(InputError, match="b.json exists"):
        write_result_set(tmp_path, _set("new"), kind="atlas")
    write_result_set(tmp_path, {"a.csv": b"new"}, kind="atlas")  # b.json not written: kept, no longer listed
    assert _contents(tmp_path) == {"a.csv": b"new", "b.json": b"my notes"}
    assert set(check_result_set(tmp_path)["atlas"]["files"]) == {"a.csv"}


def test_a_mixed_folder_is_refused_naming_the_files(tmp_path):
    write_result_set(tmp_path, _set("old"), kind="atlas")
    (tmp_path / "a.csv").write_bytes(b"x\nnew\n")  # as a kill between two plain writes would leave it
    (tmp_path / "c.png").unlink()
    with pytest.raises(FormatError, match=r"mixed atlas result: a.csv differs from it; c.png is missing \(1 of 3"):
        check_result_set(tmp_path)
    from attnscope.tables import read_table

    with pytest.raises(FormatError, match="mixed atlas result"):
        read_table(tmp_path / "a.csv")
    (tmp_path / "other.csv").write_text("x\n1\n")
    assert read_table(tmp_path / "other.csv")["x"].tolist() == [1]  # not part of the result: read as it is


class Killed(BaseException):
    """What a kill looks like from inside the process (no handler runs on a real SIGKILL either)."""


def test_a_fault_while_rendering_leaves_the_old_result_and_no_staging(tmp_path):
    write_result_set(tmp_path, _set("old"), kind="atlas")
    before = _contents(tmp_path)

    def boom():
        raise Killed

    with pytest.raises(Killed):
        write_result_set(tmp_path, {**_set("new"), "z.png": boom}, kind="atlas")
    assert _contents(tmp_path) == before and not _staging(tmp_path)
    check_result_set(tmp_path)


def test_a_file_given_in_pieces_is_written_as_they_come(tmp_path, monkeypatch):
    """A callable may give an iterable of pieces (text and bytes): the file is their concatenation, its hash in the
    manifest; a fault halfway through leaves the old result and neither staging folder nor temporary behind."""
    monkeypatch.setattr(outputs, "_WRITE_CHUNK", 10)  # many writes of gathered pieces
    pieces = ["<p>", "naïve ↵ 数据", b"\x00raw", *[f"{i}," for i in range(100)], ""]
    whole = b"".join(p if isinstance(p, bytes) else p.encode() for p in pieces)
    write_result_set(tmp_path, {"a.csv": b"x", "page.html": lambda: iter(pieces)}, kind="atlas")
    assert (tmp_path / "page.html").read_bytes() == whole
    entry = check_result_set(tmp_path)["atlas"]["files"]["page.html"]
    assert entry == {"sha256": hashlib.sha256(whole).hexdigest(), "bytes": len(whole)}

    def broken():
        yield "<p>" * 50
        raise Killed

    with pytest.raises(Killed):
        write_result_set(tmp_path, {"a.csv": b"y", "page.html": broken}, kind="atlas")
    assert _contents(tmp_path) == {"a.csv": b"x", "page.html": whole} and not _staging(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted([MANIFEST, "a.csv", "page.html"])  # no temporary either
    with pytest.raises(TypeError, match="files\\['page.html'\\] gave a piece of int"):
        write_result_set(tmp_path, {"page.html": lambda: ["a", 3]}, kind="atlas")
    assert not _staging(tmp_path) and (tmp_path / "page.html").read_bytes() == whole


def test_a_fault_while_moving_is_refused_by_a_reader_and_finished_by_the_next_writer(tmp_path, monkeypatch):
    write_result_set(tmp_path, _set("old"), kind="atlas")
    real_replace, moves = os.replace, []

    def replace_then_die(src, dst):
        if len(moves) == 5:  # three staging records, the commit record, a.csv moved into place
            raise Killed
        moves.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(Killed):
        write_result_set(tmp_path, _set("new"), kind="atlas")
    monkeypatch.setattr(os, "replace", real_replace)
    assert _contents(tmp_path)["a.csv"] == b"x\nnew\n" and _contents(tmp_path)["b.json"] == _set("old")["b.json"]
    assert len(_staging(tmp_path)) == 1  # committed: the journal of the move
    with pytest.raises(FormatError, match="killed while moving its files: the next write into the folder finishes"):
        check_result_set(tmp_path)  # reading changes nothing
    assert len(_staging(tmp_path)) == 1 and _contents(tmp_path)["b.json"] == _set("old")["b.json"]
    write_result_set(tmp_path, {"z.png": b"z"}, kind="heads")  # any write replays the move first
    assert set(check_result_set(tmp_path)) == {"atlas", "heads"} and not _staging(tmp_path)
    assert {n: b for n, b in _contents(tmp_path).items() if n != "z.png"} == _set("new")


def test_stale_temporaries_of_attnscope_are_cleaned_and_nothing_else(tmp_path):
    old = time.time() - 3600
    stale = [".attnscope-tmp.correlations.csv.ab12_x9z.tmp", ".attnscope-probe-k2j4h5g6"]
    # a user's own files, one of them named like another program's mkstemp temporary
    keep = [".correlations.csv.tmp", "x.tmp", ".hidden", ".a.csv.ABCDEFGH.tmp", ".correlations.csv.ab12_x9z.tmp"]
    for name in stale + keep:
        (tmp_path / name).write_text("t")
        os.utime(tmp_path / name, (old, old))
    fresh = tmp_path / ".attnscope-tmp.atlas.csv.qwertyui.tmp"  # a writer of this moment (newer than this process)
    fresh.write_text("t")
    dead = tmp_path / f"{STAGING_PREFIX}atlas-1-abcdefgh"  # uncommitted, its process gone
    dead.mkdir()
    (dead / "a.csv").write_text("half")
    record = {"format": "attnscope-staging/1", "kind": "atlas", "pid": 1,
              "files": {"a.csv": {"sha256": hashlib.sha256(b"half").hexdigest()}}}
    (dead / ".attnscope-staging.json").write_text(json.dumps(record))
    os.utime(dead, (old, old))
    write_result_set(tmp_path, {"a.csv": b"1"}, kind="atlas")
    names = set(os.listdir(tmp_path))
    assert not names & set(stale) and set(keep) <= names and fresh.name in names and dead.name not in names


def test_a_live_writers_staging_folder_is_left_alone(tmp_path):
    live = tmp_path / f"{STAGING_PREFIX}atlas-1-abcdefgh"
    live.mkdir()
    (live / ".attnscope-staging.json").write_text(json.dumps({"format": "attnscope-staging/1", "files": {}}))
    os.utime(live, (0, 0))
    with outputs._locked(live):  # its writer holds the lock
        assert clean_stale(tmp_path) == []
    assert clean_stale(tmp_path) == [live.name]


def test_bad_calls_are_one_line(tmp_path):
    for files, kind, needle in (({}, "atlas", "non-empty mapping"), ({"../x": b""}, "atlas", "plain file name"),
                                ({MANIFEST: b""}, "atlas", "plain file name"), ({"a": b""}, "Bad Kind", "kind must")):
        with pytest.raises(InputError, match=needle):
            write_result_set(tmp_path, files, kind=kind)
    with pytest.raises(TypeError, match="files\\['a'\\] gave int"):
        write_result_set(tmp_path, {"a": lambda: 3}, kind="atlas")
    assert not _staging(tmp_path)


# -- real SIGKILLs, in a child process ------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {src!r})
    from attnscope.outputs import write_result_set
    tag, when = sys.argv[1], sys.argv[2]
    files = {{"a.csv": f"x\\n{{tag}}\\n".encode(), "b.json": ('{{"tag": "%s"}}' % tag).encode(), "c.png": tag.encode() * 100}}
    if when == "rendering":
        def last():
            print("rendering", flush=True)
            time.sleep(60)
            return b""
        files["d.png"] = last
    elif when == "streaming":
        def pieces():
            yield "x" * 3_000_000
            print("streaming", flush=True)
            time.sleep(60)
        files["d.html"] = pieces
    elif when == "moving":
        real, n = os.replace, [0]
        def replace(src, dst):
            n[0] += 1
            if n[0] == 6:  # three staging records, the commit record, then a.csv moved into place
                os.kill(os.getpid(), signal.SIGKILL)
            real(src, dst)
        os.replace = replace
    write_result_set({out!r}, files, kind="atlas")
""")


def _child(out: Path, tag: str, when: str) -> subprocess.Popen:
    code = CHILD.format(src=SRC, out=str(out))
    return subprocess.Popen([sys.executable, "-c", code, tag, when], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("when", ["rendering", "streaming"])
def test_sigkill_while_rendering_leaves_the_old_set_and_the_next_run_cleans(tmp_path, when):
    write_result_set(tmp_path, _set("old"), kind="atlas")
    child = _child(tmp_path, "new", when)
    assert child.stdout.readline().strip() == when  # streaming: megabytes of a page in a temporary of the staging
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    assert _contents(tmp_path) == _set("old") and len(_staging(tmp_path)) == 1
    check_result_set(tmp_path)  # the old set, whole
    nxt = _child(tmp_path, "next", "never")
    assert nxt.wait(timeout=120) == 0
    assert _contents(tmp_path) == _set("next") and not _staging(tmp_path)


def test_sigkill_while_moving_leaves_a_set_a_reader_refuses_and_the_next_run_completes(tmp_path):
    from attnscope.tables import read_table

    write_result_set(tmp_path, _set("old"), kind="atlas")
    child = _child(tmp_path, "new", "moving")
    assert child.wait(timeout=120) == -signal.SIGKILL
    assert len(_staging(tmp_path)) == 1 and (tmp_path / "a.csv").read_bytes() == b"x\nnew\n"
    assert (tmp_path / "b.json").read_bytes() == _set("old")["b.json"]  # mixed on disk, for now
    with pytest.raises(FormatError, match="mixed atlas result: a.csv differs from it .2 of 3 files match.*killed while moving"):
        read_table(tmp_path / "a.csv")  # and changes nothing
    assert len(_staging(tmp_path)) == 1
    nxt = _child(tmp_path / "other", "x", "never")  # a write into another folder finishes nothing here
    assert nxt.wait(timeout=120) == 0 and len(_staging(tmp_path)) == 1
    write_result_set(tmp_path, {"z.png": b"z"}, kind="heads")
    assert read_table(tmp_path / "a.csv")["x"].tolist() == ["new"]
    assert {n: b for n, b in _contents(tmp_path).items() if n != "z.png"} == _set("new") and not _staging(tmp_path)


def test_an_unreadable_manifest_is_refused_by_readers_and_writers_and_kept(tmp_path):
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(FormatError, match="unreadable manifest"):
        check_result_set(tmp_path)
    with pytest.raises(InputError, match="attnscope-manifest.json exists and it is no manifest attnscope can read"):
        write_result_set(tmp_path, {"a.csv": b"x\n1\n"}, kind="atlas")
    assert os.listdir(tmp_path) == [MANIFEST] and (tmp_path / MANIFEST).read_text() == "{not json"
