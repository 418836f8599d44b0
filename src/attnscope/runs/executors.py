"""Executors: run a list of tasks into a :class:`ResultsStore`, in-process, on a local process pool,
or as a Slurm job array through submitit.

``fn(payload) -> DataFrame`` must be a top-level function (picklable). Every task writes its own file
in the store as soon as it finishes, so an interrupted run loses at most the tasks in flight; a rerun
skips what is done. A task that raises is recorded (one line) and does not stop the others.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from attnscope.errors import AttnscopeError, InputError

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


def _run_and_store(fn: Callable[[Any], Any], task: Task, root: str) -> tuple[str, str | None]:
    """Run one task and write its result; returns (key, error or None). Runs in workers too."""
    store = ResultsStore(root)
    try:
        df = fn(task.payload)
        store.write(task.key, df)
        return task.key, None
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
    store = store if isinstance(store, ResultsStore) else ResultsStore(store)
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
    root = str(store.root)

    def record(key: str, err: str | None) -> None:
        if err is None:
            summary.done.append(key)
        else:
            summary.failed[key] = err

    from attnscope.progress import progress as progress_bar

    with progress_bar(len(todo), desc, enabled=progress, unit="tasks", transient=False) as bar:
        advance = bar.advance
        if executor == "inline" or (executor == "local" and (workers <= 1 or len(todo) == 1)):
            for t in todo:
                record(*_run_and_store(fn, t, root))
                advance()
        elif executor == "local":
            _run_local(fn, todo, root, workers, record, advance)
        else:
            _run_slurm(fn, todo, store, slurm or {}, record, advance)
    return summary


def _run_local(fn, todo, root, workers, record, advance) -> None:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: safe with torch/numba threads; fn must be importable top-level
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(_run_and_store, fn, t, root): t for t in todo}
        try:
            for fut in as_completed(futures):
                t = futures[fut]
                try:
                    record(*fut.result())
                except Exception as exc:  # worker died (e.g. OOM kill)
                    msg = f"worker failed: {_one_line(exc)}"
                    ResultsStore(root).record_failure(t.key, msg)
                    record(t.key, msg)
                advance()
        except KeyboardInterrupt:
            for f in futures:
                f.cancel()
            raise


def _run_slurm(fn, todo, store: ResultsStore, opts: dict[str, Any], record, advance) -> None:
    """One Slurm array task per task via submitit; results land in the same store."""
    import shutil

    try:
        import submitit
    except ImportError as exc:  # pragma: no cover - submitit is a dependency
        raise InputError("the slurm executor needs submitit (pip install submitit)") from exc
    if shutil.which("sbatch") is None:
        raise InputError("the slurm executor needs Slurm: 'sbatch' was not found on PATH")
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
    ex.update_parameters(**params)
    root = str(store.root)
    jobs = ex.map_array(_run_and_store, [fn] * len(todo), todo, [root] * len(todo))
    for t, job in zip(todo, jobs):
        try:
            record(*job.result())
        except Exception as exc:  # the Slurm job itself failed
            msg = f"slurm job {job.job_id} failed: {_one_line(exc)}"
            store.record_failure(t.key, msg)
            record(t.key, msg)
        advance()
