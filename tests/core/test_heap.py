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
