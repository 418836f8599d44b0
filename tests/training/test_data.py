"""Corpora, splits, held-out windows, tokenizers and the mlm/clm objectives (local data only)."""

from __future__ import annotations

import sys
import dataclasses
import zipfile

import numpy as np
import pytest
import torch

from attnscope.errors import ConfigError, FormatError, InputError, OfflineError
from attnscope.training import data as D
from attnscope.training.objectives import IGNORE, lm_loss, make_batch, mlm_mask
from attnscope.training.tokenizers import load_tokenizer, parse_train_spec, train_tokenizer


def test_builtin_corpus_splits_cover_everything_once():
    c = D.open_corpus("builtin")
    parts = [c.split(s) for s in D.SPLITS]
    assert sum(map(len, parts)) == len(c) > 400_000
    assert b"".join(parts) == bytes(c.data)
    assert len(parts[1]) == pytest.approx(0.05 * len(c), abs=2)
    assert b"def" in parts[0]


def test_text_file_dir_and_bad_paths(tmp_path):
    (tmp_path / "a.txt").write_text("hello world\n" * 100)
    (tmp_path / "b.md").write_text("second file\n" * 100)
    (tmp_path / "skip.bin").write_bytes(b"\x00" * 10)
    c = D.open_corpus(str(tmp_path))
    assert len(c) == 1201 + 1201  # each file closed by a newline
    f = D.open_corpus(str(tmp_path / "a.txt"))
    assert f.split("train").startswith(b"hello world")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(InputError, match="empty"):
        D.open_corpus(str(tmp_path / "empty.txt"))
    with pytest.raises(InputError, match="no such file"):
        D.open_corpus(str(tmp_path / "nope.txt"))
    (tmp_path / "sub").mkdir()
    with pytest.raises(InputError, match="no text files"):
        D.open_corpus(str(tmp_path / "sub"))
    with pytest.raises(InputError, match="unknown split"):
        c.split("dev")


def per_file_reference(files: list[bytes], split: str) -> bytes:
    """Slow reference: each file (plus its closing newline) cut at 90% / 95% of its own length."""
    out = b""
    for blob in files:
        blob = blob + b"\n"
        n = len(blob)
        a, b = int(n * 0.9), int(n * 0.95)
        out += {"train": blob[:a], "valid": blob[a:b], "test": blob[b:]}[split]
    return out


def test_directory_heldout_comes_from_the_tail_of_every_file(tmp_path):
    # three files of different text and sizes: every one must contribute to valid and test
    files = {"a.txt": b"alpha " * 500, "b.txt": b"beta\n" * 333, "sub/c.md": bytes(range(32, 127)) * 40}
    for name, blob in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(blob)
    c = D.open_corpus(str(tmp_path))
    ordered = [files[k] for k in sorted(files, key=lambda k: str(tmp_path / k))]
    for split in D.SPLITS:
        assert c.split(split) == per_file_reference(ordered, split)
    parts = [c.split(s) for s in D.SPLITS]
    assert sum(map(len, parts)) == len(c)
    for marker in (b"alpha", b"beta", b"0123"):  # held-out text from every file
        assert marker in c.split("valid") and marker in c.split("test") and marker in c.split("train")
    # the old rule (tail of the concatenation) would have put only the last file in valid
    assert len(c.split("valid")) == pytest.approx(0.05 * len(c), abs=len(files))


def test_segments_must_cover_the_data():
    with pytest.raises(InputError, match="segments"):
        D.Corpus("x", b"abcdef", segments=((0, 2), (3, 6)))
    with pytest.raises(InputError, match="segments"):
        D.Corpus("x", b"abcdef", segments=((0, 2), (2, 5)))
    c = D.Corpus("x", b"a" * 100 + b"b" * 100, segments=((0, 100), (100, 200)))
    assert c.split("valid") == b"a" * 5 + b"b" * 5 and c.ranges("test") == [(95, 100), (195, 200)]


