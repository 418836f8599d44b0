"""Results store and executors: atomic per-task files, resume, corrupt-file recovery, failures."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from attnscope.errors import InputError
from attnscope.runs import ResultsStore, Task, run_tasks
from attnscope.runs.store import key_to_name, name_to_key

sys.path.insert(0, str(Path(__file__).parent))
from _tasks import nap, square  # noqa: E402


def _tasks(n, fail=()):
    return [Task(f"org/model-{i}", {"x": i, "fail": i in fail}) for i in range(n)]


@pytest.mark.parametrize("key", ["a/b", "beta_o=1.25,gamma=220", "x y", "%weird%", "../../etc"])
def test_key_roundtrip_and_safe(key):
    name = key_to_name(key)
    assert "/" not in name and name_to_key(name) == key


def test_inline_run_then_resume_skips(tmp_path):
    store = ResultsStore(tmp_path)
    s1 = run_tasks(square, _tasks(4), store, executor="inline", progress=False)
    assert sorted(s1.done) == sorted(t.key for t in _tasks(4)) and not s1.failed
    merged = store.merge([t.key for t in _tasks(4)])
    assert merged["y"].tolist() == [0, 1, 4, 9]
    s2 = run_tasks(square, _tasks(5), store, executor="inline", progress=False)
    assert s2.done == ["org/model-4"] and len(s2.skipped) == 4


def test_failure_is_recorded_and_others_finish(tmp_path):
    store = ResultsStore(tmp_path)
    s = run_tasks(square, _tasks(3, fail={1}), store, executor="inline", progress=False)
    assert set(s.done) == {"org/model-0", "org/model-2"}
    assert "bad value 1" in s.failed["org/model-1"]
    assert "bad value 1" in store.failures()["org/model-1"]
    # fixed on rerun: failure record cleared
    s = run_tasks(square, _tasks(3), store, executor="inline", progress=False)
    assert s.done == ["org/model-1"] and store.failures() == {}


def test_corrupt_file_is_quarantined_and_recomputed(tmp_path):
    store = ResultsStore(tmp_path)
    run_tasks(square, _tasks(2), store, executor="inline", progress=False)
    p = store.path("org/model-1")
    p.write_bytes(p.read_bytes()[:10])  # a killed writer (without our atomic rename) would leave this
    with pytest.warns(UserWarning, match="unreadable"):
        s = run_tasks(square, _tasks(2), store, executor="inline", progress=False)
    assert s.done == ["org/model-1"]
    assert store.read("org/model-1")["y"].tolist() == [1]
    assert any((tmp_path / "set-aside").iterdir())


def test_local_pool(tmp_path):
    store = ResultsStore(tmp_path)
    s = run_tasks(square, _tasks(4, fail={3}), store, executor="local", workers=2, progress=False)
    assert len(s.done) == 3 and list(s.failed) == ["org/model-3"]
    assert sorted(store.merge()["y"].tolist()) == [0, 1, 4]


def test_bad_executor_and_duplicate_keys(tmp_path):
    with pytest.raises(InputError, match="unknown executor"):
        run_tasks(square, _tasks(1), tmp_path, executor="mpi", progress=False)
    with pytest.raises(InputError, match="unique"):
        run_tasks(square, [Task("a", {"x": 1}), Task("a", {"x": 2})], tmp_path, progress=False)


def test_no_temp_files_left(tmp_path):
    store = ResultsStore(tmp_path)
    run_tasks(square, _tasks(3), store, executor="inline", progress=False)
    assert not [p for p in store.tasks_dir.iterdir() if p.name.startswith(".")]
    assert isinstance(store.merge(), pd.DataFrame)


@pytest.mark.slurm
def test_slurm_array(tmp_path, slurm_cluster):
    import _tasks as task_module
    import cloudpickle

    cloudpickle.register_pickle_by_value(task_module)  # the Slurm job's python does not see tests/ on its path
    store = ResultsStore(tmp_path / "store")
    s = run_tasks(
        square, _tasks(3, fail={2}), store, executor="slurm",
        slurm={"partition": slurm_cluster["partition"], "time_min": 5}, progress=False,
    )
    assert sorted(s.done) == ["org/model-0", "org/model-1"] and list(s.failed) == ["org/model-2"]
    assert sorted(store.merge()["y"].tolist()) == [0, 1]


def test_ctrl_c_in_the_main_process_ends_the_running_workers(tmp_path):
    """A KeyboardInterrupt (or a full disk) in the main process must not leave it waiting at exit for pool
    workers that go on with their tasks: they are ended, and a rerun resumes.

    The interrupt is sent once both workers are inside their task (each nap writes a file as it starts), not
    after a fixed delay: on a loaded machine the workers' start can take longer than any delay. It is a real
    SIGINT sent to the main thread (it wakes the wait there, whichever threads other tests left running).
    """
    import multiprocessing as mp
    import signal
    import threading
    import time

    before = set(mp.active_children())  # processes other tests of this worker may still be ending
    started = tmp_path / "started"
    started.mkdir()
    tasks = [Task(f"nap{i}", {"x": i, "s": 120, "started": str(started)}) for i in range(2)]
    main, stop, sent = threading.main_thread().ident, threading.Event(), threading.Event()

    def interrupt_when_both_run() -> None:
        deadline = time.monotonic() + 90
        while not stop.is_set() and time.monotonic() < deadline:
            if len(list(started.iterdir())) == 2:
                sent.set()
                signal.pthread_kill(main, signal.SIGINT)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=interrupt_when_both_run, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            summary = run_tasks(nap, tasks, tmp_path / "store", executor="local", workers=2, progress=False)
            pytest.fail(f"the run ended before the interrupt (sent: {sent.is_set()}): {summary}")
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert sent.is_set()
    assert [p for p in mp.active_children() if p.is_alive() and p not in before] == []
    assert not ResultsStore(tmp_path / "store").is_done("nap0")


def test_slurm_refusing_the_job_is_one_line(tmp_path, monkeypatch, capfd):
    """sbatch installed but the job refused (no controller, a bad partition): one InputError line with sbatch's
    reason, not submitit's FailedJobError plus sbatch's own copy of the line on stderr."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Unable to contact slurm "
                    "controller (connect failure)' >&2\nexit 1\n")
    fake.chmod(0o755)
    srun = bin_dir / "srun"  # submitit looks for srun before it calls sbatch; never called here
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(InputError, match="^Slurm did not accept the job: Batch job submission failed: Unable to "
                                         "contact slurm controller"):
        run_tasks(square, _tasks(2), tmp_path / "store", executor="slurm", progress=False)
    assert "sbatch: error" not in capfd.readouterr().err
    assert not ResultsStore(tmp_path / "store").is_done("org/model-0")


@pytest.mark.parametrize("present", [(), ("sbatch",), ("srun",)])
def test_slurm_executor_without_slurm_is_one_line(tmp_path, monkeypatch, present):
    """A machine without Slurm (or with half of it): one line naming what is missing, nothing submitted."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for cmd in present:
        (bin_dir / cmd).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / cmd).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # nothing else: no real sbatch/srun either
    missing = [c for c in ("sbatch", "srun") if c not in present]
    with pytest.raises(InputError, match="^the slurm executor needs Slurm: " + " and ".join(f"'{c}'" for c in missing)):
        run_tasks(square, _tasks(1), tmp_path / "store", executor="slurm", progress=False)
    assert not ResultsStore(tmp_path / "store").is_done("org/model-0")
