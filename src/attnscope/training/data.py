"""Corpora for the training lab, their train/valid/test splits, and token windows.

Owns :func:`open_corpus` (``"builtin"``: CPython's own documentation text ``pydoc_data.topics``, no
download; a text file or a directory of text files; ``"enwik8"`` or a path to ``enwik8`` /
``enwik8.zip``; ``"hf:<dataset>[:config]"`` streamed from the Hugging Face hub; ``"jigsaw:<path>"``
for the Kaggle zip or its ``train.csv``), the split rule (enwik8: the standard 90M/5M/5M bytes;
everything else: the last 10% of bytes, halved into valid and test), :func:`tokenize_split` and
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
ENWIK8_URL = "http://mattmahoney.net/dc/enwik8.zip"
ENWIK8_SIZE = 100_000_000
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".text", "")
HF_DEFAULT_MAX_BYTES = 50_000_000


@dataclass
class Corpus:
    """A corpus as one byte string with split boundaries ``[0, a) train, [a, b) valid, [b, n) test``."""

    name: str
    data: bytes | memoryview
    bounds: tuple[int, int] = (0, 0)  # (start of valid, start of test)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.data)
        if n == 0:
            raise InputError(f"corpus {self.name!r} is empty")
        if self.bounds == (0, 0):  # default: 90% train, 5% valid, 5% test
            self.bounds = (int(n * 0.90), int(n * 0.95))

    def __len__(self) -> int:
        return len(self.data)

    def split(self, name: str = "train") -> bytes:
        """The raw bytes of one split."""
        a, b = self.bounds
        ranges = {"train": (0, a), "valid": (a, b), "test": (b, len(self.data))}
        if name not in ranges:
            raise InputError(f"unknown split {name!r}; use one of {', '.join(SPLITS)}")
        lo, hi = ranges[name]
        return bytes(self.data[lo:hi])

    def text(self, name: str = "train") -> str:
        return self.split(name).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- opening corpora


def open_corpus(spec: str, *, max_bytes: int | None = None) -> Corpus:
    """Open a corpus by spec (see the module docstring); one clear line when it cannot be used."""
    spec = str(spec)
    if spec == "builtin":
        return _builtin()
    if spec.startswith("hf:"):
        return _hf(spec[3:], max_bytes or HF_DEFAULT_MAX_BYTES)
    if spec.startswith("jigsaw:"):
        return _jigsaw(Path(spec[7:]).expanduser())
    path = Path(spec).expanduser()
    if spec == "enwik8" or path.name in ("enwik8", "enwik8.zip"):
        return _enwik8(path if path.exists() else None)
    if path.is_dir():
        return _text_dir(path)
    if path.is_file():
        return Corpus(path.name, _map_file(path))
    raise InputError(f"corpus {spec!r}: no such file or directory (or use builtin, enwik8, hf:NAME, jigsaw:PATH)")


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
    data = b"\n".join(p.read_bytes() for p in files)
    return Corpus(path.name, data)


def _enwik8(path: Path | None) -> Corpus:
    """enwik8 from a local file / zip, or downloaded once into the attnscope cache."""
    if path is None:
        path = _download_enwik8()
    if path.suffix == ".zip":
        import zipfile

        try:
            with zipfile.ZipFile(path) as zf:
                data = zf.read("enwik8")
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise FormatError(f"{path}: not the enwik8 archive ({exc})") from None
    else:
        data = _map_file(path)
    if len(data) != ENWIK8_SIZE:
        raise FormatError(f"{path}: enwik8 must be {ENWIK8_SIZE} bytes, found {len(data)}")
    return Corpus("enwik8", data, bounds=(90_000_000, 95_000_000))


def _cache_dir() -> Path:
    root = os.environ.get("ATTNSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "attnscope"
    )
    return Path(root)


def _download_enwik8() -> Path:
    target = _cache_dir() / "enwik8.zip"
    if target.is_file():
        return target
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("ATTNSCOPE_OFFLINE") == "1":
        raise OfflineError(f"enwik8 is not cached and downloads are off; put enwik8.zip at {target} or pass its path")
    import urllib.error
    import urllib.request

    from attnscope.tables import atomic_write_bytes

    try:
        with urllib.request.urlopen(ENWIK8_URL, timeout=30) as resp:
            blob = resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise OfflineError(f"cannot download enwik8 from {ENWIK8_URL} ({exc}); pass a local path instead") from None
    atomic_write_bytes(target, blob)
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
    """``<dataset>[:config]`` streamed from the hub (``datasets`` imported lazily), up to ``max_bytes``."""
    name, _, config = spec.partition(":")
    if loader is None:
        try:
            from datasets import load_dataset as loader
        except ImportError:
            raise InputError("hf: corpora need the optional 'datasets' package (pip install 'attnscope[datasets]')") from None
    try:
        ds = loader(name, config or None, split="train", streaming=True)
    except Exception as exc:  # network or name errors from the hub: one line
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "offline" in msg.lower() or "connect" in msg.lower():
            raise OfflineError(f"hf:{spec}: cannot stream from the hub ({msg})") from None
        raise InputError(f"hf:{spec}: cannot open the dataset ({msg})") from None
    parts, total = [], 0
    for row in ds:
        key = next((k for k in HF_TEXT_FIELDS if k in row), None)
        if key is None:
            raise FormatError(f"hf:{spec}: rows have none of the text fields {', '.join(HF_TEXT_FIELDS)}")
        blob = str(row[key]).encode("utf-8")
        parts.append(blob)
        total += len(blob) + 2
        if total >= max_bytes:
            break
    return Corpus(f"hf:{spec}", b"\n\n".join(parts))


# --------------------------------------------------------------------------- tokens and windows


def tokenize_split(corpus: Corpus, tokenizer: "Tokenizer", split: str = "train") -> np.ndarray:
    """Token ids [n] (uint8 / uint16 / int32, as compact as the vocabulary allows) of one split, cached."""
    key = (tokenizer.name, split)
    if key not in corpus._cache:
        corpus._cache[key] = tokenizer.encode_array(corpus.split(split))
    return corpus._cache[key]


def heldout_windows(
    corpus: Corpus, tokenizer: "Tokenizer", seq_len: int, n: int, split: str = "valid"
) -> "torch.Tensor":
    """``n`` non-overlapping windows [n, seq_len] spread evenly over a split (deterministic)."""
    import torch

    ids = tokenize_split(corpus, tokenizer, split)
    fit = len(ids) // seq_len
    if fit < n:
        raise InputError(
            f"the {split} split of {corpus.name!r} holds {len(ids)} tokens: only {fit} windows of {seq_len}, not {n}"
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
