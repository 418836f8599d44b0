"""Executors: run a list of tasks into a :class:`ResultsStore`, in-process, on a local process pool,
or as a Slurm job array through submitit.

``fn(payload) -> DataFrame`` must be a top-level function (picklable). Every task writes its own file
in the store as soon as it finishes, so an interrupted run loses at most the tasks in flight; a rerun
skips what is done. A task that raises is recorded (one line) and does not stop the others; a
write that fails for lack of space (:class:`StorageError`) stops the run, since every other task
would fail the same way.

One run fills a store at a time (its lock). Pool workers die with the process that started them
(``PR_SET_PDEATHSIG`` on Linux, plus a thread polling the parent pid everywhere), so killing only
the main process leaves no orphan computing and writing into a store that a resumed run now owns.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnscope.errors import (
    AttnscopeError,
    InputError,
    StorageError,
    install_one_line_warnings,
)
from attnscope.progress import progress as progress_bar

from .store import ResultsStore

EXECUTORS = ("inline", "local", "slurm")


@dataclass(frozen=True)
class Task:
    """One unit of work: a unique key (also its file name in the store) and a picklable payload."""

    key: str
    payload: Any


@dataclass
class RunSummary:
    done: list[str] = field(default_factory=list)  # computed in this run
    skipped: list[str] = field(default_factory=list)  # already in the store
    failed: dict[str, str] = field(default_factory=dict)  # key -> one-line error

    @property
    def ok(self) -> bool:
        return not self.failed


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, AttnscopeError):
        return str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return last.splitlines()[0]


def _run_and_store(fn: Callable[[Any], Any], task: Task, store: ResultsStore) -> tuple[str, str | None]:
    """Run one task and write its result; returns (key, error or None). Runs in workers too."""
    try:
        df = fn(task.payload)
        store.write(task.key, df)
        return task.key, None
    except StorageError:  # a full disk: every task would fail the same way
        raise
    except Exception as exc:  # reported per task, never fatal to the run
        msg = _one_line(exc)
        store.record_failure(task.key, msg)
        return task.key, msg


def run_tasks(
    fn: Callable[[Any], Any],
    tasks: Sequence[Task],
    store: ResultsStore | str | os.PathLike,
    *,
    executor: str = "local",
    workers: int = 2,
    slurm: dict[str, Any] | None = None,
    progress: bool = True,
    desc: str = "tasks",
) -> RunSummary:
    """Run the tasks that are not yet in ``store`` with the chosen executor."""
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"workers must be a positive integer, not {workers!r}", params="workers")
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
    with store.lock():
        return _run_locked(fn, tasks, store, executor, workers, slurm, progress, desc)


def _run_locked(fn, tasks, store: ResultsStore, executor, workers, slurm, progress, desc) -> RunSummary:
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise InputError("task keys must be unique")
    summary = RunSummary()
    todo: list[Task] = []
    for t in tasks:
        if store.is_done(t.key):
            summary.skipped.append(t.key)
        else:
            todo.append(t)
    if not todo:
        return summary

    def record(key: str, err: str | None) -> None:
        if err is None:
            summary.done.append(key)
        else:
            summary.failed[key] = err

    with progress_bar(len(todo), desc, enabled=progress, unit="tasks", transient=False) as bar:
        advance = bar.advance
        if executor == "inline" or (executor == "local" and (workers <= 1 or len(todo) == 1)):
            for t in todo:
                record(*_run_and_store(fn, t, store))
                advance()
        elif executor == "local":
            _run_local(fn, todo, store, workers, record, advance)
        else:
            _run_slurm(fn, todo, store, slurm or {}, record, advance)
    return summary


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_POLL_S = 0.5


def _die_with_parent(parent: int) -> None:
    """Pool-worker initializer: end this worker as soon as ``parent`` (the run's main process) is gone.

    On Linux the kernel sends SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG); everywhere, a
    daemon thread also polls the parent pid and exits the worker when it changes (re-parenting).
    Warnings raised in the worker print as one line, like the main process's.
    """
    install_one_line_warnings()
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the poll below still works
            pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def poll() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=poll, name="attnscope-parent-watch", daemon=True).start()


def _executable() -> str:
    """The interpreter multiprocessing's spawn starts each worker with."""
    import multiprocessing.spawn

    return os.fsdecode(multiprocessing.spawn.get_executable())


def _check_pool_can_start() -> None:
    """One line naming the cause, before any worker is started, when this user cannot start the interpreter that
    spawns the pool's workers (missing, not executable: e.g. another user's virtual environment)."""
    import subprocess

    exe = _executable()
    if not os.path.isfile(exe):
        why = "does not exist"
    elif not os.access(exe, os.X_OK):
        why = "cannot be executed by this user (permission denied)"
    else:
        try:  # what each worker does first (a few tens of milliseconds)
            done = subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"cannot be started ({type(exc).__name__}: {str(exc)[:80]})"
        else:
            if done.returncode == 0:
                return
            said = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1][:100]
            why = f"exits with status {done.returncode} at start" + (f" ({said})" if said else "")
    raise InputError(f"the local worker pool cannot start: its interpreter {exe} {why}; run with executor='inline' "
                     "(or workers=1) to work in this process", params=("executor", "workers"))


def _broken_pool(exc: BaseException) -> InputError:
    return InputError(f"the local worker pool broke before any task finished ({_one_line(exc)[:120]}): its workers "
                      f"({_executable()}) could not start or were killed at once; run with executor='inline' (or "
                      "workers=1) to work in this process", params=("executor", "workers"))