def test_enwik8_local_zip_uses_the_standard_split(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "ENWIK8", dataclasses.replace(D.ENWIK8, size=1000))
    blob = bytes(range(256)) * 3 + b"x" * 232
    with zipfile.ZipFile(tmp_path / "enwik8.zip", "w") as zf:
        zf.writestr("enwik8", blob)
    # the real split is 90M/5M/5M of 100M bytes; check the bounds the loader uses on the real size
    c = D._enwik8(tmp_path / "enwik8.zip")
    assert c.bounds == (90_000_000, 95_000_000) and c.name == "enwik8"
    (tmp_path / "enwik8").write_bytes(blob[:999])
    with pytest.raises(FormatError, match="must be 1000 bytes"):
        D.open_corpus(str(tmp_path / "enwik8"))
    (tmp_path / "bad" ).mkdir()
    (tmp_path / "bad" / "enwik8.zip").write_bytes(b"not a zip")
    with pytest.raises(FormatError, match="not the enwik8 archive"):
        D.open_corpus(str(tmp_path / "bad" / "enwik8.zip"))


def test_enwik8_offline_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="enwik8"):
        D.open_corpus("enwik8")


def test_jigsaw_csv_and_zip(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"id": ["a", "b"], "comment_text": ["you are kind", "what a day"], "toxic": [0, 1]})
    df.to_csv(tmp_path / "train.csv", index=False)
    c = D.open_corpus(f"jigsaw:{tmp_path / 'train.csv'}")
    assert bytes(c.data) == b"you are kind\n\nwhat a day"
    with zipfile.ZipFile(tmp_path / "jigsaw.zip", "w") as zf:
        zf.write(tmp_path / "train.csv", "train.csv")
    assert bytes(D.open_corpus(f"jigsaw:{tmp_path / 'jigsaw.zip'}").data) == bytes(c.data)
    pd.DataFrame({"text": ["x"]}).to_csv(tmp_path / "other.csv", index=False)
    with pytest.raises(FormatError, match="comment_text"):
        D.open_corpus(f"jigsaw:{tmp_path / 'other.csv'}")


def test_hf_dataset_streams_up_to_max_bytes_with_a_fake_loader():
    calls = []

    def fake_loader(name, config, split, streaming):
        calls.append((name, config, split, streaming))
        return iter([{"raw_content": "doc %d " % i * 10} for i in range(1000)])

    c = D._hf("togethercomputer/RedPajama-Data-V2:sample", max_bytes=500, loader=fake_loader)
    assert calls == [("togethercomputer/RedPajama-Data-V2", "sample", "train", True)]
    assert 500 <= len(c) < 700 and c.name.startswith("hf:")

    def bad_rows(*a, **k):
        return iter([{"id": 1}])

    with pytest.raises(FormatError, match="text fields"):
        D._hf("x", 100, loader=bad_rows)


def test_heldout_windows_are_deterministic_and_disjoint():
    c = D.open_corpus("builtin")
    tok = load_tokenizer("bytes")
    a = D.heldout_windows(c, tok, 64, 20)
    b = D.heldout_windows(c, tok, 64, 20)
    assert a.shape == (20, 64) and a.dtype == torch.long
    assert torch.equal(a, b)
    valid = np.frombuffer(c.split("valid"), dtype=np.uint8)
    starts = []
    for row in a.numpy():  # each window is a contiguous slice of the valid split
        s = next(i for i in range(len(valid) - 63) if np.array_equal(valid[i : i + 64], row))
        starts.append(s)
    starts = sorted(starts)
    assert all(s2 - s1 >= 64 for s1, s2 in zip(starts, starts[1:]))
    with pytest.raises(InputError, match="only"):
        D.heldout_windows(c, tok, 4096, 100)


def test_sample_windows_follow_the_generator():
    ids = np.arange(1000, dtype=np.int32)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a, b = D.sample_windows(ids, 4, 10, g1), D.sample_windows(ids, 4, 10, g2)
    assert torch.equal(a, b)
    assert torch.all(a[:, 1:] - a[:, :-1] == 1)


