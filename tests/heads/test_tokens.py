"""Tokens as people read them: every tokenizer kind decoded to its text, whitespace made visible."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.heads.tokens import special_mask, token_labels, token_texts, tokenizer_kind, visible
from attnscope.training.tokenizers import ByteTokenizer, HFTokenizer, load_tokenizer

tokenizers = pytest.importorskip("tokenizers")

CORPUS = ["Hello world, the café is open.\n  Indented line\tand a tab.", "def f(x):\n    return x + 1  # <script>",
          "naïve résumé 東京 ✓ emoji 🙂 and </div> tags", "the the the quick brown fox jumps over the lazy dog"] * 20
#: text drawn by hypothesis: no backslash (the \xNN marks of a split character are the one thing added)
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\\\r\x00"), max_size=60)


def _strip_marks(texts: list[str]) -> str:
    return re.sub(r"(\\x[0-9a-f]{2})+", "", "".join(texts))


@pytest.fixture(scope="module")
def byte_bpe() -> HFTokenizer:
    """GPT-2 style byte-level BPE, trained here offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return HFTokenizer(tok, "byte-bpe")


@pytest.fixture(scope="module")
def sentencepiece() -> HFTokenizer:
    """A llama-style SentencePiece BPE (``▁`` word starts, ``<0xNN>`` byte fallback), built here offline."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)]]
    tok.train_from_iterator([c.replace("東京", "").replace("\n", " ") for c in CORPUS],
                            trainers.BpeTrainer(vocab_size=400, special_tokens=specials))
    for t in ("<unk>", "<s>", "</s>"):
        tok.add_special_tokens([tokenizers.AddedToken(t, special=True)])
    return HFTokenizer(tok, "sp-bpe")


def test_kinds_are_told_apart(byte_bpe, sentencepiece, minilm_dir):
    assert tokenizer_kind(ByteTokenizer()) == "bytes"
    assert tokenizer_kind(byte_bpe) == "byte_bpe"
    assert tokenizer_kind(sentencepiece) == "sentencepiece"
    assert tokenizer_kind(load_tokenizer(minilm_dir)) == "wordpiece"


def test_byte_bpe_pieces_read_as_text(byte_bpe):
    text = "Hello world,\n  café"
    ids = byte_bpe.encode(text)
    pieces = [byte_bpe.tok.id_to_token(i) for i in ids]
    assert any("\u0120" in p or "\u010a" in p for p in pieces)  # the code this module undoes is really there
    texts = token_texts(byte_bpe, ids)
    assert "".join(texts) == text == byte_bpe.decode(ids)
    assert not any("\u0120" in t or "\u010a" in t for t in texts)
    labels = token_labels(byte_bpe, ids)
    assert "\u21b5" in "".join(labels) and "\u00b7" in "".join(labels)  # newline and spaces visible


def test_sentencepiece_pieces_and_byte_fallback(sentencepiece):
    text = "Hello world\n東"  # 東 is not in the vocabulary: three <0xNN> byte pieces
    ids = sentencepiece.encode(text)
    pieces = [sentencepiece.tok.id_to_token(i) for i in ids]
    assert "<0x0A>" in pieces and sum(p.startswith("<0x") for p in pieces) >= 4
    texts = token_texts(sentencepiece, ids)
    assert "".join(texts).startswith(" Hello world\n")  # the word-start mark of the first word is a space
    assert texts[-1] == "東" and texts[-3:-1] == ["\\xe6", "\\x9d"]  # the split character: bytes, then the whole
    assert _strip_marks(texts) == " " + text


def test_wordpiece_reads_as_words(minilm_dir):
    tok = load_tokenizer(minilm_dir)
    ids = [tok.tok.token_to_id("[CLS]"), *tok.encode("Unaffable tokens, here."), tok.tok.token_to_id("[SEP]")]
    pieces = [tok.tok.id_to_token(i) for i in ids]
    assert any(p.startswith("##") for p in pieces)
    texts = token_texts(tok, ids)
    assert "".join(texts) == "[CLS]unaffable tokens, here.[SEP]"
    assert special_mask(tok, ids) == [True] + [False] * (len(ids) - 2) + [True]


def test_bytes_split_characters_show_their_bytes():
    tok = ByteTokenizer()
    texts = token_texts(tok, tok.encode("aé\n"))
    assert texts == ["a", "\\xc3", "é", "\n"]
    assert token_labels(tok, tok.encode(" \t")) == ["\u00b7", "\u21e5"]


def test_special_tokens_keep_their_names(byte_bpe, sentencepiece):
    eot = byte_bpe.tok.token_to_id("<|endoftext|>")
    assert token_texts(byte_bpe, [eot, *byte_bpe.encode(" the")]) == ["<|endoftext|>", " the"]
    s = sentencepiece.tok.token_to_id("<s>")
    assert token_texts(sentencepiece, [s])[0] == "<s>" and special_mask(sentencepiece, [s]) == [True]


def test_bad_ids_name_the_id(byte_bpe):
    with pytest.raises(ValueError, match="token id 99999"):
        token_texts(byte_bpe, [99999])
    with pytest.raises(ValueError, match="token id 300"):
        token_texts(ByteTokenizer(), [300])


def test_visible_marks_whitespace_and_controls():
    assert visible("a b\n\tc\x07") == "a\u00b7b\u21b5\u21e5c\\x07"
    assert visible("<script>") == "<script>"  # escaping is the page's job, not this one's


@settings(max_examples=60, deadline=None)
@given(text=TEXT)
def test_byte_level_texts_join_to_the_text(byte_bpe, text):
    for tok in (byte_bpe, ByteTokenizer()):
        ids = tok.encode(text)
        texts = token_texts(tok, ids)
        assert len(texts) == len(ids)
        assert _strip_marks(texts) == text


@settings(max_examples=60, deadline=None)
@given(text=TEXT)
def test_sentencepiece_texts_join_to_the_text(sentencepiece, text):
    ids = sentencepiece.encode(text)
    if not ids:
        return
    assert _strip_marks(token_texts(sentencepiece, ids)) == " " + text
