"""FlexAttention's kernel options for the packed layout: chosen per shape and device by a small measured
table, or autotuned once per shape in a process.

FlexAttention's default forward tile (BLOCK_M x BLOCK_N = 128 x 128) is slow with the layout's
``mask_mod``: on an H200 (byte-sparse-8h, b 4, h 8, e 64, bf16) its forward took 5.58 ms at L 16384,
longer than its backward, and 0.65 ms with 64 x 64 tiles (fwd+bwd 7.87 -> 2.88 ms). :data:`TABLE`
holds such measurements as rules; :func:`kernel_options` picks the first rule that matches the device,
the length and the head dimension. ``ATTNSCOPE_FLEX_TUNE=autotune`` (or :func:`set_mode`) instead times
the :data:`CANDIDATES` once per input signature on the real shape (forward, and backward when gradients
are needed; compile time excluded) and keeps the fastest for the rest of the process.

On CPU the options are empty: FlexAttention's CPU kernel has its own tiling and none of these was
measured there. Every option set here divides the BlockMask's 128-wide blocks, as FlexAttention requires.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: How the options are chosen: "table" (the default), "autotune" (time :data:`CANDIDATES` once per
#: signature), "default" (FlexAttention's own choice: no options).
MODES = ("table", "autotune", "default")

Options = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    """Options for CUDA devices whose name contains ``device`` ("" any), ``min_len <= L < max_len``, ``e <= max_e``."""

    options: tuple[tuple[str, Any], ...]
    min_len: int = 0
    max_len: int | None = None
    device: str = ""
    max_e: int = 128
    source: str = field(default="", compare=False)

    def matches(self, device_name: str, L: int, e: int) -> bool:
        return (self.device in device_name and L >= self.min_len and (self.max_len is None or L < self.max_len)
                and e <= self.max_e)


#: The measured rules, first match wins (H200, torch 2.11, bf16, b 4, h 8, e 64, byte-sparse-8h, 2026-11-27).
TABLE: tuple[Rule, ...] = (
    Rule((("BLOCK_M", 64), ("BLOCK_N", 64)), min_len=8192,
         source="H200 L 16384: fwd 0.65 ms, fwd+bwd 2.88 ms (default tiles 5.58 / 7.87 ms)"),
    Rule((("BLOCK_M", 128), ("BLOCK_N", 64), ("num_warps", 8), ("num_stages", 2)), min_len=4096, max_len=8192,
         source="H200 L 4096: fwd+bwd 1.05 ms (64 x 64: 1.31 ms, default tiles 2.16 ms)"),
    Rule((("BLOCK_M", 64), ("BLOCK_N", 64)), max_len=4096,
         source="not measured below L 4096: the 64 x 64 forward tile of the longer lengths"),
)

#: What ``autotune`` times (the table's rows and FlexAttention's default among them).
CANDIDATES: tuple[Options, ...] = (
    {},
    {"BLOCK_M": 64, "BLOCK_N": 64},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "bwd_BLOCK_M1": 32, "bwd_BLOCK_N1": 64, "bwd_BLOCK_M2": 64, "bwd_BLOCK_N2": 32},
)

_mode: list[str] = []  # set_mode's choice (empty: the environment's, else "table")
_tuned: dict[tuple, tuple[Options, str]] = {}  # autotune's winners in this process, by input signature


def set_mode(mode: str | None) -> None:
    """Choose how options are picked for the rest of the process (None: back to ATTNSCOPE_FLEX_TUNE / table)."""
    if mode is not None and mode not in MODES:
        from attnscope.errors import ConfigError

        raise ConfigError(f"FlexAttention tuning mode must be one of {', '.join(MODES)}, not {mode!r}", params="mode")
    _mode[:] = [] if mode is None else [mode]


def mode() -> str:
    """The tuning mode in force: :func:`set_mode`'s, else ``ATTNSCOPE_FLEX_TUNE``'s, else "table"."""
    if _mode:
        return _mode[0]
    env = os.environ.get("ATTNSCOPE_FLEX_TUNE", "").strip().lower() or "table"
    if env not in MODES:
        from attnscope.errors import ConfigError

        raise ConfigError(f"ATTNSCOPE_FLEX_TUNE must be one of {', '.join(MODES)}, not {env!r}")
    return env


def table_options(device_name: str, L: int, e: int) -> tuple[Options, str]:
    """(options, why) of the first :data:`TABLE` rule matching a CUDA device's name, the length and head dim."""
    for rule in TABLE:
        if rule.matches(device_name, L, e):
            return dict(rule.options), rule.source
    return {}, "no rule matches: FlexAttention's defaults"


