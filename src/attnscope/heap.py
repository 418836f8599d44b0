"""Host memory between batches: handing the heap's freed pages back to the operating system.

A CPU forward pass allocates and frees many tensors of a few MB from several threads. glibc's
allocator keeps what was freed in per-thread arenas rather than returning it, and the pieces rarely
fit the next window's tensors, so the resident size of a long run of forward passes drifts upwards
by chance: on SmolLM2-135M the same atlas peaked anywhere between 1.4 and 2.9 GB from run to run.
:func:`release_free_memory` (``malloc_trim(0)``, which releases every whole free page of every arena)
after each batch keeps it at 1.3 GB in every run, at no measurable cost (docs/benchmarks/atlas.md).

Only glibc has ``malloc_trim``; elsewhere (macOS, musl, Windows) this is a no-op.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        fn = ctypes.CDLL(None).malloc_trim  # the symbols the process already has: libc among them
    except (OSError, TypeError, AttributeError):  # Windows has no CDLL(None); macOS / musl no malloc_trim
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS (glibc); True when the C library could be asked."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
