"""Safetensors headers checked against the file before a tensor is read.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON (``{name: {dtype,
shape, data_offsets: [begin, end]}, "__metadata__": {...}}``), then the data section; offsets count
from the start of the data section. :func:`read_safetensors_header` reads the length and refuses it
when it is larger than the file (or than :data:`MAX_HEADER`) *before* reading the JSON;
:func:`check_header` then checks every entry: a known dtype, a shape of non-negative ints, offsets
``0 <= begin <= end <= data length`` whose span is exactly shape x dtype size, and no two tensors
sharing bytes. :func:`open_safetensors` does both, then opens the file with the safetensors library.
Every refusal is one :class:`~attnscope.errors.FormatError` line naming the file and the entry.
The hub's byte-range reader (:mod:`attnscope.sources.hub`) checks the headers it fetches the same way.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from attnscope.errors import FormatError

from .base import shown

#: the safetensors library's own bound on the JSON header (bytes)
MAX_HEADER = 100_000_000
#: bits per element of each safetensors dtype
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


def read_safetensors_header(path: str | Path) -> tuple[int, dict[str, Any]]:
    """(start of the data section, the checked JSON header) of a local safetensors file."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(0)
            head = fh.read(8)
            if len(head) < 8:
                raise FormatError(f"{path}: not a safetensors file (only {size} bytes)")
            (n,) = struct.unpack("<Q", head)
            check_header_length(n, size, str(path))
            raw = fh.read(n)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the safetensors file ({exc.strerror or exc})") from None
    if len(raw) < n:
        raise FormatError(f"{path}: truncated safetensors file (the header ends past the end)")
    header = parse_header(raw, str(path))
    check_header(header, size - 8 - n, str(path))
    return 8 + n, header


def check_header_length(n: int, size: int | None, label: str) -> None:
    """Refuse a header length that is 0, above :data:`MAX_HEADER` or (when ``size`` is known) past the file."""
    if n == 0 or n > MAX_HEADER:
        raise FormatError(f"{label}: not a safetensors file (it claims a {n}-byte header; at most {MAX_HEADER})")
    if size is not None and n > size - 8:
        raise FormatError(f"{label}: corrupt safetensors file: it claims a {n}-byte header, the file has "
                          f"{size - 8} bytes after the length")


def parse_header(raw: bytes, label: str) -> dict[str, Any]:
    """The JSON object of a header, or one FormatError."""
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise FormatError(f"{label}: corrupt safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise FormatError(f"{label}: corrupt safetensors file (its header is not a JSON object)")
    return header


def check_header(header: dict[str, Any], data_len: int | None, label: str) -> dict[str, Any]:
    """``header`` when every entry fits a data section of ``data_len`` bytes (None: unknown), else one FormatError."""
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        where = f"{label}: corrupt safetensors file: tensor {shown(name)}"
        if not isinstance(entry, dict):
            raise FormatError(f"{where} is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str):
            raise FormatError(f"{where} has no dtype")
        if not isinstance(shape, list) or not all(_count(d) for d in shape):
            raise FormatError(f"{where} has shape {shown(shape)}; expected a list of integers >= 0")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_count(x) for x in offsets)):
            raise FormatError(f"{where} has data_offsets {shown(offsets)}; expected [begin, end], integers >= 0")
        begin, end = offsets
        if begin > end:
            raise FormatError(f"{where} ends (byte {end}) before it begins (byte {begin})")
        if data_len is not None and end > data_len:
            raise FormatError(f"{where} ends at byte {end} of a {data_len}-byte data section")
        bits = DTYPE_BITS.get(dtype)
        if bits is not None:  # dtypes newer than this table: bounds and overlap only
            need = -(-math.prod(shape) * bits // 8)
            if end - begin != need:
                raise FormatError(f"{where} spans {end - begin} bytes; shape {shown(shape)} of {dtype} needs {need}")
        if end > begin:
            spans.append((begin, end, name))
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise FormatError(f"{label}: corrupt safetensors file: tensors {shown(a)} and {shown(b)} share bytes")
    return header


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def open_safetensors(path: Path) -> Any:
    """``safe_open`` on a local file whose header :func:`read_safetensors_header` accepted."""
    from safetensors import safe_open

    read_safetensors_header(path)
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as exc:  # SafetensorError, OSError: what the library refuses beyond our checks
        text = str(exc).strip().splitlines()
        line = (text[0] if text else type(exc).__name__)[:200]
        raise FormatError(f"{path}: not a readable safetensors file ({line})") from None
