"""Hypothesis strategies shared by the sparse tests: random head patterns over small lengths."""

from hypothesis import strategies as st

from attnscope.sparse import HeadPattern

head_patterns = st.fixed_dictionaries({
    "window": st.one_of(st.none(), st.integers(0, 20)),
    "stride": st.one_of(st.none(), st.integers(1, 12)),
    "anchors": st.lists(st.floats(0, 1), max_size=3).map(tuple),
    "positions": st.lists(st.integers(0, 40), max_size=3).map(tuple),
    "dense": st.booleans(),
}).filter(lambda d: d["dense"] or d["window"] is not None or d["stride"] or d["anchors"] or d["positions"]).map(
    lambda d: HeadPattern(**d))
