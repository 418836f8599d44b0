"""The GGUF header read with bounded reads: every count, length and offset checked before anything is allocated.

A GGUF file (llama.cpp / Ollama) opens with a header: magic, version, a tensor count, a key/value count,
the key/value metadata, one info record per tensor (name, dims, ggml type, offset), padding to the
alignment, then the tensor data. Every number in it is a claim made by whoever wrote the file.
:func:`read_gguf_header` walks the header with small positioned reads and checks each claim against
the bytes left in the file *before* it reads or allocates what the claim describes:

* counts: metadata keys (at most :data:`MAX_KEYS`), tensors (at most :data:`MAX_TENSORS`), each also
  against the smallest record that many keys / tensors need;
* string lengths (a key or tensor name at most :data:`MAX_NAME` bytes) and array lengths x element size;
  all metadata arrays together hold at most :data:`MAX_ARRAY_ENTRIES` entries; no arrays of arrays;
* tensors: at most 4 dims, each from 1 to 2^63 - 1 (ggml's int64; a dim of 0 is no tensor), a known ggml
  type, a first dim that is whole blocks of that type, an offset that is a multiple of the alignment;
* the layout, against the file's size exactly, as llama.cpp and the gguf package write it: the data
  section starts where the header ends, padded with zeros to the alignment; the tensors' data follow
  one another from data offset 0, each padded with zeros to the alignment (no gap, no overlap); the file
  ends where the last tensor's data ends (padded or not). A file longer or shorter than its table says,
  a gap, or padding that is not zero (a byte inserted or deleted before the data shifts every tensor)
  is refused in one line naming the offsets;
* ``general.alignment``: a uint32 power of two; names that are UTF-8 and not repeated.

Values a run does not use are skipped by seeking past them, never materialised: tokenizer keys
(vocabularies, merges, scores), arrays longer than :data:`KEEP_ARRAY` entries and strings longer than
:data:`KEEP_STRING` bytes; only their lengths are checked. The rest (scalars, short arrays) is kept as
plain Python values. A broken claim is one :class:`~attnscope.errors.FormatError` line naming the file
and what is wrong.

The same walk guards transformers' GGUF loader (:func:`attnscope.heads.load.open_gguf`), which reads a
file's whole header into memory: a file refused here never reaches it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Union

from attnscope.errors import FormatError

from .base import shown

GGUF_MAGIC = b"GGUF"
#: GGUF versions read here (version 1 used 32-bit counts and is long gone)
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

#: most metadata keys a header may claim (real files have a few dozen)
MAX_KEYS = 1 << 16
#: most tensors a header may claim (the largest published models have a few thousand)
MAX_TENSORS = 1 << 16
#: most entries of all metadata arrays together (a 262k vocabulary with scores and types is 0.8M; the gguf package's
#: reader, which transformers uses, holds about 1 KB per entry)
MAX_ARRAY_ENTRIES = 1 << 21
#: longest key or tensor name, in bytes
MAX_NAME = 1 << 16
#: longest array kept as a value (longer ones are skipped: token lists, merges, scores)
KEEP_ARRAY = 64
#: longest string value kept, in bytes (longer ones are skipped)
KEEP_STRING = 1 << 16
#: most dims of a tensor (ggml's GGML_MAX_DIMS)
MAX_DIMS = 4

STRING, ARRAY = 8, 9
#: the vocabulary's key: its entries are walked and checked to be distinct (never kept)
VOCABULARY = "tokenizer.ggml.tokens"
#: struct format and size of each scalar value type (GGUFValueType)
SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
    6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8),
}
UINT32 = 4
_CHUNK = 1 << 20  # bytes read per refill of the cursor's buffer

#: what a read is for, in an error message: a string, or a function making it (built only on failure)
What = Union[str, Callable[[], str]]


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's record: ``shape`` in ggml order (``ne0``, the input dim, first); ``offset`` is absolute."""

    name: str
    ggml_type: int
    shape: tuple[int, ...]
    offset: int
    n_bytes: int


@dataclass
class GGUFHeader:
    """What :func:`read_gguf_header` found: kept metadata, the names of skipped values, the tensor index."""

    path: Path
    version: int
    alignment: int
    data_offset: int
    metadata: dict[str, Any] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)


def keep_for_config(key: str) -> bool:
    """The default choice of kept values: everything but the tokenizer's."""
    return not key.startswith("tokenizer.")


