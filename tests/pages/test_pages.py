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
