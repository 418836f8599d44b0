"""Layer passes in forked worker processes: every worker one CPU thread, the model and its clean pass shared.

On a CPU, two processes of one thread each get through the layer passes faster than one process of two
threads (no thread team waits at each operation's end, and the serial parts, Python and the small
operations, run side by side): SmolLM2-135M's layers 14-17, 16.5 s per layer against 19.1 s, 1.15x
(``benchmarks/interventions.py --workers 2``, docs/benchmarks/atlas.md).
:func:`run_layers` forks its workers *after* the clean pass, so each child starts with the patched model,
the clean pass's outputs and the windows in memory (copy-on-write: nothing is loaded or computed twice);
each child sets one thread before any operation (the pattern PyTorch's own data-loader workers rely on,
as an OpenMP team does not survive a fork), runs its share of the layers, and reports each one as it
is done (its result written by ``work`` itself, e.g. into the resumable store) and, a few times a second,
how far its layer is (:func:`report`); the parent only shows progress and waits. A child's exception
reaches the parent and is raised there as it was; a child that dies (killed, out of memory) is a
:class:`WorkerLost`: one line naming the signal and the layers it left undone, and how to go on (the
layers finished are in the store).

:func:`worker_count` chooses the workers: as many as the CPU threads of this process, from 2 up to
:data:`MAX_WORKERS`, on Linux (where ``fork`` is the platform's own way) with the model on the CPU;
else one, and the layers run here in order.
"""

from __future__ import annotations

import functools
import os
import pickle
import select
import signal
import struct
import sys
import warnings
from typing import Any, Callable, Sequence

from attnscope.errors import AttnscopeError

#: most worker processes (each holds a copy batch's activations: ~1.2 GB for SmolLM2-135M)
MAX_WORKERS = 4
#: a worker tells the parent how far its layer is at most this often (seconds)
REPORT_EVERY_S = 0.5

#: where :func:`report` sends the running task's progress (set by :func:`run_layers` around each task)
_reporter: Callable[[float], None] | None = None


def report(fraction: float) -> None:
    """Inside ``work``: how far the task it was given is (0 to 1), shown in the parent's progress while the
    task runs, here or in a worker. Does nothing outside :func:`run_layers`."""
    if _reporter is not None:
        _reporter(fraction)


def _throttled(send: Callable[[float], None]) -> Callable[[float], None]:
    """``send`` at most every :data:`REPORT_EVERY_S` seconds (the pipe carries a few messages a second)."""
    import time

    last = [0.0]

    def call(fraction: float) -> None:
        now = time.monotonic()
        if now - last[0] >= REPORT_EVERY_S:
            last[0] = now
            send(fraction)
    return call


def can_fork(device: Any = "cpu") -> bool:
    """Whether layer passes on ``device`` may run in forked workers: Linux, and the model on the CPU."""
    return str(device) == "cpu" and sys.platform.startswith("linux") and hasattr(os, "fork")


def worker_count(threads: int, tasks: int, device: Any = "cpu") -> int:
    """How many forked workers :func:`run_layers` should use (1: none, the layers run in this process)."""
    if not can_fork(device):
        return 1
    if threads < 2 or threads > MAX_WORKERS or tasks < 2:
        return 1
    return min(threads, tasks)


def balance(tasks: Sequence[int], workers: int, cost: Callable[[int], float]) -> list[list[int]]:
    """Tasks split into ``workers`` groups of near-equal total cost (the costliest first, each to the group
    with the least so far); every group in ascending order."""
    groups: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for task in sorted(tasks, key=cost, reverse=True):
        k = load.index(min(load))
        groups[k].append(task)
        load[k] += cost(task)
    return [sorted(g) for g in groups if g]


