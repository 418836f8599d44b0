"""Corpora for the training lab, their train/valid/test splits, and token windows.

Owns :func:`open_corpus` (``"builtin"``: CPython's own documentation text ``pydoc_data.topics``, no
download; ``"builtin-code"``: the source code of a fixed list of pure-Python standard-library modules
(:data:`CODE_MODULES`, as the running Python ships them), no download; a text file or a directory of text files; ``"enwik8"`` or a path to ``enwik8`` /
``enwik8.zip``; ``"hf:<dataset>[:config]"`` streamed from the Hugging Face hub; ``"jigsaw:<path>"``
for the Kaggle zip or its ``train.csv``), the split rule (enwik8: the standard 90M/5M/5M bytes;
a directory of files: the last 10% of *each file*, halved into valid and test, so held-out text
comes from every file; one file, builtin, Jigsaw, hf: the last 10% of bytes, halved), :func:`tokenize_split` and
:func:`heldout_windows` (deterministic, non-overlapping windows of a held-out split), and the random
training batches (:func:`sample_windows`).

Corpora are held as bytes (files are memory-mapped; enwik8 is 100 MB); Hugging Face datasets are
streamed up to ``max_bytes``.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from attnscope.errors import FormatError, InputError, OfflineError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .tokenizers import Tokenizer

SPLITS = ("train", "valid", "test")
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".text", "")
HF_DEFAULT_MAX_BYTES = 50_000_000


@dataclass(frozen=True)
class ByteCorpus:
    """A fixed byte corpus published as a zip (enwik8): where it lives, what it must be, its splits."""

    name: str
    url: str  #: ``ATTNSCOPE_<NAME>_URL`` overrides it (a mirror, a local server)
    size: int
    sha1: str  #: of the unzipped member, as its publisher lists it
    valid_at: int  #: [0, valid_at) train
    test_at: int  #: [valid_at, test_at) valid, [test_at, size) test

    @property
    def source(self) -> str:
        return os.environ.get(f"ATTNSCOPE_{self.name.upper()}_URL") or self.url


#: enwik8 (Hutter prize): 100,000,000 bytes, SHA-1 and the 90M/5M/5M split from mattmahoney.net/dc/textdata
ENWIK8 = ByteCorpus(
    "enwik8", "http://mattmahoney.net/dc/enwik8.zip", 100_000_000,
    "57b8363b814821dc9d47aa4d41f58733519076b2", 90_000_000, 95_000_000,
)

HELDOUT = (0.90, 0.95)  # per segment: [0, 90%) train, [90%, 95%) valid, [95%, 100%) test


@dataclass
class Corpus:
    """A corpus as one byte string split into train / valid / test.

    ``segments`` (optional) are consecutive ``(start, end)`` byte ranges covering ``data`` (one per
    document, e.g. per file of a directory); each is split on its own (train head, valid and test at its
    tail, :data:`HELDOUT`) and a split is the concatenation of its parts, so held-out text comes from
    every document. Without segments, ``bounds`` = (start of valid, start of test) of the whole string
    (default: the same 90% / 95% rule).
    """

    name: str
    data: bytes | memoryview
    bounds: tuple[int, int] = (0, 0)  # (start of valid, start of test)
    segments: tuple[tuple[int, int], ...] | None = None
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.data)
        if n == 0:
            raise InputError(f"corpus {self.name!r} is empty")
        if self.segments is not None:
            ends = [0] + [e for _, e in self.segments]
            if [s for s, _ in self.segments] != ends[:-1] or ends[-1] != n or any(
                e < s for s, e in self.segments
            ):
                raise InputError(f"corpus {self.name!r}: segments must be consecutive and cover all {n} bytes")
        elif self.bounds == (0, 0):
            self.bounds = (int(n * HELDOUT[0]), int(n * HELDOUT[1]))

    def __len__(self) -> int:
        return len(self.data)

    def ranges(self, name: str = "train") -> list[tuple[int, int]]:
        """The byte ranges ``[(lo, hi), ...]`` of ``data`` that make up one split, in order."""
        if name not in SPLITS:
            raise InputError(f"unknown split {name!r}; use one of {', '.join(SPLITS)}")
        segs = self.segments if self.segments is not None else ((0, len(self.data)),)
        out = []
        for lo, hi in segs:
            if self.segments is None:
                a, b = self.bounds
            else:
                a, b = (lo + int((hi - lo) * f) for f in HELDOUT)
            lo_hi = {"train": (lo, a), "valid": (a, b), "test": (b, hi)}[name]
            if lo_hi[1] > lo_hi[0]:
                out.append(lo_hi)
        return out

    def split(self, name: str = "train", max_bytes: int | None = None) -> bytes:
        """The raw bytes of one split (the concatenation of its ranges); its first ``max_bytes`` when given."""
        parts, left = [], max_bytes
        for lo, hi in self.ranges(name):
            if left is not None:
                hi = min(hi, lo + left)
                left -= hi - lo
            parts.append(bytes(self.data[lo:hi]))
            if left is not None and left <= 0:
                break
        return b"".join(parts)

    def text(self, name: str = "train") -> str:
        return self.split(name).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- opening corpora


def open_corpus(spec: str, *, max_bytes: int | None = None) -> Corpus:
    """Open a corpus by spec (see the module docstring); one clear line when it cannot be used."""
    spec = str(spec)
    if spec == "builtin":
        return _builtin()
    if spec == "builtin-code":
        return _builtin_code()
    if spec.startswith("hf:"):
        return _hf(_hf_name(spec), max_bytes or HF_DEFAULT_MAX_BYTES)
    if spec.startswith("jigsaw:"):
        return _jigsaw(Path(spec[7:]).expanduser())
    path = Path(spec).expanduser()
    if spec == "enwik8" or path.name in ("enwik8", "enwik8.zip"):
        return _enwik8(path if path.exists() else None)
    if path.is_dir():
        return _text_dir(path)
    if path.is_file():
        return Corpus(path.name, _map_file(path))
    if path.exists():  # a FIFO, a device (/dev/zero), a socket: say so, never read it
        from attnscope.sources.base import readable_file

        readable_file(path, f"corpus {spec!r}")
    raise _missing(spec)


#: the standard-library modules whose source is the ``builtin-code`` corpus (pure Python in every CPython)
CODE_MODULES = ("argparse", "collections", "dataclasses", "difflib", "email.message", "fractions", "heapq",
                "inspect", "json.decoder", "pathlib", "pprint", "shutil", "statistics", "string", "textwrap",
                "typing", "calendar", "configparser", "csv", "enum", "functools", "gettext", "ipaddress", "locale")


def _builtin_code() -> Corpus:
    """The source of :data:`CODE_MODULES`, joined in that order (what the running Python ships; the text is
    fixed for a Python release)."""
    import importlib.util

    parts = []
    for name in CODE_MODULES:
        spec = importlib.util.find_spec(name)
        origin = getattr(spec, "origin", None)
        if origin and origin.endswith(".py") and os.path.isfile(origin):
            parts.append(Path(origin).read_text(encoding="utf-8"))
    if not parts:
        raise InputError("corpus 'builtin-code': this Python ships none of its standard-library sources")
    return Corpus("builtin-code", "\n\n".join(parts).encode("utf-8"))


def check_corpus(spec: str) -> None:
    """Refuse now a local corpus that does not exist (before a grid starts runs that would each fail on it);
    builtin, enwik8 (downloaded when missing) and hf: corpora are checked when opened."""
    spec = str(spec)
    if spec.startswith("hf:"):
        _hf_name(spec)
    if spec in ("builtin", "builtin-code") or spec.startswith("hf:"):
        return
    path = Path(spec.removeprefix("jigsaw:")).expanduser()
    if not spec.startswith("jigsaw:") and (spec == "enwik8" or path.name in ("enwik8", "enwik8.zip")):
        return
    if not path.exists():
        raise _missing(spec)


def _hf_name(spec: str) -> str:
    """The ``<dataset>[:config]`` of an ``hf:`` spec; an empty dataset name is refused (not sent to the hub)."""
    rest = spec[3:]
    if not rest.split(":", 1)[0].strip():
        raise InputError(f"corpus {spec!r}: give a dataset name after hf:, e.g. hf:wikitext:wikitext-2-raw-v1")
    return rest


def _missing(spec: str) -> InputError:
    return InputError(f"corpus {spec!r}: no such file or directory (or use builtin, builtin-code, enwik8, hf:NAME, "
                      "jigsaw:PATH)")


def _builtin() -> Corpus:
    import pydoc_data.topics as topics

    text = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    return Corpus("builtin", text.encode("utf-8"))


def _map_file(path: Path) -> bytes | memoryview:
    if path.stat().st_size == 0:
        raise InputError(f"corpus {path} is empty")
    with open(path, "rb") as fh:
        return memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))


def _text_dir(path: Path) -> Corpus:
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    files = [p for p in files if not p.name.startswith(".")]
    if not files:
        raise InputError(f"corpus directory {path} holds no text files (*.txt, *.md, *.rst)")
    blobs = [p.read_bytes() + b"\n" for p in files]  # a newline closes each file (part of its segment)
    ends = np.cumsum([len(b) for b in blobs]).tolist()
    segments = tuple(zip([0] + ends[:-1], ends))
    return Corpus(path.name, b"".join(blobs), segments=segments)


def _enwik8(path: Path | None, spec: ByteCorpus | None = None) -> Corpus:
    """enwik8 from a local file / zip, or downloaded once (verified) into the attnscope cache."""
    spec = spec or ENWIK8
    if path is None:
        path = download_byte_corpus(spec)
    if path.suffix == ".zip":
        data: bytes | memoryview = _unzip_member(path, spec.name)
    else:
        data = _map_file(path)
    if len(data) != spec.size:
        raise FormatError(f"{path}: {spec.name} must be {spec.size} bytes, found {len(data)}")
    return Corpus(spec.name, data, bounds=(spec.valid_at, spec.test_at))


def _unzip_member(path: Path, member: str) -> bytes:
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return zf.read(member)
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
        raise FormatError(f"{path}: not the {member} archive ({exc})") from None


def download_byte_corpus(spec: ByteCorpus | None = None) -> Path:
    """The unzipped corpus in the attnscope cache, downloaded (resumably) and checked against its
    size and SHA-1 first; a corrupt or truncated download is refused, fetched once more, never used."""
    import hashlib

    from attnscope.sources.download import cache_dir, download

    spec = spec or ENWIK8
    target = cache_dir() / spec.name
    if target.is_file() and target.stat().st_size == spec.size:
        return target  # only ever renamed into place after the checks below
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("ATTNSCOPE_OFFLINE") == "1":
        raise OfflineError(
            f"{spec.name} is not cached and downloads are off; put {spec.name}.zip at {target}.zip or pass its path"
        )

    def verify(zip_path: Path) -> str | None:
        try:
            data = _unzip_member(zip_path, spec.name)
        except FormatError:
            return "not a zip holding " + spec.name
        if len(data) != spec.size:
            return f"{len(data)} bytes unzipped, expected {spec.size}"
        if hashlib.sha1(data).hexdigest() != spec.sha1:
            return "SHA-1 mismatch"
        return None

    zipped = download(spec.source, target.with_name(spec.name + ".zip"), verify=verify, what=spec.name)
    from attnscope.tables import atomic_write_bytes

    atomic_write_bytes(target, _unzip_member(zipped, spec.name))
    zipped.unlink(missing_ok=True)
    return target


def _jigsaw(path: Path) -> Corpus:
    """The Kaggle Jigsaw toxic-comments data: the competition zip or its train.csv (``comment_text``)."""
    import io
    import zipfile

    import pandas as pd

    if not path.exists():
        raise InputError(f"jigsaw corpus {path}: no such file")
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if n.endswith("train.csv") or n.endswith("train.csv.zip")]
                if not names:
                    raise FormatError(f"{path}: no train.csv inside the zip")
                raw = zf.read(names[0])
                if names[0].endswith(".zip"):
                    with zipfile.ZipFile(io.BytesIO(raw)) as inner:
                        raw = inner.read("train.csv")
            df = pd.read_csv(io.BytesIO(raw))
        else:
            df = pd.read_csv(path)
    except (zipfile.BadZipFile, pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise FormatError(f"{path}: not a readable Jigsaw file ({exc})") from None
    if "comment_text" not in df.columns:
        raise FormatError(f"{path}: no comment_text column (columns: {', '.join(map(str, df.columns[:6]))})")
    text = "\n\n".join(df["comment_text"].astype(str))
    return Corpus("jigsaw", text.encode("utf-8"))


HF_TEXT_FIELDS = ("text", "raw_content", "content", "comment_text")


def _hf(spec: str, max_bytes: int, loader: Callable | None = None) -> Corpus:
    """``<dataset>[:config]`` streamed from the hub (``datasets`` imported lazily): the text field of
    each row (the first of :data:`HF_TEXT_FIELDS` present), rows joined by a blank line, cut at
    exactly ``max_bytes``. Network and hub failures are one line each."""
    name, _, config = spec.partition(":")
    if loader is None:
        try:
            from datasets import load_dataset as loader
        except ImportError:
            raise InputError("hf: corpora need the optional 'datasets' package (pip install 'attnscope[datasets]')") from None
        offline = any(os.environ.get(v, "").lower() in ("1", "true") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
        if not offline:  # datasets retries a dead host for half a minute: ask once, quickly, first
            from attnscope.sources.download import unreachable
            from attnscope.sources.hub import hub_endpoint

            why = unreachable(f"{hub_endpoint()}/api/datasets/{name}")
            if why is not None:
                raise OfflineError(f"hf:{spec}: the hub at {hub_endpoint()} cannot be reached ({why})")
    parts, total = [], 0
    try:
        ds = loader(name, config or None, split="train", streaming=True)
        for row in ds:
            key = next((k for k in HF_TEXT_FIELDS if k in row), None)
            if key is None:
                raise FormatError(
                    f"hf:{spec}: rows have none of the text fields {', '.join(HF_TEXT_FIELDS)} "
                    f"(they have {', '.join(map(str, list(row)[:8]))})"
                )
            blob = str(row[key]).encode("utf-8")
            parts.append(blob)
            total += len(blob) + 2
            if total >= max_bytes:
                break
    except FormatError:
        raise
    except Exception as exc:  # network, name and config errors from datasets / the hub: one line
        raise _hf_error(spec, exc) from None
    return Corpus(f"hf:{spec}", b"\n\n".join(parts)[:max_bytes])


def _hf_error(spec: str, exc: BaseException) -> InputError | OfflineError:
    """One line for a failure of ``datasets``: offline when any exception in the chain is a network one."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    lines = str(exc).strip().splitlines()
    msg = (lines[0] if lines else type(exc).__name__)[:200]
    network = {"ConnectError", "ConnectionError", "ConnectTimeout", "OfflineModeIsEnabled", "TimeoutException"}
    if any({t.__name__ for t in type(e).__mro__} & network for e in chain) or "offline" in msg.lower():
        return OfflineError(f"hf:{spec}: cannot stream from the hub ({msg})")
    return InputError(f"hf:{spec}: cannot open the dataset ({msg})")


