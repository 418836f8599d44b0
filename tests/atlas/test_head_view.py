"""The head view: a head's attention on real text in the atlas page and in notebooks, checked in a real browser."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.atlas.build import AtlasResult
from attnscope.atlas.html import atlas_page
from attnscope.atlas.stats import correlation_table
from attnscope.errors import InputError
from attnscope.heads.text import TextViews
from attnscope.pages import document
from attnscope.pages.head_view import NO_KEY, WEIGHT_SCALE, HeadView, head_view_fragment, head_view_payload
from attnscope.training.tokenizers import ByteTokenizer

sys.path.insert(0, str(Path(__file__).parents[1] / "pages"))
from _chromium import drive, script_errors  # noqa: E402

HOSTILE = "a <script>window.pwned = 1</script> b </div> c\n</script><!-- d & e"
TAG = "</script><!--<script>window.pwned = 1</script>"


def _views(n_layers=2, n_heads=3, W=2, L=48, k=5, causal=True, text=HOSTILE, seed=0) -> TextViews:
    tok = ByteTokenizer()
    ids = np.asarray([tok.encode((text * 3)[w : w + L]) for w in range(W)], dtype=np.int64)
    v = TextViews(ids=ids, k=k, causal=causal)
    g = torch.Generator().manual_seed(seed)
    for layer in range(n_layers):
        z = torch.randn(W, n_heads, L, L, generator=g) * 2
        z[:, 0] += 6 * torch.diag(torch.ones(L - 1), -1)  # head 0 of every layer: a previous-token head
        if causal:
            z = z.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), float("-inf"))
        v.on_layer(layer, 0, z.softmax(-1))
    v.name_tokens(tok)
    for w in range(W):  # tokens holding whole tags, as a BPE vocabulary may: they must stay text
        v.texts[w][3:5] = v.labels[w][3:5] = [TAG, "</div>"]
    v.info.update(model="m", data="synthetic")
    return v


def _atlas(views: TextViews) -> AtlasResult:
    rng = np.random.default_rng(0)
    heads = views.heads
    t = pd.DataFrame({"model": "m", "stack": "decoder", "layer": [l for l, _ in heads], "head": [h for _, h in heads],
                      "kv_head": 0})
    t["symmetry"], t["directionality"] = rng.normal(size=len(t)), rng.normal(size=len(t))
    t["previous_token_text"] = rng.uniform(size=len(t))
    corr = correlation_table(t, ["symmetry", "directionality"], ["previous_token_text"], n_boot=50)
    return AtlasResult(table=t, correlations=corr, info={"model": "m", "map_probe": "random"}, views=views)


def _decode(b64: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    u = np.frombuffer(base64.b64decode(b64), dtype="<u2").reshape(-1, k, 2)
    return u[..., 0].astype(int), u[..., 1] / WEIGHT_SCALE


def test_payload_carries_exactly_the_tables_weights():
    v = _views()
    d = head_view_payload(v)
    assert d["k"] == 5 and d["exact"] is False and d["order"] == ["0,0", "0,1", "0,2", "1,0", "1,1", "1,2"]
    t = v.table(1, 2)
    for w in range(v.n_windows):
        keys, weights = _decode(d["heads"]["1,2"]["w"][w], d["k"])
        got = {(q, j): x for q in range(v.length) for j, x in zip(keys[q], weights[q]) if j != NO_KEY}
        sub = t[t["window"] == w]
        want = {(q, j): x for q, j, x in zip(sub["query"], sub["key"], sub["weight"])}
        assert got.keys() == want.keys()
        assert max(abs(got[c] - want[c]) for c in want) <= 0.5 / WEIGHT_SCALE + 1e-7
    assert d["heads"]["1,2"]["dist"] == pytest.approx(v.mean_distance(1, 2), abs=1e-3)
    assert d["tokens"][0][2] == "<" and d["texts"][0][1] == " "


def test_hostile_text_stays_text_in_the_html():
    page = atlas_page(*[getattr(_atlas(_views()), a) for a in ("table", "correlations", "info", "maps")],
                      views=_views())
    assert "window.pwned" in page  # the text travels (inside the JSON, where an opening tag is inert) ...
    assert "</script><!--" not in page and "<\\/script><\\u0021--<script>window.pwned = 1<\\/script>" in page
    assert page.count("</script>") == page.count("<script") - page.count("<script>window.pwned")  # ... never markup
    assert "&lt;/div&gt;" not in page and "</div>" in page


def test_view_for_notebooks():
    res = _atlas(_views())
    view = res.view(1, 0)
    assert isinstance(view, HeadView) and "top 5 keys per query" in repr(view)
    html = view._repr_html_()
    assert html.count('class="hv"') == 1 and "http" not in html.replace(
        "http://www.w3.org/2000/svg", "")  # no network: the only URL is the SVG namespace
    pd.testing.assert_frame_equal(view.table, res.views.table(1, 0))
    with pytest.raises(InputError, match="head must be 0..2"):
        res.view(1, 3)
    with pytest.raises(InputError, match="probes"):
        AtlasResult(table=res.table, correlations=res.correlations).view(0, 0)


def test_page_without_views_keeps_the_map_alone():
    res = _atlas(_views())
    page = atlas_page(res.table, res.correlations, res.info)
    assert 'class="atlas-tabs"' not in page and 'id="atlas-map"' in page and "attnscopeHeadView" not in page


DRIVER = r"""
const res = {};
fire(document.querySelector('#atlas-plot circle[data-head="1,0"]'), 'click');
res.title = document.querySelector('#atlas-hv .hv-title').textContent;
const w = document.querySelector('#atlas-hv .hv-window'); w.value = '1'; w.dispatchEvent(new Event('change'));
const toks = () => [...document.querySelectorAll('#atlas-hv .tok')];
res.text = toks().map(t => t.textContent).join('');
fire(toks()[30], 'click');
res.shaded = toks().filter(t => t.dataset.w).map(t => [+t.dataset.i, +t.dataset.w]);
res.pinned = toks().findIndex(t => t.classList.contains('hv-q'));
res.row = document.querySelector('#atlas-hv .hv-row').textContent;
const st = document.querySelector('#atlas-hv .hv-start'); st.value = '10'; st.dispatchEvent(new Event('change'));
res.cells = [...document.querySelectorAll('#atlas-hv .hv-cell')].map(c => [+c.dataset.q, +c.dataset.k, +c.dataset.w]);
fire(toks()[31], 'mouseenter'); res.hover = toks().filter(t => t.dataset.w).map(t => +t.dataset.i);
fire(toks()[31], 'mouseleave'); res.back = toks().filter(t => t.dataset.w).length;
fire(document.querySelector('#atlas-plot circle[data-head="0,2"]'), 'click');
res.title2 = document.querySelector('#atlas-hv .hv-title').textContent;
res.shaded2 = toks().filter(t => t.dataset.w).map(t => [+t.dataset.i, +t.dataset.w]);
fire(document.querySelector('.atlas-tabs button[data-tab="pattern"]'), 'click');
res.tabs = [document.getElementById('atlas-tab-text').style.display, document.getElementById('atlas-tab-pattern').style.display];
res.pwned = window.pwned === undefined ? null : window.pwned;
res.scripts = document.querySelectorAll('script').length;
res.t = performance.now();
out(res);
"""


@pytest.mark.browser
def test_clicking_a_head_a_window_and_a_token_shows_the_tables_weights(tmp_path):
    v = _views()
    res = _atlas(v)
    page = atlas_page(res.table, res.correlations, res.info, views=v)
    got, err = drive(page, DRIVER, tmp_path)
    assert not script_errors(err), script_errors(err)
    assert got["title"].startswith("m, layer 1, head 0: attention on 2 held-out text windows of synthetic")
    assert got["text"] == "".join(v.texts[1]).replace("\n", "\u21b5\n")  # the hostile text, as text
    assert got["pwned"] is None  # nothing in the text ran ...
    assert got["scripts"] == page.count("</script>") + 1  # ... or became an element (the driver is the one more)
    t = v.table(1, 0)
    row = t[(t["window"] == 1) & (t["query"] == 30)]
    want = dict(zip(row["key"], row["weight"].round(4)))
    assert dict(got["shaded"]) == pytest.approx(want, abs=1e-4)
    assert got["pinned"] == 30 and max(want, key=want.get) == 29  # a previous-token head reads position 29
    assert 'query 30 "' in got["row"] and "other" in got["row"]
    cells = {(q, k): w for q, k, w in got["cells"]}
    part = t[(t["window"] == 1) & t["query"].between(10, 41) & t["key"].between(10, 41)]
    assert cells == pytest.approx({(q, k): round(w, 4) for q, k, w in zip(part["query"], part["key"], part["weight"])
                                   if round(w, 4) > 0}, abs=1e-4)
    assert set(got["hover"]) == set(t[(t["window"] == 1) & (t["query"] == 31)]["key"])  # hovering previews
    assert got["back"] == len(want)  # leaving: the pinned query again
    t2 = v.table(0, 2)
    want2 = t2[(t2["window"] == 1) & (t2["query"] == 30)]
    assert got["title2"].startswith("m, layer 0, head 2") and dict(got["shaded2"]) == pytest.approx(
        dict(zip(want2["key"], want2["weight"].round(4))), abs=1e-4)  # another head: its own weights
    assert got["tabs"] == ["none", ""]


@pytest.mark.browser
def test_two_notebook_views_in_one_document_work_apart(tmp_path):
    v = _views(causal=False, k=48)
    res = _atlas(v)
    page = document("nb", res.view(0, 1)._repr_html_() + res.view(1, 2)._repr_html_())
    driver = r"""
    const roots = document.querySelectorAll('.hv');
    const r = [...roots].map(root => {const toks = root.querySelectorAll('.tok'); fire(toks[5], 'click');
      return {title: root.querySelector('.hv-title').textContent, n: [...toks].filter(t => t.dataset.w).length,
              note: root.querySelector('.hv-k').textContent};});
    out(r);
    """
    got, err = drive(page, driver, tmp_path)
    assert not script_errors(err)
    assert [g["title"][:20] for g in got] == ["m, layer 0, head 1: ", "m, layer 1, head 2: "]
    assert [g["n"] for g in got] == [48, 48] and "exact" in got[0]["note"]  # an encoder, every key kept


@pytest.mark.slow
def test_real_atlas_views_equal_text_weights_on_the_same_windows(minilm_dir):
    import attnscope
    from attnscope.heads.text import text_weights

    res = attnscope.atlas(str(minilm_dir), windows=2, length=24, random_windows=2, n_boot=20)
    v = res.views
    assert v.n_windows == 2 and v.length == 24 and v.exact and v.labels[0][0] == "[CLS]"
    ref = text_weights(str(minilm_dir), 3, 7, ids=v.ids)
    got = res.view(3, 7).table.merge(ref, on=["layer", "head", "window", "query", "key"], suffixes=("", "_ref"))
    assert len(got) == len(ref) and np.allclose(got["weight"], got["weight_ref"], atol=1e-5)
    assert (got["query_token"] == got["query_token_ref"]).all()


def test_the_page_is_written_without_holding_it_in_memory(tmp_path):
    """atlas.html is written piece by piece (attnscope atlas hands atlas_page_parts to write_result_set): writing a
    5 MB page of head views allocates a small part of it at a time (the views themselves are held already), not
    the page string, its JSON and their copies (about 5 times the page before)."""
    import tracemalloc

    from attnscope.atlas.html import atlas_page_parts
    from attnscope.outputs import write_result_set

    v = _views(n_layers=4, n_heads=6, W=4, L=256, k=40, text=HOSTILE * 6)
    res = _atlas(v)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        write_result_set(tmp_path, {"atlas.html": lambda: atlas_page_parts(res.table, res.correlations, res.info,
                                                                          views=v)}, kind="atlas")
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    page = (tmp_path / "atlas.html").read_bytes()
    assert len(page) > 5e6 and page.decode() == atlas_page(res.table, res.correlations, res.info, views=v)
    assert peak < 0.5 * len(page), f"{peak / 1e6:.1f} MB allocated at the peak for a {len(page) / 1e6:.1f} MB page"
