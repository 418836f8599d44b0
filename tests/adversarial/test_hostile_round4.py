"""Hostile round 4 (issue 49): config files bounded, pattern sizes, steps, page escaping, checks before loads."""

from __future__ import annotations

import pytest

from attnscope.errors import ConfigError


def _laughs(tail: str) -> str:
    """A ~400-byte YAML whose aliases, nested nine deep, stand for 9**9 values ("billion laughs")."""
    lines, prev = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"], "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
        prev = name
    return "\n".join(lines) + "\n" + tail


@pytest.mark.parametrize("tail", ["heads:\n  - positions: [*i]\n", "heads:\n  - window: *i\n", "heads: *i\n"])
def test_pattern_yaml_aliases_are_bounded(tmp_path, tail):
    from attnscope.sparse.patterns import load_pattern

    path = tmp_path / "p.yaml"
    path.write_text(_laughs(tail))
    with pytest.raises(ConfigError, match="aliases expand to more than 100,000 values") as info:
        load_pattern(path)
    assert len(str(info.value)) < 300


def test_config_files_are_bounded_in_size_and_self_reference(tmp_path):
    from attnscope.tables import MAX_CONFIG_BYTES, read_mapping

    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (MAX_CONFIG_BYTES + 1) + "\n")
    with pytest.raises(ConfigError, match="a config file is at most"):
        read_mapping(big)
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &a [1, *a]\n")
    with pytest.raises(ConfigError, match="contains itself"):
        read_mapping(loop)


def test_pattern_errors_quote_a_short_excerpt():
    """A value built of shared nested lists (what aliases make) is quoted in a few characters, never expanded."""
    from attnscope.sparse.patterns import HeadPattern

    value: list = [1] * 9
    for _ in range(5):  # 9**6 numbers: a repr of megabytes
        value = [value] * 9
    for kwargs in ({"window": value}, {"positions": [value]}, {"anchors": value}):
        with pytest.raises(ConfigError) as info:
            HeadPattern(**kwargs)
        assert len(str(info.value)) < 200
    with pytest.raises(ConfigError) as info:
        HeadPattern.from_dict(value)
    assert len(str(info.value)) < 300
