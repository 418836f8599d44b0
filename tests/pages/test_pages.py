"""The pages room: escaping, JSON embedded so that no string closes its element, the page frame."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.pages import document, esc, json_script, number, script, style


def _embedded(html: str, element_id: str) -> str:
    m = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert m, html[:200]
    return m.group(1)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_json_script_round_trips_any_text_and_never_closes_early(text):
    html = json_script({"t": text, "l": [text, "</script>"]}, "d")
    body = _embedded(html, "d")  # the first </script> is the element's own end
    assert json.loads(body) == {"t": text, "l": [text, "</script>"]}
    assert "</" not in body and "<!--" not in body


def test_esc_keeps_markup_as_text():
    assert esc('<script>alert("x")</script></div>') == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;/div&gt;"
    assert esc("a'b&c") == "a&#x27;b&amp;c"


def test_inline_elements_refuse_their_own_end_tag():
    assert script("let a = 1;") == "<script>let a = 1;</script>"
    with pytest.raises(ValueError, match="</script"):
        script("x = '</SCRIPT>'")
    with pytest.raises(ValueError, match="</style"):
        style("a{} </style>")


def test_document_escapes_title_heading_subtitle():
    page = document("t <b>", "<p>body</p>", css="p{}", subtitle="/path/<x>")
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert "<title>t &lt;b&gt;</title>" in page and "<h1>t &lt;b&gt;</h1>" in page
    assert '<p class="note">/path/&lt;x&gt;</p>' in page and "<p>body</p>" in page and "p{}" in page
    assert "http" not in page  # nothing fetched


def test_number_makes_values_json_safe():
    import numpy as np

    assert number(float("nan")) is None and number(np.float32(np.inf)) is None
    assert number(np.int64(3)) == 3 and type(number(np.int64(3))) is int and number("x") == "x"
    with pytest.raises(ValueError):
        json_script({"v": float("nan")}, "d")  # NaN never travels: pass through number() first


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                     max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(_JSON, st.integers(0, 4))
def test_json_parts_join_to_the_data_at_every_depth(data, depth):
    """Pieces joined are one JSON text of the data, escaped as json_script's (a '<' only ever inside a string, and
    every string whole in one piece), whatever depth the pieces are cut at."""
    from attnscope.pages import json_parts

    parts = list(json_parts({"d": data, "t": "</script><!--"}, depth))
    text = "".join(parts)
    assert json.loads(text) == {"d": data, "t": "</script><!--"}
    assert "</" not in text and "<!--" not in text
    assert _embedded(json_script({"d": data, "t": "</script><!--"}, "x"), "x") == text


def test_computed_values_are_made_one_at_a_time_as_the_pieces_are_read():
    from attnscope.pages import Computed, json_parts

    made = []

    def make(key):
        made.append(key)
        return {"w": [key * 3], "n": len(made)}

    data = {"k": 1, "heads": Computed(["a", "b", "c"], make)}
    pieces = json_parts(data)
    seen = ""
    while '"w"' not in seen:
        seen += next(pieces)
    assert made == ["a"]  # the first head's data is being written: the others are not made yet
    assert json.loads(seen + "".join(pieces)) == {"k": 1, "heads": {"a": {"w": ["aaa"], "n": 1}, "b": {"w": ["bbb"], "n": 2},
                                                                        "c": {"w": ["ccc"], "n": 3}}}
    whole = list(json_parts({"deep": [Computed(["x"], lambda k: k)]}, depth=0))  # inside a value written whole
    assert len(whole) == 1 and json.loads(whole[0]) == {"deep": [{"x": "x"}]}
    with pytest.raises(KeyError):
        Computed(["a"], make)["b"]
