"""Hostile input and faults for the results store, the executors and the shared writers (tables.py).

Foreign / mismatched task files are quarantined and recomputed, never merged; a full disk stops a
run with one StorageError naming the path and leaves no partial file; killing the main process of
a local-executor run leaves no worker behind; output paths are refused before any work.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import FormatError, InputError, StorageError
from attnscope.runs import ResultsStore, Task, run_tasks
from attnscope.runs.store import QuarantineWarning
from attnscope.tables import (
    atomic_write_bytes,
    check_writable,
    numeric_columns,
    read_mapping,
    write_table,
)

from ._helpers import (
    alive,
    big,
    files_under,
    fill_up,
    no_temporaries,
    square,
    tiny_filesystem,
)

SETTINGS = {"k": 2.0}


def _tasks(n: int, k: int = 1) -> list[Task]:
    return [Task(f"org/m-{i}", {"x": i, "k": k}) for i in range(n)]


def _store(root: Path, settings=SETTINGS) -> ResultsStore:
    return ResultsStore(root, settings=settings, columns=("x", "y"), key_column=None)


def _check_square_results(df: pd.DataFrame, n: int) -> None:
    assert list(df.columns) == ["x", "y", "k"]
    assert sorted(df["x"]) == list(range(n)) and (df["y"] == df["x"] ** 2).all()
    assert not df.isna().any().any()


# ---------------------------------------------------------------------------- store validation


@pytest.mark.parametrize("forgery", ["foreign-shape", "no-metadata", "other-key", "other-settings", "garbage"])
def test_an_invalid_task_file_is_quarantined_and_recomputed(tmp_path, forgery):
    store = _store(tmp_path)
    run_tasks(square, _tasks(3), store, executor="inline", progress=False)
    victim = store.path("org/m-1")
    if forgery == "foreign-shape":  # a valid parquet of another shape, even with our metadata's key
        ResultsStore(tmp_path / "other", settings=SETTINGS).write("org/m-1", pd.DataFrame({"x": [7.0]}))
        victim.write_bytes(ResultsStore(tmp_path / "other").path("org/m-1").read_bytes())
    elif forgery == "no-metadata":  # the right shape, but not written by the store
        pd.DataFrame({"x": [1], "y": [1], "k": [1]}).to_parquet(victim)
    elif forgery == "other-key":  # another task's (valid) file copied over
        victim.write_bytes(store.path("org/m-2").read_bytes())
    elif forgery == "other-settings":
        _store(tmp_path / "other", settings={"k": 3.0}).write("org/m-1", square({"x": 1}))
        victim.write_bytes(_store(tmp_path / "other", settings={"k": 3.0}).path("org/m-1").read_bytes())
    else:
        victim.write_bytes(b"PAR1 not really")
    forged = victim.read_bytes()
    with pytest.warns(QuarantineWarning) as rec:
        summary = run_tasks(square, _tasks(3), store, executor="inline", progress=False)
    assert summary.done == ["org/m-1"] and sorted(summary.skipped) == ["org/m-0", "org/m-2"]
    assert len(rec) == 1 and "\n" not in str(rec[0].message) and victim.name in str(rec[0].message)
    quarantined = files_under(tmp_path / "set-aside")
    assert len(quarantined) == 1 and quarantined[0].read_bytes() == forged  # kept for inspection
    _check_square_results(store.merge([t.key for t in _tasks(3)]), 3)


def test_merge_never_includes_an_invalid_file(tmp_path):
    store = _store(tmp_path)
    run_tasks(square, _tasks(2), store, executor="inline", progress=False)
    pd.DataFrame({"stray": ["x"]}).to_parquet(store.path("org/m-1"))
    with pytest.warns(QuarantineWarning):
        merged = store.merge()
    assert list(merged["x"]) == [0] and "stray" not in merged.columns


def test_key_column_must_name_the_task(tmp_path):
    store = ResultsStore(tmp_path, key_column="model")
    store.write("a", pd.DataFrame({"model": ["a", "a"], "v": [1, 2]}))
    store.write("b", pd.DataFrame({"model": ["a"], "v": [1]}))  # a result of another model under b's name
    with pytest.warns(QuarantineWarning, match="model column names a"):
        assert store.is_done("a") and not store.is_done("b")


def test_a_second_run_on_the_same_store_is_refused(tmp_path):
    store = _store(tmp_path)
    with store.lock(), pytest.raises(InputError, match="in use by another run"):
        run_tasks(square, _tasks(1), store, executor="inline", progress=False)
    run_tasks(square, _tasks(1), store, executor="inline", progress=False)  # released: fine again
    assert store.is_done("org/m-0")


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_workers_must_be_a_positive_integer(tmp_path, workers):
    with pytest.raises(InputError, match=r"^workers must"):  # Python's words; the CLI shows --workers
        run_tasks(square, _tasks(2), tmp_path, executor="local", workers=workers, progress=False)
    assert not files_under(tmp_path / "tasks")


def test_store_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        ResultsStore(tmp_path / "f")


# ---------------------------------------------------------------------------- full disks, atomicity


def test_a_failing_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "t.json"
    target.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError, match=r"cannot write .*t\.json: no space left on device"):
        atomic_write_bytes(target, b"new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_enospc_on_a_tiny_filesystem_stops_the_run_with_one_error(tmp_path):
    with tiny_filesystem(tmp_path / "disk") as disk:
        store = ResultsStore(disk / "store")
        fill_up(disk)
        with pytest.raises(StorageError, match="no space left on device") as err:
            run_tasks(big, _tasks(3), store, executor="inline", progress=False)
        assert "\n" not in str(err.value) and str(store.tasks_dir) in str(err.value)
        assert not files_under(store.tasks_dir) and no_temporaries(disk)  # nothing half-written
        with pytest.raises(StorageError, match="no space left on device"):
            write_table(pd.DataFrame({"x": np.arange(10_000)}), disk / "t.parquet")
        assert not (disk / "t.parquet").exists() and no_temporaries(disk)


# ---------------------------------------------------------------------------- output paths


@pytest.mark.parametrize(
    "case, directory, needle",
    [
        ("parent-is-file", False, "is a file, not a directory"),
        ("dir-where-file", False, "is a directory"),
        ("file-where-dir", True, "exists and is not a directory"),
        ("proc", False, "cannot write into /proc"),
        ("proc-dir", True, "cannot write into /proc"),
    ],
)
def test_check_writable_refuses_before_work(tmp_path, case, directory, needle):
    (tmp_path / "file").write_text("x")
    path = {
        "parent-is-file": tmp_path / "file" / "out.csv",
        "dir-where-file": tmp_path,
        "file-where-dir": tmp_path / "file",
        "proc": Path("/proc/attnscope-out.csv"),
        "proc-dir": Path("/proc/attnscope-figures"),
    }[case]
    before = files_under(tmp_path)
    with pytest.raises(StorageError, match=needle) as err:
        check_writable(path, "--out", directory=directory)
    assert str(err.value).startswith(f"--out {path}") and "\n" not in str(err.value)
    assert files_under(tmp_path) == before


def test_check_writable_accepts_missing_parents_and_creates_nothing(tmp_path):
    assert check_writable(tmp_path / "a" / "b" / "out.csv") == tmp_path / "a" / "b" / "out.csv"
    assert check_writable(tmp_path / "figs", "--plot", directory=True) == tmp_path / "figs"
    assert not list(tmp_path.iterdir())


def test_check_writable_read_only_mount(tmp_path):
    with tiny_filesystem(tmp_path / "ro", readonly=True) as ro:
        with pytest.raises(StorageError, match="(?i)read-only file system"):
            check_writable(ro / "sub" / "out.csv")


# ---------------------------------------------------------------------------- tables read back


@pytest.mark.parametrize("value, finite, ok", [("five", False, False), (np.inf, True, False), (np.nan, True, False),
                                               (np.nan, False, True), (3, True, True)])
def test_numeric_columns(value, finite, ok):
    df = pd.DataFrame({"a": [1.0, 2.0, 4.0], "b": [1, value, 2]})
    if ok:
        got = numeric_columns(df, ["a", "b"], "t", finite=finite)
        assert got.dtypes.tolist() == [np.float64, np.float64]
    else:
        with pytest.raises(FormatError, match=r"column 'b' holds .* in row 1"):
            numeric_columns(df, ["a", "b"], "t", finite=finite)


def test_read_mapping_of_a_binary_file_is_one_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"\x00\xff\xfe")
    with pytest.raises(Exception, match="cannot parse") as err:
        read_mapping(p)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------- no orphan workers

_DRIVER = """
import sys
from adversarial._helpers import sleepy
from attnscope.runs import Task, run_tasks
tasks = [Task(f"t{i}", {"x": i, "pids": sys.argv[2], "seconds": 120}) for i in range(4)]
run_tasks(sleepy, tasks, sys.argv[1], executor="local", workers=2, progress=False)
"""


_WARN_DRIVER = """
import sys
from adversarial._helpers import warns
from attnscope.runs import Task, run_tasks
run_tasks(warns, [Task(f"t{i}", {"x": i}) for i in range(2)], sys.argv[1], executor="local", workers=2, progress=False)
"""


def _driver_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ATTNSCOPE_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])
    return env


def test_warnings_in_pool_workers_are_one_line_each(tmp_path):
    res = subprocess.run([sys.executable, "-c", _WARN_DRIVER, str(tmp_path)], check=False, capture_output=True, text=True,
                         env=_driver_env(), timeout=300)
    assert res.returncode == 0, res.stderr
    lines = sorted(ln for ln in res.stderr.splitlines() if ln.strip())
    assert lines == ["attnscope: warning: task 0 is odd", "attnscope: warning: task 1 is odd"], res.stderr


@pytest.mark.slow
def test_killing_the_main_process_leaves_no_worker(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    main = subprocess.Popen([sys.executable, "-c", _DRIVER, str(tmp_path / "store"), str(pids)], env=_driver_env())
    try:
        deadline = time.monotonic() + 120
        while len(list(pids.iterdir())) < 2 and main.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = [int(p.name) for p in pids.iterdir()]
        assert len(workers) == 2 and main.poll() is None, "the pool never started its workers"
        main.send_signal(signal.SIGKILL)
        main.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        survivors = [w for w in workers if alive(w)]
        assert not survivors, f"orphan workers survived their parent: {survivors}"
    finally:
        if main.poll() is None:
            main.kill()
        for p in pids.iterdir():  # never leave anything running, even when the test fails
            try:
                os.kill(int(p.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    # the store is free again and holds no partial file
    store = ResultsStore(tmp_path / "store")
    assert not files_under(store.tasks_dir) and no_temporaries(tmp_path / "store")
    with store.lock():  # the dead run's lock is gone: a resumed run may start
        pass


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the worker pids")
def test_sigterm_to_a_local_grid_ends_its_workers_in_one_line(tmp_path):
    """SIGTERM (scancel, timeout) used to end the main process at once: exit -15, Python's two-line
    'leaked semaphore' warning, workers left to the parent-death watch. Now the Ctrl-C cleanup runs."""
    out = tmp_path / "g"
    cmd = [sys.executable, "-m", "attnscope", "train", "--seeds", "0,1", "--executor", "local", "--workers", "2",
           "--steps", "100000", "--n-layers", "1", "--n-heads", "2", "--d-model", "16", "--d-ff", "32",
           "--seq-len", "16", "--batch-size", "2", "--eval-windows", "2", "--out", str(out)]
    main = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_driver_env())
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while main.poll() is None and time.monotonic() < deadline:
            if len(list(out.glob("*/metrics.jsonl"))) == 2:  # both runs are training
                break
            time.sleep(0.2)
        workers = [w for w in _children(main.pid) if "spawn_main" in Path(f"/proc/{w}/cmdline").read_text()]
        assert main.poll() is None and len(workers) == 2, "the grid never started both runs"
        main.send_signal(signal.SIGTERM)
        _, err = main.communicate(timeout=60)
    finally:
        if main.poll() is None:
            main.kill()
        for w in workers:
            try:
                os.kill(w, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert main.returncode == 143, err
    assert [ln for ln in err.splitlines() if ln.strip()][-1:] == ["attnscope: terminated"], err
    assert "semaphore" not in err and "Traceback" not in err, err
    assert not any(alive(w) for w in workers)
