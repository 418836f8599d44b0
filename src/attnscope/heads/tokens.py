"""Tokens as people read them: the text each token id stands for, and a label with its whitespace visible.

A tokenizer's vocabulary spells its pieces in its own code: byte-level BPE (GPT-2, SmolLM2) maps every byte to
a printable character (``Ġ`` a space, ``Ċ`` a newline, ``Ã©`` the two bytes of ``é``); SentencePiece marks a
word start with ``▁`` and spells bytes it has no piece for as ``<0x0A>``; WordPiece marks a word's continuation
with ``##``; a byte tokenizer's ids are the bytes themselves. :func:`token_texts` undoes each code, so the
pieces of a window joined give back its text (a character split over tokens is shown on the token that
completes it; the tokens before it show their bytes as ``\\xNN``), and :func:`visible` makes whitespace and
control characters visible in a label (``·`` a space, ``↵`` a newline, ``⇥`` a tab).

Special tokens (``[CLS]``, ``<s>``, ``<|endoftext|>``) keep their names. The kind of a tokenizer is read from
its decoder (:func:`tokenizer_kind`); one without a known decoder falls back to the id's piece as spelled.
Pure functions of (tokenizer, ids): nothing here is HTML (escaping belongs to :mod:`attnscope.pages`).
"""

from __future__ import annotations

import codecs
import json
import unicodedata
from functools import lru_cache
from typing import Any, Iterable, Sequence