# --------------------------------------------------------------------------- tokens and windows


def tokenize_split(corpus: Corpus, tokenizer: "Tokenizer", split: str = "train") -> np.ndarray:
    """Token ids [n] (uint8 / uint16 / int32, as compact as the vocabulary allows) of one split, cached."""
    key = (tokenizer.name, split)
    if key not in corpus._cache:
        corpus._cache[key] = tokenizer.encode_array(corpus.split(split))
    return corpus._cache[key]


def heldout_windows(
    corpus: Corpus, tokenizer: "Tokenizer", seq_len: int, n: int, split: str = "valid", max_bytes: int | None = None
) -> "torch.Tensor":
    """``n`` non-overlapping windows [n, seq_len] spread evenly over a split (deterministic); over its first
    ``max_bytes`` only when given (a multi-GB corpus is not tokenised whole for a few windows)."""
    import torch

    capped = max_bytes is not None and sum(hi - lo for lo, hi in corpus.ranges(split)) > max_bytes
    if capped:
        key = (tokenizer.name, split, max_bytes)
        if key not in corpus._cache:
            corpus._cache[key] = tokenizer.encode_array(corpus.split(split, max_bytes))
        ids = corpus._cache[key]
    else:
        ids = tokenize_split(corpus, tokenizer, split)
    fit = len(ids) // seq_len
    if fit < n:
        part = f"the first {max_bytes:,} bytes of the {split} split" if capped else f"the {split} split"
        raise InputError(
            f"{part} of {corpus.name!r} holds {len(ids)} tokens: only {fit} windows of {seq_len}, not {n}"
            " (use fewer or shorter windows, or a larger corpus)"
        )
    stride = (len(ids) // n) // seq_len * seq_len  # a multiple of seq_len: windows never overlap
    starts = np.arange(n) * stride
    idx = starts[:, None] + np.arange(seq_len)[None, :]
    return torch.from_numpy(ids[idx].astype(np.int64))


def sample_windows(ids: np.ndarray, batch: int, length: int, generator: "torch.Generator") -> "torch.Tensor":
    """``batch`` random windows [batch, length] of a token array (starts drawn with ``generator``)."""
    import torch

    if len(ids) < length + 1:
        raise InputError(f"the training split holds {len(ids)} tokens, fewer than one window of {length}")
    starts = torch.randint(0, len(ids) - length + 1, (batch,), generator=generator).numpy()
    idx = starts[:, None] + np.arange(length)[None, :]
    return torch.from_numpy(ids[idx].astype(np.int64))