def test_tokenizers_bytes_hf_dir_vocab_and_trained(minilm_dir, tmp_path):
    b = load_tokenizer("bytes")
    assert (b.vocab_size, b.mask_id, b.encode("hé")) == (256, None, [104, 195, 169])
    hf = load_tokenizer(minilm_dir)
    assert hf.vocab_size == 30522 and hf.mask_id == 103
    ids = hf.encode("Hello world")
    assert ids == [7592, 2088]  # no [CLS]/[SEP], no padding
    long = "the quick brown fox. " * 300
    assert hf.encode_array(long).tolist() == hf.encode(long)  # chunked fast path == plain path
    vocab = load_tokenizer(minilm_dir / "vocab.txt")
    assert vocab.encode("Hello world") == ids and vocab.mask_id == 103
    texts = [D.open_corpus("builtin").text("train")[:200_000]]
    wp = train_tokenizer(texts, "wordpiece", 500)
    assert wp.vocab_size <= 500 and wp.mask_id is not None
    assert len(wp.encode("the function returns")) < len("the function returns")
    bpe = train_tokenizer(texts, "bpe", 400)
    assert bpe.mask_id is not None and bpe.vocab_size <= 400
    bpe.save(tmp_path)
    assert load_tokenizer(tmp_path / "tokenizer.json").encode("abc def") == bpe.encode("abc def")
    assert parse_train_spec("wordpiece:300") == ("wordpiece", 300) and parse_train_spec("bytes") is None
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(FormatError, match="not a readable tokenizer"):
        load_tokenizer(tmp_path / "bad.json")
    with pytest.raises(InputError, match="tokenizer"):
        load_tokenizer(tmp_path / "missing.json")


def test_mlm_masking_statistics_and_loss_positions():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (64, 256), generator=g)
    inputs, labels = mlm_mask(ids, mask_id=100, n_random=100, generator=g)
    sel = labels != IGNORE
    assert sel.float().mean().item() == pytest.approx(0.15, abs=0.01)
    assert torch.equal(labels[sel], ids[sel])
    masked = (inputs == 100) & sel
    kept = (inputs == ids) & sel
    assert masked.sum().item() / sel.sum().item() == pytest.approx(0.8, abs=0.02)
    # 10% kept on purpose plus random replacements that happen to draw the same token (~1%)
    assert kept.sum().item() / sel.sum().item() == pytest.approx(0.1 + 0.1 / 95, abs=0.02)
    assert torch.equal(inputs[~sel], ids[~sel])  # unselected positions untouched


def test_clm_batch_shifts_and_loss_ignores_unlabelled():
    w = torch.arange(12).view(2, 6)
    x, y = make_batch("clm", w, None, 0, torch.Generator())
    assert torch.equal(x, w[:, :-1]) and torch.equal(y, w[:, 1:])
    logits = torch.randn(2, 5, 20)
    labels = torch.full((2, 5), IGNORE)
    labels[0, 2] = 7
    expected = -torch.log_softmax(logits[0, 2], -1)[7]
    torch.testing.assert_close(lm_loss(logits, labels), expected)
    with pytest.raises(ConfigError, match="mask token"):
        make_batch("mlm", w, None, 10, torch.Generator())


def test_hf_corpus_without_datasets_is_one_line(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_datasets(name, *a, **k):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(InputError, match="optional 'datasets' package"):
        D.open_corpus("hf:wikimedia/wikipedia:20231101.en")


@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_model_loss_equals_full_logits_loss_and_gradients(objective):
    from attnscope.training.model import ModelConfig, Transformer
    from attnscope.training.objectives import model_loss

    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=1, n_heads=2, d_model=16, d_ff=32, vocab_size=40, max_seq_len=16,
                                    dropout=0.0, causal=objective == "clm"))
    g = torch.Generator().manual_seed(1)
    w = torch.randint(0, 39, (3, 13), generator=g)
    x, y = make_batch(objective, w, 39, 39, g)
    fast = model_loss(model, x, y)
    (gf,) = torch.autograd.grad(fast, model.tok_emb.weight)
    full = lm_loss(model(x), y)
    (gs,) = torch.autograd.grad(full, model.tok_emb.weight)
    torch.testing.assert_close(fast, full)
    torch.testing.assert_close(gf, gs)
    if objective == "mlm":
        sel = y != IGNORE
        assert model(x, select=sel).shape == (int(sel.sum()), 40)


def test_hf_corpus_through_open_corpus_with_a_fake_datasets_module(monkeypatch):
    import types

    seen = {}

    def load_dataset(name, config, split, streaming):
        seen.update(name=name, config=config, split=split, streaming=streaming)
        return iter([{"text": "wiki article %d. " % i * 20} for i in range(50)])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    c = D.open_corpus("hf:wikimedia/wikipedia:20231101.en", max_bytes=2000)
    assert seen == {"name": "wikimedia/wikipedia", "config": "20231101.en", "split": "train", "streaming": True}
    assert 2000 <= len(c) < 2700 and c.split("valid")