#: the kinds :func:`tokenizer_kind` tells apart
KINDS = ("bytes", "byte_bpe", "sentencepiece", "wordpiece", "plain")
#: how :func:`visible` shows whitespace and control characters
VISIBLE = {" ": "\u00b7", "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"}
#: WordPiece: pieces written without a space before them (as the tokenizer's own ``cleanup`` does)
_NO_SPACE_BEFORE = set(".,!?;:%)]}'\"") | {"n't", "'s", "'m", "'re", "'ve", "'ll", "'d"}


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable character -> byte table (the inverse of its ``bytes_to_unicode``)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1), *range(ord("\u00ae"), ord("\u00ff") + 1)]
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def _inner(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind a training-lab HFTokenizer, a transformers fast tokenizer or itself."""
    for attr in ("tok", "backend_tokenizer"):
        inner = getattr(tokenizer, attr, None)
        if inner is not None:
            return inner
    return tokenizer if hasattr(tokenizer, "id_to_token") else None


def _decoder_types(inner: Any) -> list[dict[str, Any]]:
    dec = getattr(inner, "decoder", None)
    if dec is None:
        return []
    try:
        state = json.loads(dec.__getstate__())
    except Exception:  # noqa: BLE001 -- an exotic decoder: read as plain
        return []
    return state.get("decoders", [state]) if state.get("type") == "Sequence" else [state]


def tokenizer_kind(tokenizer: Any) -> str:
    """One of :data:`KINDS`: ``bytes`` (ids are bytes), ``byte_bpe`` (GPT-2's byte alphabet),
    ``sentencepiece`` (``▁`` and ``<0xNN>`` byte fallback), ``wordpiece`` (``##``) or ``plain``."""
    if getattr(tokenizer, "name", None) == "bytes" and getattr(tokenizer, "vocab_size", None) == 256:
        return "bytes"
    inner = _inner(tokenizer)
    if inner is None:
        raise TypeError(f"tokenizer must be a tokenizers.Tokenizer or wrap one, not {type(tokenizer).__name__}")
    steps = _decoder_types(inner)
    types = {s.get("type") for s in steps}
    if "ByteLevel" in types:
        return "byte_bpe"
    if "WordPiece" in types:
        return "wordpiece"
    if "Metaspace" in types or "ByteFallback" in types or any(
        s.get("type") == "Replace" and s.get("pattern", {}).get("String") == "\u2581" for s in steps
    ):
        return "sentencepiece"
    return "plain"


def _special_ids(inner: Any) -> set[int]:
    """Ids of special added tokens, byte pieces ``<0xNN>`` left out (a vocabulary may add them as special)."""
    try:
        added = inner.get_added_tokens_decoder().items()
    except AttributeError:
        return set()
    return {int(i) for i, t in added if getattr(t, "special", False) and _byte_piece(str(t.content)) is None}


def _byte_piece(piece: str) -> int | None:
    """The byte a SentencePiece byte-fallback piece ``<0xNN>`` spells, None for any other piece."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return int(piece[3:5], 16)
        except ValueError:
            return None
    return None


def special_mask(tokenizer: Any, ids: Iterable[int]) -> list[bool]:
    """True where an id is one of the tokenizer's special tokens (``[CLS]``, ``<s>``, ...)."""
    if tokenizer_kind(tokenizer) == "bytes":
        return [False for _ in ids]
    special = _special_ids(_inner(tokenizer))
    return [int(i) in special for i in ids]


def _piece_bytes(kind: str, piece: str) -> bytes:
    """The bytes one (non-special) piece stands for."""
    if kind == "byte_bpe":
        table = _byte_decoder()
        return bytes(table[c] for c in piece) if all(c in table for c in piece) else piece.encode()
    if kind == "sentencepiece":
        byte = _byte_piece(piece)
        return bytes([byte]) if byte is not None else piece.replace("\u2581", " ").encode()
    return piece.encode()


def token_texts(tokenizer: Any, ids: Iterable[int]) -> list[str]:
    """The text each of ``ids`` stands for in the window (one string per id, in order).

    Joined, they give the window's text (WordPiece: with a space before each word, none before a
    continuation ``##`` piece or punctuation). Bytes that do not yet complete a UTF-8 character are shown
    as ``\\xNN`` on their token; the character appears on the token that completes it. Special tokens keep
    their names (``[CLS]``). Ids outside the vocabulary raise a ValueError naming the id.
    """
    ids = [int(i) for i in ids]
    kind = tokenizer_kind(tokenizer)
    if kind == "bytes":
        bad = [i for i in ids if not 0 <= i < 256]
        if bad:
            raise ValueError(f"token id {bad[0]} is not a byte (0..255)")
        return _utf8_pieces([bytes([i]) for i in ids])
    inner = _inner(tokenizer)
    special = _special_ids(inner)
    pieces = []
    for i in ids:
        p = inner.id_to_token(i)
        if p is None:
            raise ValueError(f"token id {i} is not in the tokenizer's vocabulary of {inner.get_vocab_size()}")
        pieces.append(p)
    if kind == "wordpiece":
        out = []
        for n, (i, p) in enumerate(zip(ids, pieces)):
            if i in special or p.startswith("##"):
                out.append(p if i in special else p[2:])
            else:
                first = n == 0 or ids[n - 1] in special
                out.append(p if first or p in _NO_SPACE_BEFORE else " " + p)
        return out
    parts: list[bytes | str] = [p if i in special else _piece_bytes(kind, p) for i, p in zip(ids, pieces)]
    return _utf8_pieces(parts)


def _utf8_pieces(parts: Sequence[bytes | str]) -> list[str]:
    """Bytes per token -> text per token: each character on the token holding its last byte; a token whose
    bytes end mid-character shows the bytes it holds of it as ``\\xNN``. ``str`` parts (special tokens) pass."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out, pending = [], b""
    for part in parts:
        if isinstance(part, str):  # a special token: bytes left mid-character were shown as \xNN already
            out.append(part)
            dec.reset()
            pending = b""
            continue
        text = dec.decode(part)
        held = dec.getstate()[0]  # bytes waiting for the rest of their character
        mine = held if text else held[len(pending):]  # of those, the ones this token brought
        out.append(text + "".join(f"\\x{b:02x}" for b in mine))
        pending = held
    return out


def _hidden(c: str) -> bool:
    """Whether ``c`` shows as nothing or changes how the text around it shows: a control character (C0, DEL, C1),
    a format character (bidirectional overrides and isolates, zero-width spaces and joiners, the BOM), a line or
    paragraph separator, or a lone surrogate (no character at all)."""
    o = ord(c)
    return o < 32 or 127 <= o < 160 or unicodedata.category(c) in ("Cf", "Cs", "Zl", "Zp")


def _escaped(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 256 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def visible(text: str) -> str:
    """``text`` with whitespace made visible (:data:`VISIBLE`) and every character that shows as nothing or changes
    the text after it (controls, right-to-left overrides, zero-width characters, lone surrogates) written as its
    escape: ``\\xNN``, ``\\u202e``."""
    return "".join(VISIBLE.get(c) or (_escaped(c) if _hidden(c) else c) for c in text)


def readable(text: str) -> str:
    """``text`` as it reads in running text: spaces, tabs and newlines kept, every other character :func:`visible`
    escapes written as its escape (a token can never reverse or hide the text after it)."""
    return "".join(c if c in " \t\n" else _escaped(c) if _hidden(c) else c for c in text)


def label(value: Any) -> str:
    """A token's label from any value a table may hold: :func:`visible` of its text, ``∅`` for None or no text."""
    if value is None or (isinstance(value, float) and value != value):
        return "\u2205"
    return visible(value if isinstance(value, str) else str(value)) or "\u2205"


def token_labels(tokenizer: Any, ids: Iterable[int]) -> list[str]:
    """:func:`visible` of :func:`token_texts`: one readable label per id (never empty: ``∅`` for no text)."""
    return [visible(t) or "\u2205" for t in token_texts(tokenizer, ids)]
