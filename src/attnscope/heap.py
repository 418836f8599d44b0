"""Host memory between batches: handing the heap's freed pages back to the operating system.

A CPU forward pass allocates and frees many tensors of a few MB from several threads. glibc's
allocator keeps what was freed in per-thread arenas rather than returning it, and the pieces rarely
fit the next window's tensors, so the resident size of a long run of forward passes drifts upwards
by chance: on SmolLM2-135M the same atlas peaked anywhere between 1.4 and 2.9 GB from run to run.
:func:`release_free_memory` (``malloc_trim(0)``, which releases every whole free page of every arena)
after each batch keeps it at 1.3 GB in every run, at no measurable cost (docs/benchmarks/atlas.md).

The opposite need, inside one long computation: tensors above 32 MB (a copy batch's MLP activations, a
window's logits) are always fresh ``mmap`` pages in glibc, and the kernel zero-fills every page again on
each allocation; a forward pass of 28 copies of a 256-token window spends a quarter of its time there.
:func:`reused_heap` serves such tensors from the heap, where freed blocks are reused as they are, for the
length of a ``with`` block, then gives the free pages back (``malloc_trim``).

Only glibc has ``malloc_trim`` and ``mallopt``; elsewhere (macOS, musl, Windows) both are no-ops.
"""

from __future__ import annotations

import ctypes
import functools
from contextlib import contextmanager
from typing import Any, Iterator

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4
#: after :func:`reused_heap`: what glibc's own dynamic thresholds settle at in a process that has freed a
#: large tensor (mmap above 32 MB, trim above 64 MB), at most 65,536 mappings (its default)
_AFTER = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 64 << 20), (_M_MMAP_MAX, 65536))
_DEPTH = 0  # reused_heap blocks open now (the outermost one restores)


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


@functools.cache
def _mallopt() -> Any:
    """glibc's ``mallopt``, or None where the C library has none (or no ``malloc_trim`` to undo it with)."""
    if _malloc_trim() is None:
        return None
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, TypeError, AttributeError):  # pragma: no cover - glibc has both
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


@contextmanager
def reused_heap() -> Iterator[bool]:
    """Within the block, large allocations come from the heap and freed blocks stay there for the next
    one (no ``mmap``, no trimming); after it, the free pages go back to the OS and glibc's thresholds are
    left where its dynamic rule puts them in a process like this one (:data:`_AFTER`). Nested blocks are
    one block (the outermost restores). Yields whether the C library could be asked (glibc)."""
    global _DEPTH
    fn = _mallopt()
    if fn is None:
        yield False
        return
    if _DEPTH:  # inside another such block: that one restores and trims at its end
        yield True
        return
    _DEPTH += 1
    fn(_M_TRIM_THRESHOLD, 2**31 - 1)
    fn(_M_MMAP_MAX, 0)
    try:
        yield True
    finally:
        _DEPTH -= 1
        for param, value in _AFTER:
            fn(param, value)
        release_free_memory()
