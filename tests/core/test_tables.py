"""attnscope.tables: atomic table files by extension, config readers, clear errors."""

from __future__ import annotations


import pandas as pd
import pytest

from attnscope.errors import FormatError, InputError
from attnscope.tables import atomic_write_text, read_table, write_table


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json", ".jsonl"])
def test_table_roundtrip(tmp_path, suffix):
    df = pd.DataFrame({"model": ["a", "b"], "layer": [0, 1], "symmetry": [0.5, float("nan")]})
    p = write_table(df, tmp_path / f"t{suffix}")
    back = read_table(p)
    assert back["model"].tolist() == ["a", "b"]
    assert back["symmetry"].iloc[0] == pytest.approx(0.5) and pd.isna(back["symmetry"].iloc[1])
    assert [x.name for x in tmp_path.iterdir()] == [f"t{suffix}"]  # no temp file left


def test_table_errors(tmp_path):
    with pytest.raises(InputError, match="use one of"):
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.xlsx")
    with pytest.raises(InputError, match="no such"):
        read_table(tmp_path / "missing.csv")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(FormatError, match="cannot read"):
        read_table(tmp_path / "bad.parquet")


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    p = tmp_path / "x.txt"
    atomic_write_text(p, "good")
    import os

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(p, "new")
    assert p.read_text() == "good" and len(list(tmp_path.iterdir())) == 1


def test_atomic_write_gives_ordinary_permissions(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        p = atomic_write_text(tmp_path / "shared.txt", "x")
    finally:
        os.umask(old)
    assert (p.stat().st_mode & 0o777) == 0o644


@pytest.mark.parametrize(
    "name, text",
    [("c.yaml", "a: 1\nb: [x, y]\n"), ("c.toml", 'a = 1\nb = ["x", "y"]\n'), ("c.json", '{"a": 1, "b": ["x", "y"]}')],
)
def test_read_mapping_by_extension(tmp_path, name, text):
    from attnscope.tables import read_mapping

    (tmp_path / name).write_text(text)
    assert read_mapping(tmp_path / name) == {"a": 1, "b": ["x", "y"]}


def test_read_mapping_errors(tmp_path):
    from attnscope.errors import ConfigError
    from attnscope.tables import read_mapping

    with pytest.raises(InputError, match="no such pattern file"):
        read_mapping(tmp_path / "nope.yaml", "pattern file")
    (tmp_path / "bad.toml").write_text("a = = 1")
    with pytest.raises(ConfigError, match="cannot parse config file") as exc:
        read_mapping(tmp_path / "bad.toml")
    assert "\n" not in str(exc.value)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        read_mapping(tmp_path / "list.yaml")
    (tmp_path / "empty.yaml").write_text("")
    assert read_mapping(tmp_path / "empty.yaml") == {}