def _on_cuda(q: "torch.Tensor") -> bool:
    return q.device.type == "cuda"


_names: dict[int, str] = {}  # CUDA device index -> name, read once outside torch.compile's tracing


def _device_name(device: "torch.device") -> str:
    import torch

    index = torch.cuda.current_device() if device.index is None else device.index
    if index not in _names:
        if torch.compiler.is_compiling():  # no device query while tracing: the device-free rules still match
            return ""
        _names[index] = torch.cuda.get_device_name(index)
    return _names[index]


def kernel_options(q: "torch.Tensor", run: Callable[[Options], Any] | None = None,
                   key: tuple | None = None) -> tuple[Options, str]:
    """(options, why) for FlexAttention on ``q`` [b, h, L, e]: the table's, or autotune's (``run(options)``
    runs one forward (+ backward) with them; its winner is cached under ``key``); empty on CPU."""
    if not _on_cuda(q):
        return {}, f"{q.device.type}: FlexAttention's own tiling"
    how = mode()
    if how == "default":
        return {}, "ATTNSCOPE_FLEX_TUNE=default: FlexAttention's defaults"
    L, e = q.shape[2], q.shape[3]
    name = _device_name(q.device)
    if how == "table" or run is None:
        return table_options(name, L, e)
    full_key = (name, *(key or (tuple(q.shape), q.dtype)))
    if full_key not in _tuned:
        _tuned[full_key] = autotune(run, q.device)
    return _tuned[full_key]


def _timer(device: "torch.device") -> Callable[[Callable[[], Any]], float]:
    """Milliseconds one call takes on ``device`` (CUDA events)."""
    import torch

    def time_one(fn: Callable[[], Any]) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end)

    return time_one


def autotune(run: Callable[[Options], Any], device: "torch.device", repeats: int = 5,
             timer: Callable[[Callable[[], Any]], float] | None = None) -> tuple[Options, str]:
    """The fastest of :data:`CANDIDATES` (median of ``repeats`` after one untimed call that compiles it);
    candidates that fail to compile are skipped. Returns (options, why)."""
    time_one = timer or _timer(device)
    best: tuple[float, Options] | None = None
    skipped = 0
    for options in CANDIDATES:
        try:
            run(options)  # compiles; not timed
            ms = statistics.median(time_one(lambda: run(options)) for _ in range(repeats))
        except Exception as exc:  # an option set this GPU cannot compile (shared memory, ...)
            if type(exc).__name__ == "OutOfMemoryError":
                raise
            skipped += 1
            continue
        if best is None or ms < best[0]:
            best = (ms, options)
    if best is None:
        return {}, f"autotune: none of {len(CANDIDATES)} candidates ran; FlexAttention's defaults"
    return dict(best[1]), (f"autotune: fastest of {len(CANDIDATES) - skipped} candidates ({best[0]:.3f} ms)"
                           + (f", {skipped} failed to compile" if skipped else ""))


def describe(options: Options) -> str:
    """``BLOCK_M 64, BLOCK_N 64`` (``default`` for none): the options as a table cell."""
    return ", ".join(f"{k} {v}" for k, v in options.items()) or "default"
