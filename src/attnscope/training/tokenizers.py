"""Tokenizers for the training lab: raw bytes, any Hugging Face tokenizer, or one trained on a corpus.

Owns :func:`load_tokenizer` (``"bytes"``, a ``tokenizer.json``, or a Hugging Face tokenizer
directory: its ``tokenizer.json`` or, failing that, a WordPiece ``vocab.txt``) and
:func:`train_tokenizer` (a WordPiece or BPE vocabulary learned from a corpus with the ``tokenizers``
library). Every tokenizer has ``encode(str | bytes) -> list[int]`` (no special tokens added),
``encode_array`` (a fast, compact numpy path for whole splits), ``vocab_size``, ``mask_id`` (None for
bytes) and ``name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from attnscope.errors import FormatError, InputError

MASK_TOKENS = ("[MASK]", "<mask>", "<MASK>")
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255 (no special tokens)."""

    name = "bytes"
    vocab_size = 256
    mask_id = None

    def encode(self, text: str | bytes) -> list[int]:
        return list(_as_bytes(text))

    def encode_array(self, text: str | bytes) -> np.ndarray:
        """uint8 ids (a 90 MB enwik8 split stays 90 MB in memory; batches are widened when drawn)."""
        return np.frombuffer(_as_bytes(text), dtype=np.uint8).copy()

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def save(self, directory: str | Path) -> None:  # nothing to save: the name says it all
        return None


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` (fast Hugging Face tokenizer) with the training-lab interface."""

    def __init__(self, tok, name: str) -> None:
        tok.no_padding()  # shipped tokenizer.json files often pad/truncate to a fixed length
        tok.no_truncation()
        self.tok = tok
        self.name = name
        self.vocab_size = int(tok.get_vocab_size(with_added_tokens=True))
        ids = [tok.token_to_id(t) for t in MASK_TOKENS]
        self.mask_id = next((i for i in ids if i is not None), None)

    def encode(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def encode_array(self, text: str | bytes, chunk_chars: int = 1 << 16) -> np.ndarray:
        """Encode a long text in line-aligned chunks (batched, multi-threaded in ``tokenizers``)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        chunks, start = [], 0
        while start < len(text):
            end = min(len(text), start + chunk_chars)
            if end < len(text):
                nl = text.rfind("\n", start, end)
                end = nl + 1 if nl > start else end
            chunks.append(text[start:end])
            start = end
        dtype = np.uint16 if self.vocab_size <= 1 << 16 else np.int32  # compact: ids are widened per batch
        out = self.tok.encode_batch(chunks, add_special_tokens=False)
        arrays = [np.asarray(e.ids, dtype=dtype) for e in out]
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode([int(i) for i in ids])

    def save(self, directory: str | Path) -> None:
        from attnscope.tables import atomic_write_text

        atomic_write_text(Path(directory) / "tokenizer.json", self.tok.to_str())


Tokenizer = ByteTokenizer | HFTokenizer


def _as_bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def load_tokenizer(spec: str | Path) -> Tokenizer:
    """``"bytes"``, a ``tokenizer.json`` file, or a directory holding ``tokenizer.json`` / ``vocab.txt``."""
    from tokenizers import Tokenizer as _Tok

    spec_s = str(spec)
    if spec_s == "bytes":
        return ByteTokenizer()
    path = Path(spec_s).expanduser()
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        elif (path / "vocab.txt").is_file():
            return _wordpiece_from_vocab(path / "vocab.txt")
        else:
            raise InputError(f"{spec_s}: directory has neither tokenizer.json nor vocab.txt")
    if not path.is_file():
        raise InputError(f"tokenizer {spec_s!r}: use 'bytes', a tokenizer.json or a tokenizer directory")
    if path.name == "vocab.txt":
        return _wordpiece_from_vocab(path)
    try:
        tok = _Tok.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception subclasses
        raise FormatError(f"{path}: not a readable tokenizer.json ({str(exc).splitlines()[0]})") from None
    return HFTokenizer(tok, str(path))


def _wordpiece_from_vocab(vocab: Path) -> HFTokenizer:
    from tokenizers import Tokenizer as _Tok
    from tokenizers import models, normalizers, pre_tokenizers

    try:
        tok = _Tok(models.WordPiece.from_file(str(vocab), unk_token="[UNK]"))
    except Exception as exc:
        raise FormatError(f"{vocab}: not a readable WordPiece vocabulary ({exc})") from None
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return HFTokenizer(tok, str(vocab))


def train_tokenizer(texts: Iterable[str], kind: str = "wordpiece", vocab_size: int = 8000) -> HFTokenizer:
    """Learn a WordPiece (BERT-style, lowercase) or byte-level BPE vocabulary from ``texts``."""
    from tokenizers import Tokenizer as _Tok
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    if kind == "wordpiece":
        tok = _Tok(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL)
    elif kind == "bpe":
        tok = _Tok(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<pad>", "<mask>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        raise InputError(f"unknown tokenizer kind {kind!r}; use wordpiece or bpe")
    tok.train_from_iterator(texts, trainer=trainer)
    return HFTokenizer(tok, f"{kind}:{vocab_size}")


def parse_train_spec(spec: str) -> tuple[str, int] | None:
    """``"wordpiece:8000"`` / ``"bpe:4000"`` -> (kind, vocab size); None for other specs."""
    kind, _, n = str(spec).partition(":")
    if kind not in ("wordpiece", "bpe"):
        return None
    try:
        size = int(n) if n else 8000
    except ValueError:
        raise InputError(f"tokenizer {spec!r}: the vocabulary size after ':' must be an integer") from None
    if size < 64:
        raise InputError(f"tokenizer {spec!r}: vocabulary size must be at least 64")
    return kind, size
