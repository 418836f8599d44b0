"""Handing freed heap memory back to the OS between forward passes (attnscope.heap)."""

from __future__ import annotations

import platform
import sys

import pytest

from attnscope import heap as memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's: this machine's C library is not glibc")
def test_release_returns_freed_heap_pages_to_the_os():
    """Free 300 MB of 1 MB blocks held in the heap behind one live block: only the trim gives it back."""
    warm = bytearray(b"x") * (2 << 20)  # freeing an mmapped 2 MB block raises glibc's mmap threshold to 2 MB,
    del warm  # so the 1 MB blocks below come from the heap, where free() keeps them
    blocks = [bytearray(b"x") * (1 << 20) for _ in range(300)]  # touched, resident
    pin = bytearray(b"y") * (1 << 20)  # above them: the heap top cannot shrink by itself
    del blocks
    before = _resident_mb()
    assert memory.release_free_memory() is True
    after = _resident_mb()
    assert before - after > 200, (before, after)
    assert pin[0] == ord("y")


def test_release_is_a_no_op_where_the_c_library_has_no_malloc_trim(monkeypatch):
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert memory.release_free_memory() is False


def test_every_forward_of_a_map_model_ends_with_a_release(monkeypatch):
    torch = pytest.importorskip("torch")
    from attnscope.heads.maps import MapModel

    calls: list[int] = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append(1) or True)
    seen: list[int] = []

    def forward(idx, on_layer):
        on_layer(0, torch.full((1, 1, idx.shape[1], idx.shape[1]), 1.0 / idx.shape[1]))

    model = MapModel(name="m", kind="attnscope", n_layers=1, n_heads=1, causal=False, max_len=None,
                     tokenizer=None, byte_level=True, _forward=forward)
    for _ in range(3):
        model.run(torch.zeros(1, 4, dtype=torch.long), lambda layer, probs: seen.append(layer))
    assert seen == [0, 0, 0] and len(calls) == 3


class _Mallinfo2(__import__("ctypes").Structure):
    _fields_ = [(name, __import__("ctypes").c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mapped_bytes() -> int:
    """Bytes glibc holds in separate mmap'd blocks now (mallinfo2().hblkhd)."""
    import ctypes

    fn = ctypes.CDLL(None).mallinfo2
    fn.restype = _Mallinfo2
    return fn().hblkhd


@pytest.mark.skipif(not GLIBC, reason="mallopt / mallinfo2 are glibc's: this machine's C library is not glibc")
def test_reused_heap_serves_big_blocks_from_the_heap_and_gives_them_back_after():
    size = 96 << 20  # above glibc's largest mmap threshold: always a fresh mapping outside the block
    with memory.reused_heap() as asked:
        before = _mapped_bytes()
        block = bytearray(size)
        inside = _mapped_bytes() - before
        block[-1] = 1
        del block
        big = [bytearray(b"z") * (4 << 20) for _ in range(60)]  # 240 MB touched, then freed into the heap
        del big
        held = _resident_mb()
    after_exit = _resident_mb()
    before = _mapped_bytes()
    block = bytearray(size)
    outside = _mapped_bytes() - before
    del block
    assert asked is True
    assert inside == 0 and outside >= size  # in the block from the heap; after it, a mapping again
    assert held - after_exit > 150, (held, after_exit)  # the freed pages went back at the end


def test_reused_heap_is_a_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(memory, "_mallopt", lambda: None)
    with memory.reused_heap() as asked:
        assert asked is False


@pytest.mark.skipif(not GLIBC, reason="mallopt / mallinfo2 are glibc's: this machine's C library is not glibc")
def test_a_nested_reused_heap_leaves_the_restoring_to_the_outer_block():
    size = 96 << 20
    with memory.reused_heap():
        with memory.reused_heap() as inner:
            assert inner is True
        before = _mapped_bytes()
        block = bytearray(size)  # still inside the outer block: from the heap
        assert _mapped_bytes() - before == 0
        del block
    before = _mapped_bytes()
    block = bytearray(size)
    assert _mapped_bytes() - before >= size