def read_gguf_header(path: str | Path, keep: Callable[[str], bool] = keep_for_config, *,
                     unique_vocabulary: bool = False) -> GGUFHeader:
    """Walk the header of the GGUF file ``path``; values of keys ``keep`` refuses are skipped (lengths checked).
    ``unique_vocabulary``: also refuse a vocabulary that lists one token twice (for a run, whose tokenizer is
    rebuilt from it; scoring weights never reads it)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            size = _file_size(fh)
            walk = _Walk(_Cursor(fh, size, str(path)), path, keep)
            walk.unique_vocabulary = unique_vocabulary
            return walk.run()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the GGUF file ({exc.strerror or exc})") from None


def _file_size(fh: BinaryIO) -> int:
    fh.seek(0, 2)
    size = fh.tell()
    fh.seek(0)
    return size


class _Cursor:
    """Reads from a file at a position, each read first checked against the bytes left."""

    def __init__(self, fh: BinaryIO, size: int, label: str) -> None:
        self.fh, self.size, self.label = fh, size, label
        self.pos = 0
        self.order = "<"
        self._buf = b""
        self._at = 0  # file offset of _buf[0]

    def fail(self, what: str) -> FormatError:
        return FormatError(f"{self.label}: corrupt GGUF header: {what}")

    def need(self, n: int, what: What) -> None:
        left = self.size - self.pos
        if n > left:
            text = what() if callable(what) else what
            raise self.fail(f"{text} needs {n} bytes at offset {self.pos}, the file has {left} left")

    def take(self, n: int, what: What) -> bytes:
        self.need(n, what)
        off = self.pos - self._at
        if off < 0 or off + n > len(self._buf):
            self.fh.seek(self.pos)
            self._buf = self.fh.read(max(n, _CHUNK))
            self._at, off = self.pos, 0
            if len(self._buf) < n:  # the file shrank while being read
                raise FormatError(f"{self.label}: truncated GGUF file (it ends at offset {self.pos + len(self._buf)})")
        self.pos += n
        return self._buf[off:off + n]

    def skip(self, n: int, what: What) -> None:
        self.need(n, what)
        self.pos += n

    def scalar(self, vtype: int, what: What) -> Any:
        fmt, n = SCALARS[vtype]
        return struct.unpack(self.order + fmt, self.take(n, what))[0]

    def u32(self, what: What) -> int:
        return struct.unpack(self.order + "I", self.take(4, what))[0]

    def u64(self, what: What) -> int:
        return struct.unpack(self.order + "Q", self.take(8, what))[0]

    def name(self, what: str) -> str:
        """A key or tensor name: length-prefixed UTF-8 of at most MAX_NAME bytes."""
        n = self.u64(f"the length of {what}")
        if n > MAX_NAME:
            self.need(n, f"{what}")  # a length past the end says so first
            raise self.fail(f"{what} is {n} bytes long (at most {MAX_NAME})")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} at offset {self.pos - n} is not UTF-8") from None

    def skip_strings(self, count: int, what: str) -> None:
        """Skip ``count`` length-prefixed strings, each length checked (the vocabulary walk: kept tight)."""
        unpack, order, size = struct.unpack_from, self.order + "Q", self.size
        pos, left = self.pos, count
        while left:
            if pos + 8 > size:
                self.pos = pos
                self.need(8, f"a string length in {what}")
            self.fh.seek(pos)
            buf, at = self.fh.read(_CHUNK), pos
            if len(buf) < 8:
                raise FormatError(f"{self.label}: truncated GGUF file (it ends at offset {pos + len(buf)})")
            off, end, limit = 0, len(buf) - 8, size - at - 8  # a length at off is whole while off <= end
            while left and off <= end:
                n = unpack(order, buf, off)[0]
                if n > limit - off:
                    self.pos = at + off + 8
                    self.need(n, f"a string in {what}")
                off += 8 + n
                left -= 1
            pos = at + off
        self.pos = pos
        self._buf, self._at = b"", 0  # the next read refills


class _Walk:
    """One pass over a header: metadata, tensor records, alignment, tensor bounds."""

    unique_vocabulary = False

    def __init__(self, cur: _Cursor, path: Path, keep: Callable[[str], bool]) -> None:
        self.cur, self.path, self.keep = cur, path, keep
        self.entries = 0  # metadata array entries seen so far

    def run(self) -> GGUFHeader:
        cur = self.cur
        magic = cur.take(min(4, cur.size), "the magic")
        if magic != GGUF_MAGIC:
            raise FormatError(f"{self.path}: not a GGUF file (magic {bytes(magic)!r})")
        raw = cur.take(4, "the version")
        version = struct.unpack("<I", raw)[0]
        if version & 0xFFFF == 0:  # written on a machine of the other byte order
            cur.order = ">"
            version = struct.unpack(">I", raw)[0]
        if version not in VERSIONS:
            raise FormatError(f"{self.path}: unsupported GGUF file: version {version} "
                              f"(attnscope reads versions {', '.join(map(str, VERSIONS))})")
        n_tensors = cur.u64("the tensor count")
        n_keys = cur.u64("the key/value count")
        self._check_count(n_keys, MAX_KEYS, 8 + 4 + 1, "metadata keys")
        self._check_count(n_tensors, MAX_TENSORS, 8 + 4 + 4 + 8, "tensors")
        head = GGUFHeader(self.path, version, DEFAULT_ALIGNMENT, 0)
        types: dict[str, int] = {}
        for i in range(n_keys):
            key = cur.name(f"metadata key {i}")
            if key in types:
                raise cur.fail(f"metadata key {shown(key)} appears twice")
            vtype = cur.u32(lambda: f"the type of {shown(key)}")
            types[key] = vtype
            value, kept = self._value(vtype, key, key == "general.alignment" or self.keep(key))
            if kept:
                head.metadata[key] = value
            else:
                head.skipped.add(key)
        records = [self._tensor_record(i) for i in range(n_tensors)]
        if "general.alignment" in types:
            align = head.metadata.get("general.alignment")
            if types["general.alignment"] != UINT32 or not isinstance(align, int) or align <= 0 or align & (align - 1):
                raise cur.fail(f"general.alignment must be a uint32 power of two, not {shown(align)}")
            head.alignment = align
        head.data_offset = cur.pos + (-cur.pos % head.alignment)  # each tensor's end is checked against the size
        head.tensors = self._tensors(records, head)
        return head

    def _check_count(self, n: int, cap: int, smallest: int, what: str) -> None:
        if n > cap:
            raise self.cur.fail(f"it claims {n} {what} (attnscope reads at most {cap})")
        self.cur.need(n * smallest, lambda: f"the count of {what} ({n})")

    def _value(self, vtype: int, key: str, keep: bool) -> tuple[Any, bool]:
        """(value, kept) of one metadata value of type ``vtype``; skipped values are (None, False)."""
        cur = self.cur
        if vtype in SCALARS:
            n = SCALARS[vtype][1]
            if not keep:
                cur.skip(n, lambda: f"the value of {shown(key)}")
                return None, False
            return cur.scalar(vtype, lambda: f"the value of {shown(key)}"), True
        if vtype == STRING:
            n = cur.u64(lambda: f"the length of {shown(key)}")
            if not keep or n > KEEP_STRING:
                cur.skip(n, lambda: f"the string {shown(key)}")
                return None, False
            raw = cur.take(n, lambda: f"the string {shown(key)}")
            try:
                return raw.decode("utf-8"), True
            except UnicodeDecodeError:  # not config: left out, as a value nobody reads
                return None, False
        if vtype == ARRAY:  # its elements are scalars or strings (_array refuses arrays of arrays)
            return self._array(key, keep)
        raise cur.fail(f"{shown(key)} has an unknown value type {vtype}")

    def _array(self, key: str, keep: bool) -> tuple[Any, bool]:
        cur = self.cur
        itype = cur.u32(lambda: f"the element type of {shown(key)}")
        count = cur.u64(lambda: f"the length of {shown(key)}")
        if itype in SCALARS:
            smallest = SCALARS[itype][1]
        elif itype == STRING:
            smallest = 8
        elif itype == ARRAY:  # llama.cpp refuses these too
            raise cur.fail(f"{shown(key)} is an array of arrays, which llama.cpp does not read either")
        else:
            raise cur.fail(f"{shown(key)} is an array of an unknown value type {itype}")
        cur.need(count * smallest, lambda: f"the array {shown(key)} of {count} entries")
        self.entries += count
        if self.entries > MAX_ARRAY_ENTRIES:
            raise cur.fail(f"its metadata arrays hold more than {MAX_ARRAY_ENTRIES} entries in all "
                           f"({shown(key)} alone claims {count})")
        keep = keep and count <= KEEP_ARRAY
        if itype in SCALARS and not keep:
            cur.skip(count * smallest, lambda: f"the array {shown(key)}")
            return None, False
        if itype == STRING and key == VOCABULARY and self.unique_vocabulary:
            self._unique_strings(count, key)
            return None, False
        if itype == STRING and not keep:
            cur.skip_strings(count, f"the array {shown(key)}")
            return None, False
        out = []
        for _ in range(count):
            value, kept = self._value(itype, key, keep)
            keep = keep and kept  # a long string inside: the rest is skipped, the array not kept
            out.append(value)
        return (out, True) if keep else (None, False)

    def _unique_strings(self, count: int, key: str) -> None:
        """Walk the vocabulary's ``count`` strings (lengths checked) and refuse one listed twice: a tokenizer built
        from it (a dict from token to id) would lose an id, and text would map to the wrong embeddings."""
        cur, seen = self.cur, dict[bytes, int]()
        for i in range(count):
            n = cur.u64(lambda: f"a string length in {shown(key)}")
            raw = cur.take(n, lambda: f"a string in {shown(key)}")
            j = seen.setdefault(raw, i)
            if j != i:
                token = raw.decode("utf-8", "backslashreplace")
                raise FormatError(f"{cur.label}: its vocabulary ({key}) lists {token[:40]!r} twice, as ids {j} and {i}; "
                                  "a tokenizer rebuilt from it would map text to the wrong ids")

    def _tensor_record(self, i: int) -> tuple[str, tuple[int, ...], int, int]:
        cur = self.cur
        name = cur.name(f"the name of tensor {i}")
        n_dims = cur.u32(lambda: f"the dim count of {shown(name)}")
        if n_dims > MAX_DIMS:
            raise cur.fail(f"tensor {shown(name)} claims {n_dims} dims (GGUF allows at most {MAX_DIMS})")
        dims = struct.unpack(f"{cur.order}{n_dims}Q", cur.take(8 * n_dims, lambda: f"the dims of {shown(name)}"))
        ggml_type = cur.u32(lambda: f"the type of {shown(name)}")
        offset = cur.u64(lambda: f"the offset of {shown(name)}")
        return name, tuple(int(d) for d in dims), ggml_type, offset

    def _tensors(self, records: list[tuple[str, tuple[int, ...], int, int]], head: GGUFHeader) -> dict[str, TensorInfo]:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        cur, out = self.cur, {}
        for name, dims, raw_type, offset in records:
            if name in out:
                raise cur.fail(f"tensor {shown(name)} appears twice")
            try:
                block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(raw_type)]
            except (ValueError, KeyError):
                raise cur.fail(f"tensor {shown(name)} has an unknown ggml type {raw_type}") from None
            if any(d == 0 or d >= 1 << 63 for d in dims):
                raise cur.fail(f"tensor {shown(name)} has the dims {list(dims)}: each must be from 1 to 2^63 - 1")
            if dims and dims[0] % block:
                raise cur.fail(f"tensor {shown(name)}: its first dim {dims[0]} is not a whole number of "
                               f"{block}-element blocks of its type")
            n_elems = 1
            for d in dims:
                n_elems *= d
            n_bytes = n_elems // block * type_size
            if offset % head.alignment:
                raise cur.fail(f"tensor {shown(name)} starts at data offset {offset}, not a multiple of the "
                               f"alignment {head.alignment}")
            start = head.data_offset + offset
            if start + n_bytes > cur.size:
                raise FormatError(f"{self.path}: truncated GGUF file: tensor {shown(name)} needs bytes up to "
                                  f"{start + n_bytes}, the file has {cur.size}")
            out[name] = TensorInfo(name, raw_type, dims, start, n_bytes)
        spans = sorted((t.offset, t.offset + t.n_bytes, t.name) for t in out.values())
        for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
            if start < end:
                raise cur.fail(f"the data of tensors {shown(a)} and {shown(b)} overlap")
        self._check_layout(spans, head)
        return out

    def _check_layout(self, spans: list[tuple[int, int, str]], head: GGUFHeader) -> None:
        """The tensors' data tile the data section from its start to the file's end, every gap zero padding
        shorter than the alignment (what every GGUF writer makes); one line naming the offsets otherwise."""
        cur, align = self.cur, head.alignment
        where = cur.pos  # the header's end: from here, padding to data_offset, then the tensors
        previous = "the header"
        for start, end, name in spans:
            expected = where + (-where % align)
            if start != expected:
                raise cur.fail(f"tensor {shown(name)} starts at offset {start}, but {previous} ends at {where} "
                               f"(padded to the alignment {align}: {expected}); a gap of {start - where} bytes, "
                               "as a byte inserted before the data or a wrong offset leaves")
            self._zero_padding(where, start, previous)
            where, previous = end, f"tensor {shown(name)}"
        if cur.size < where:  # pragma: no cover - each tensor's end was checked against the size
            raise FormatError(f"{self.path}: truncated GGUF file: its data end at {where}, the file has {cur.size}")
        padded = where + (-where % align)
        if cur.size > padded:
            raise cur.fail(f"the file is {cur.size} bytes long but its {'data end' if spans else 'header ends'} at "
                           f"{where} (padded: {padded}); {cur.size - padded} bytes more than its table says, as a "
                           "byte inserted or a file appended leaves")
        self._zero_padding(where, cur.size, previous)

    def _zero_padding(self, start: int, end: int, after: str) -> None:
        if end <= start:
            return
        self.cur.fh.seek(start)
        if self.cur.fh.read(end - start).strip(b"\0"):
            raise self.cur.fail(f"the padding after {after} (offsets {start} to {end}) is not zero: its data are "
                                "shifted, as a byte inserted or deleted before them leaves")
