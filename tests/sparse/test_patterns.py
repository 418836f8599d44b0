"""Pattern specs: byte-sparse-8h facts, one polarity, loading from presets/dicts/files, clear errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import AttnscopeError
from attnscope.sparse import HeadPattern, Pattern, dense_mask, load_pattern
from attnscope.sparse.patterns import BYTE_SPARSE_ANCHORS


def _slow_allowed(hp: HeadPattern, L: int, causal: bool) -> np.ndarray:
    m = np.zeros((L, L), dtype=bool)
    anchors = {math.floor(r * (L - 1)) for r in hp.anchors}
    for i in range(L):
        for j in range(L):
            ok = hp.dense
            ok |= hp.window is not None and abs(i - j) <= hp.window
            ok |= bool(hp.stride) and j % hp.stride == 0
            ok |= j in anchors or j in hp.positions
            m[i, j] = ok and (j <= i or not causal)
    return m


def test_byte_sparse_8h_table_and_density():
    pat = load_pattern("byte-sparse-8h")
    assert pat.n_heads == 8
    assert [hp.window for hp in pat.heads[:6]] == [8, 16, 16, 32, 32, 32]
    assert [hp.stride for hp in pat.heads[3:]] == [8, 8, 8, 16, 16]
    L = 1024
    m = pat.mask(L, causal=True)
    # the reference says "about 9.7%" of causal entries are kept at L = 1024
    assert 0.09 < pat.density(L, True) < 0.10
    # anchors are length-dependent: floor(r (L-1))
    assert set(pat.heads[6].shared_keys(L)) >= {0, 102, 204, 306, 390, 511, 632, 716, 818, 920, 1023}
    # heads 6-7 cannot see themselves on most rows; heads 0-5 always can
    diag = np.diagonal(m, axis1=1, axis2=2)
    assert diag[:6].all()
    assert diag[6].mean() < 0.1
    # polarity: True = may attend, and never the future in a causal mask
    assert not np.triu(m, 1).any()


@settings(max_examples=40, deadline=None)
@given(
    L=st.integers(1, 24),
    window=st.one_of(st.none(), st.integers(0, 6)),
    stride=st.one_of(st.none(), st.integers(1, 7)),
    anchors=st.lists(st.floats(0, 1), max_size=3),
    positions=st.lists(st.integers(0, 30), max_size=3),
    causal=st.booleans(),
)
def test_mask_matches_slow_reference(L, window, stride, anchors, positions, causal):
    if window is None and not stride and not anchors and not positions:
        with pytest.raises(AttnscopeError):
            HeadPattern(window=window, stride=stride, anchors=tuple(anchors), positions=tuple(positions))
        return
    hp = HeadPattern(window=window, stride=stride, anchors=tuple(anchors), positions=tuple(positions))
    np.testing.assert_array_equal(hp.allowed(L, causal), _slow_allowed(hp, L, causal))


def test_roundtrip_files(tmp_path):
    pat = load_pattern("byte-sparse-8h")
    for name in ("p.yaml", "p.json"):
        path = pat.save(tmp_path / name)
        back = load_pattern(str(path), n_heads=8)
        assert back.heads == pat.heads
        assert back.heads[6].anchors == BYTE_SPARSE_ANCHORS


def test_presets_and_all():
    assert load_pattern("local:4", n_heads=3).heads == (HeadPattern(window=4),) * 3
    assert load_pattern("strided:4:8", n_heads=2).heads[1] == HeadPattern(window=4, stride=8)
    assert load_pattern({"all": {"dense": True}}, n_heads=2).mask(5, True).sum() == 2 * 15
    t = dense_mask("byte-sparse-8h", 16, causal=False)
    assert str(t.dtype) == "torch.bool"
    assert tuple(t.shape) == (8, 16, 16)


@pytest.mark.parametrize(
    "spec, kw",
    [
        ("byte-sparse-8h", {"n_heads": 4}),
        ("nonsense-pattern", {}),
        ("local:4", {}),
        ("local:x", {"n_heads": 2}),
        ({"heads": [{"window": -1}]}, {}),
        ({"heads": [{"windw": 3}]}, {}),
        ({"foo": 1}, {}),
        ({"heads": [{}]}, {}),
        ({"heads": [{"anchors": [1.5]}]}, {}),
        # wrong types from a hand-written YAML/JSON file: each a ConfigError naming the key, never a raw
        # ValueError / TypeError, and never a silently different pattern
        ({"all": {"positions": ["a"]}}, {"n_heads": 1}),
        ({"all": {"positions": 3}}, {"n_heads": 1}),
        ({"all": {"positions": [1.5]}}, {"n_heads": 1}),
        ({"all": {"anchors": "0.5"}}, {"n_heads": 1}),
        ({"all": {"window": float("nan")}}, {"n_heads": 1}),
        ({"all": {"window": float("inf")}}, {"n_heads": 1}),
        ({"all": {"window": True}}, {"n_heads": 1}),
        ({"all": {"stride": "4"}}, {"n_heads": 1}),
        ({"all": {"dense": "no"}}, {"n_heads": 1}),
    ],
)
def test_bad_specs_are_one_line_errors(spec, kw):
    with pytest.raises(AttnscopeError) as info:
        load_pattern(spec, **kw)
    assert "\n" not in str(info.value)
    head = spec.get("all", {}) if isinstance(spec, dict) else {}
    assert all(key in str(info.value) for key in head)  # the message names the key at fault


def test_integral_numbers_are_integers():
    """window: 8.0 in a YAML file is the window 8 (stored as an int, described as 'local(8)')."""
    hp = load_pattern({"all": {"window": 8.0, "stride": 4.0, "positions": [2.0]}}, n_heads=1).heads[0]
    assert (hp.window, hp.stride, hp.positions) == (8, 4, (2,))
    assert all(type(x) is int for x in (hp.window, hp.stride, *hp.positions))
    assert hp.describe() == "local(8) | stride(4) | key 2"
    assert hp == HeadPattern(window=8, stride=4, positions=(2,))


def test_corrupt_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(AttnscopeError):
        load_pattern(str(p))
    p2 = tmp_path / "list.yaml"
    p2.write_text("- 1\n- 2\n")
    with pytest.raises(AttnscopeError):
        load_pattern(str(p2))


def test_pattern_is_hashable_and_equal():
    assert load_pattern("byte-sparse-8h") == load_pattern("byte-sparse-8h")
    assert len({load_pattern("byte-sparse-8h"), load_pattern("byte-sparse-8h")}) == 1
    assert isinstance(load_pattern([{"window": 2}]), Pattern)


@pytest.mark.parametrize("L", [0, -3, 2.5, True])
def test_a_bad_length_is_one_sentence_naming_it(L):
    """dense_mask(pattern, 0) was an IndexError (an anchor at floor(r (L - 1)) = -1), density a ZeroDivisionError."""
    pat = load_pattern("byte-sparse-8h")
    for call in (lambda: dense_mask(pat, L, True), lambda: pat.density(L, True)):
        with pytest.raises(AttnscopeError, match="sequence length L must be an integer >= 1"):
            call()