def _send(fd: int, message: tuple) -> None:
    try:
        data = pickle.dumps(message)
    except Exception:  # an exception that does not pickle: its type and text
        kind, task, exc = message
        data = pickle.dumps((kind, task, RuntimeError(f"{type(exc).__name__}: {exc}")))
    data = struct.pack("<Q", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd: int, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def _receive(fd: int) -> tuple | None:
    """One message of a child (None at its end). Only this process's own forked children write here."""
    head = _read_exactly(fd, 8)
    if head is None:
        return None
    body = _read_exactly(fd, struct.unpack("<Q", head)[0])
    return None if body is None else pickle.loads(body)  # noqa: S301 - our own child's message, not a file


def _die_with_parent(parent: int) -> None:
    """Linux: this child gets SIGTERM when the parent ends in any way (killed too, where no ``finally`` runs)."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass
    if os.getppid() != parent:  # the parent was gone before the line above
        os._exit(1)


def _tell(fd: int, task: int, fraction: float) -> None:
    _send(fd, ("tick", task, fraction))


def _child(fd: int, group: list[int], work: Callable[[int], None], parent: int) -> None:
    """The forked worker: one thread, its layers in order, a message per layer (and, as :func:`report` is
    called, a few a second on how far it is); never returns."""
    global _reporter
    code, task = 0, None
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: the parent reports it, the children just end
        _die_with_parent(parent)
        import torch

        torch.set_num_threads(1)
        for task in group:
            _reporter = _throttled(functools.partial(_tell, fd, task))
            work(task)
            _send(fd, ("done", task, None))
    except BaseException as exc:  # noqa: BLE001 - everything goes to the parent, which raises it
        code = 1
        try:
            _send(fd, ("error", task, exc))
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


def run_layers(tasks: Sequence[int], work: Callable[[int], None], workers: int,
               on_done: Callable[[int], None] = lambda _t: None,
               cost: Callable[[int], float] = lambda _t: 1.0,
               on_report: Callable[[int, float], None] = lambda _t, _f: None) -> None:
    """``work(task)`` for every task (a layer), in ``workers`` forked processes of one thread each (or here,
    in order, when ``workers`` <= 1); ``on_done(task)`` in this process as each one finishes, and
    ``on_report(task, fraction)`` as ``work`` calls :func:`report`. ``work`` keeps its own result (the
    children's memory is gone when they end). Raises the first child's exception."""
    global _reporter
    tasks = list(tasks)
    if workers <= 1 or len(tasks) < 2:
        for task in tasks:
            _reporter = functools.partial(on_report, task)
            try:
                work(task)
            finally:
                _reporter = None
            on_done(task)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[int, tuple[int, list[int]]] = {}  # read end -> (pid, its tasks)
    try:
        parent = os.getpid()
        for group in balance(tasks, workers, cost):
            read, write = os.pipe()
            with warnings.catch_warnings():  # Python 3.12+ warns on forking a process with threads (OpenMP's)
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                os.close(read)
                _child(write, group, work, parent)
            os.close(write)
            children[read] = (pid, group)
        _wait(children, on_done, on_report)
    finally:
        for read, (pid, _group) in children.items():
            _end(pid)
            try:
                os.close(read)
            except OSError:
                pass


def _wait(children: dict[int, tuple[int, list[int]]], on_done: Callable[[int], None],
          on_report: Callable[[int, float], None] = lambda _t, _f: None) -> None:
    """Messages from every child until all have ended; a child's error is raised at once (the caller's
    ``finally`` stops the others), as is a child that ended with layers undone."""
    open_fds = set(children)
    left = {read: list(group) for read, (_pid, group) in children.items()}
    while open_fds:
        ready, _, _ = select.select(sorted(open_fds), [], [])
        for fd in ready:
            message = _receive(fd)
            if message is not None:
                kind, task, payload = message  # payload: the error raised, or how far the task is
                if kind == "error":
                    raise payload
                if kind == "tick":
                    on_report(task, payload)
                    continue
                left[fd].remove(task)
                on_done(task)
                continue
            open_fds.discard(fd)
            pid = children[fd][0]
            _, status = os.waitpid(pid, 0)
            children[fd] = (-1, [])  # reaped
            if left[fd]:
                raise WorkerLost(lost_message(status, left[fd]))


class WorkerLost(AttnscopeError, RuntimeError):
    """A worker process ended before its layers were done: killed (SIGKILL: the out-of-memory killer or
    ``kill -9``) or gone. Not a bug and not the input: one line that says what happened and how to go on."""


def lost_message(status: int, left: Sequence[int]) -> str:
    """What :class:`WorkerLost` says for a child's wait ``status`` with the layers ``left`` undone."""
    layers = f"layer{'s' if len(left) > 1 else ''} {', '.join(map(str, left))}"
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        how = (f"was killed by {sig} (the out-of-memory killer or kill -9)" if sig == "SIGKILL"
               else f"was stopped by {sig}")
    else:
        how = f"ended with exit status {os.WEXITSTATUS(status)}"
    return (f"an interventions worker {how} before {layers}; the layers finished are kept in the store "
            "(attnscope atlas: DIR/interventions-store): run the same command again to go on, with fewer "
            "--threads (fewer workers, less memory) if memory ran out")


def _end(pid: int) -> None:
    """Stop a child that is still running (the parent is leaving early: an error, Ctrl-C) and reap it."""
    if pid <= 0:
        return
    try:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
