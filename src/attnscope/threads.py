"""How many CPU threads attnscope computes with: one rule and one place to set it (torch, BLAS, numba).

Every command that computes takes ``--threads N``; ``ATTNSCOPE_THREADS=N`` sets the same for every
command and for Python; in Python, :func:`set_threads` (or the :func:`threads` context manager) is the
one call. It sets torch's intra-op threads, the BLAS / OpenMP pools numpy and scipy use (through
threadpoolctl) and numba's threads (the dynamics kernels).

Which number, in this order:

1. ``n`` given to :func:`set_threads` (``--threads N``);
2. a number set earlier in this process by :func:`set_threads` (so a library call that asks for the
   default, e.g. the trainer, keeps what the user chose);
3. ``ATTNSCOPE_THREADS`` (a whole number; ``auto`` or empty: the rules below);
4. ``OMP_NUM_THREADS``, when set (the variable torch and BLAS read themselves);
5. the default rule: the CPUs this process may run on (``os.sched_getaffinity``) minus the 1-minute
   load average of the machine (``os.getloadavg``, rounded), at least 1 and at most those CPUs. On a
   quiet 16-core machine that is 16; with 12 other busy processes it is 4; on a fully loaded one, 1
   (where more threads than free cores make torch many times slower: docs/benchmarks.md, "Threads").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import InputError

__all__ = ["ENV", "MAX_THREADS", "available_cpus", "default_threads", "get_threads", "resolve_threads", "set_threads", "threads"]

#: the environment variable read when no number is given
ENV = "ATTNSCOPE_THREADS"

#: the most threads any source may ask for (or the machine's CPUs, where more): OpenMP sizes its pool by
#: the number before it checks anything (10^9 threads ask libgomp for 216 GB and abort the process)
MAX_THREADS = max(1024, os.cpu_count() or 1)

_chosen: list[int] = []  # the number set by set_threads in this process (at most one entry)
_blas_limit: list[Any] = []  # the threadpoolctl limiter in force (kept so that a later call can replace it)


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; all CPUs where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """The default rule: available CPUs minus the 1-minute load average (rounded), clamped to [1, CPUs]."""
    cpus = available_cpus()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows: no load average
        load = 0.0
    return max(1, min(cpus, cpus - int(round(load))))


def _check(n: Any, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise InputError(f"{what} must be a whole number of threads, not {n!r}", params="threads")
    if n < 1:
        raise InputError(f"{what} must be at least 1, not {n}", params="threads")
    if n > MAX_THREADS:
        raise InputError(f"{what} must be at most {MAX_THREADS} (this machine has {available_cpus()} CPUs), not {n}",
                         params="threads")
    return n


def resolve_threads(n: int | None = None) -> int:
    """The number of threads :func:`set_threads` would use for ``n`` (see the module doc for the order)."""
    if n is not None:
        return _check(n, "threads")
    if _chosen:
        return _chosen[0]
    for var in (ENV, "OMP_NUM_THREADS"):
        text = os.environ.get(var, "").strip()
        if var == "OMP_NUM_THREADS":  # OpenMP's nested form "4,2": the outer level is the number that computes
            text = text.split(",")[0].strip()
        if text.lower() in ("", "auto", "default"):
            continue
        try:
            value = int(text)
        except ValueError:
            raise InputError(f"{var}={text!r} is not a whole number of threads (or 'auto')") from None
        return _check(value, var)
    return default_threads()


def get_threads() -> int:
    """The number of threads torch computes with now (what it will start with where not imported yet)."""
    if "torch" in sys.modules:
        return sys.modules["torch"].get_num_threads()
    return resolve_threads()


def set_threads(n: int | None = None) -> int:
    """Compute with ``n`` CPU threads (None: ``ATTNSCOPE_THREADS`` or the default rule); returns the number.

    Sets torch's intra-op threads, the BLAS/OpenMP pools (threadpoolctl) and numba's threads; torch and
    numba not imported yet start with that many (``OMP_NUM_THREADS``; ``NUMBA_NUM_THREADS`` unless the
    user set it), and so do worker processes started later. numba sizes its pool when it is imported:
    a larger number set after that is capped at the pool's size.
    """
    count = resolve_threads(n)
    if n is not None:
        _chosen[:] = [count]
    _apply(count)
    return count


def _apply(count: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(count)  # torch and OpenMP read it when loaded; worker processes inherit it
    if "torch" in sys.modules:
        import torch

        if torch.get_num_threads() != count:
            torch.set_num_threads(count)
    try:
        import numpy  # noqa: F401  (its BLAS must be loaded for threadpoolctl to find it)
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - both are dependencies
        pass
    else:
        if _blas_limit:
            _blas_limit.pop().restore_original_limits()
        _blas_limit.append(threadpool_limits(limits=count))
    if "numba" in sys.modules:
        import numba

        numba.set_num_threads(max(1, min(count, numba.config.NUMBA_NUM_THREADS)))
    elif "NUMBA_NUM_THREADS" not in os.environ or _numba_env:  # numba reads it when it is imported
        os.environ["NUMBA_NUM_THREADS"] = str(count)
        _numba_env[:] = [count]


_numba_env: list[int] = []  # set when NUMBA_NUM_THREADS is ours (not the user's)


@contextmanager
def threads(n: int | None = None) -> Iterator[int]:
    """``with threads(4): ...``: compute with ``n`` threads inside the block, then with what was set before."""
    before_chosen, before = list(_chosen), get_threads()
    had_limit = bool(_blas_limit)
    count = set_threads(n)
    try:
        yield count
    finally:
        _chosen[:] = before_chosen
        if had_limit:
            _apply(before)
        else:  # nothing was limited before: torch back to its number, BLAS back to its own defaults
            if "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(before)
            if _blas_limit:
                _blas_limit.pop().restore_original_limits()