def _run_local(fn, todo, store: ResultsStore, workers, record, advance) -> None:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    # spawn: safe with torch/numba threads; fn must be importable top-level
    ctx = mp.get_context("spawn")
    _check_pool_can_start()
    before = set(mp.active_children())
    finished = 0
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with_parent,
                               initargs=(os.getpid(),))
    try:
        try:
            futures = {pool.submit(_run_and_store, fn, t, store): t for t in todo}
        except BrokenProcessPool as exc:
            raise _broken_pool(exc) from None
        for fut in as_completed(futures):
            t = futures[fut]
            try:
                record(*fut.result())
                finished += 1
            except StorageError:
                raise
            except Exception as exc:  # worker died (e.g. OOM kill)
                if isinstance(exc, BrokenProcessPool) and not finished:  # no worker ever finished a task
                    raise _broken_pool(exc) from None
                msg = f"worker failed: {_one_line(exc)}"
                store.record_failure(t.key, msg)
                record(t.key, msg)
            advance()
    except BaseException:  # Ctrl-C, a full disk: stop queued tasks and end the running ones now
        # else the interpreter's exit waits for them to finish their tasks. The workers are taken from
        # multiprocessing's own list, which also holds one whose start the interrupt cut short before the pool
        # recorded it. They are killed first, then the pool is shut down with wait: its manager thread sees
        # them gone, reaps them and ends, so no other thread is left reaping them while this one checks them
        # (two threads waiting on one pid make multiprocessing report a dead worker as alive).
        workers_now = [proc for proc in mp.active_children() if proc not in before]
        for proc in workers_now:
            proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        for proc in workers_now:
            proc.join(timeout=10)
        raise
    pool.shutdown(wait=True)


class _NoSacctWarnings(logging.Filter):
    """Clusters without accounting make submitit warn on every status poll ('Bypassing sacct error'); it then
    reads the job's state from squeue and its result file, so those lines say nothing to a user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Bypassing sacct error" not in record.getMessage()


_NO_SACCT = _NoSacctWarnings()


def _submit_array(ex, fn, todo, store: ResultsStore) -> list:
    """Submit one array job; sbatch refusing it (no controller, a bad partition) is one line, exit 2.

    submitit prints sbatch's stderr itself before raising; that copy is swallowed, the line goes in the error.
    """
    import contextlib
    import io

    from submitit.core.utils import FailedJobError

    sbatch_said = io.StringIO()
    try:
        with contextlib.redirect_stderr(sbatch_said):
            return ex.map_array(_run_and_store, [fn] * len(todo), todo, [store] * len(todo))
    except FailedJobError as exc:
        said = (str(exc) or sbatch_said.getvalue()).strip().splitlines()
        why = said[-1].removeprefix("sbatch: error: ") if said else "sbatch failed"
        raise InputError(f"Slurm did not accept the job: {why}") from None


def check_slurm(timeout_s: float = 15.0) -> None:
    """Before any work that ends in Slurm jobs: ``sbatch`` and ``srun`` on PATH and the controller answering
    ``sinfo`` (else one line, the cause named: a command that submits only after minutes of its own work would
    otherwise fail then)."""
    import shutil
    import subprocess

    missing = [cmd for cmd in ("sbatch", "srun", "sinfo") if shutil.which(cmd) is None]
    if missing:
        raise InputError(f"the slurm executor needs Slurm: {' and '.join(repr(c) for c in missing)} not found on PATH")
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise InputError(f"the slurm executor: the Slurm controller did not answer sinfo within {timeout_s:g} s") from None
    if r.returncode != 0:
        said = (r.stderr.strip().splitlines() or ["sinfo failed"])[-1].removeprefix("sinfo: error: ")
        raise InputError(f"the slurm executor: Slurm is not reachable ({said[:200]})")


def _run_slurm(fn, todo, store: ResultsStore, opts: dict[str, Any], record, advance) -> None:
    """One Slurm array task per task via submitit; results land in the same store."""
    import shutil

    import submitit
    logging.getLogger("submitit").addFilter(_NO_SACCT)  # adding the same filter twice is a no-op
    missing = [cmd for cmd in ("sbatch", "srun") if shutil.which(cmd) is None]  # submitit runs both
    if missing:
        raise InputError(f"the slurm executor needs Slurm: {' and '.join(repr(c) for c in missing)} not found on PATH")
    folder = Path(opts.get("folder") or (store.root / "slurm"))
    ex = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    params: dict[str, Any] = {
        "timeout_min": int(opts.get("time_min", 60)),
        "cpus_per_task": int(opts.get("cpus_per_task", 1)),
        "slurm_array_parallelism": int(opts.get("array_parallelism", 256)),
    }
    if opts.get("partition"):
        params["slurm_partition"] = opts["partition"]
    if opts.get("mem_gb"):
        params["mem_gb"] = float(opts["mem_gb"])
    if opts.get("gpus"):  # per array task (one training run on one GPU, typically)
        params["gpus_per_node"] = int(opts["gpus"])
    ex.update_parameters(**params)
    jobs = _submit_array(ex, fn, todo, store)
    for t, job in zip(todo, jobs):
        try:
            record(*job.result())
        except Exception as exc:  # the Slurm job itself failed
            msg = f"slurm job {job.job_id} failed: {_one_line(exc)}"
            store.record_failure(t.key, msg)
            record(t.key, msg)
        advance()
