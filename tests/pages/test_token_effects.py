"""Per-token effects on the text: the payload from a synthetic table, and the view in a real browser."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import InputError
from attnscope.pages import document
from attnscope.pages.token_effects import token_effects_fragment, token_effects_payload

sys.path.insert(0, str(Path(__file__).parent))
from _chromium import drive, script_errors  # noqa: E402


def _table(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    tokens = ["The", " cat", " sat", "\n", " <script>", "</div>", " on", " it"]
    rows = [{"model": "m", "layer": layer, "head": head, "intervention": kind, "window": w, "position": p,
             "token": tokens[p], "delta_loss": float(rng.normal(0, 0.1))}
            for layer, head in ((0, 1), (2, 3)) for kind in ("sym", "anti", "ablate") for w in range(2)
            for p in range(len(tokens))]
    t = pd.DataFrame(rows)
    t.loc[(t["layer"] == 2) & (t["intervention"] == "sym") & (t["window"] == 1) & (t["position"] == 4), "delta_loss"] = 2.5
    t.loc[0, "delta_loss"] = np.nan
    return t


def test_payload_scales_lists_and_keeps_every_value():
    t = _table()
    d = token_effects_payload(t, listed=3)
    assert d["order"] == ["m|0,1", "m|2,3"] and d["names"]["m|2,3"] == "L2H3"
    sym = d["heads"]["m|2,3"]["sym"]
    assert sym["scale"] == 2.5 and sym["up"][0] == [1, 4, "\u00b7<script>", 2.5]  # listed as a label: "·" a space
    assert len(sym["up"]) == 3 and all(r[3] < 0 for r in sym["down"])
    sub = t[(t["layer"] == 2) & (t["intervention"] == "sym") & (t["window"] == 0)].sort_values("position")
    np.testing.assert_allclose(sym["windows"]["0"]["delta"], sub["delta_loss"], rtol=1e-3, atol=0)
    assert d["heads"]["m|0,1"]["sym"]["windows"]["0"]["delta"][0] is None  # NaN travels as null


def test_tiny_changes_keep_their_significant_digits():
    """A change of 1e-7 nats (an ablated head far from the output) travels as itself, not rounded to 0."""
    t = _table()
    t["delta_loss"] *= 1e-6
    d = token_effects_payload(t)
    sym = d["heads"]["m|2,3"]["sym"]
    assert sym["scale"] == pytest.approx(2.5e-6, rel=1e-3) and sym["up"][0][3] == pytest.approx(2.5e-6, rel=1e-3)
    sub = t[(t["layer"] == 2) & (t["intervention"] == "sym") & (t["window"] == 0)].sort_values("position")
    np.testing.assert_allclose(sym["windows"]["0"]["delta"], sub["delta_loss"], rtol=1e-3, atol=0)
    assert 0.0 not in sym["windows"]["0"]["delta"]


@pytest.mark.browser
def test_listed_changes_show_significant_digits_in_chromium(tmp_path):
    """The lists, the hover text and the colour bar print 3 significant digits (scientific below 1e-3)."""
    t = _table()
    t.loc[t["layer"] == 2, "delta_loss"] *= 1e-6  # head L2H3: changes of ~1e-7 nats, its largest 2.5e-6
    t.loc[(t["layer"] == 0) & (t["position"] == 2), "delta_loss"] = 0.0123456
    t.loc[(t["layer"] == 0) & (t["position"] == 5) & (t["window"] == 0), "delta_loss"] = 1.4647608  # 1.465 if rounded twice
    page = document("effects", token_effects_fragment(t, element_id="te"))
    driver = r"""
    const lists = () => [...document.querySelectorAll('#te .te-list')].map(l => [...l.children].map(c => c.textContent));
    const small = {lists: lists(), tip: document.querySelectorAll('#te .te-tok')[2].title};
    const h = document.querySelector('#te .te-head'); h.value = 'm|2,3'; h.dispatchEvent(new Event('change'));
    const w = document.querySelector('#te .te-window'); w.value = '1'; w.dispatchEvent(new Event('change'));
    out({small, tiny: lists(), title: document.querySelector('#te .te-title').textContent,
         ticks: [...document.querySelectorAll('#te .te-cbar text')].map(x => x.textContent)});
    """
    got, err = drive(page, driver, tmp_path)
    assert not script_errors(err)
    assert got["tiny"][0][0] == '+2.50e-6 nats: "·<script>" (window 1, position 4)'  # its space shown
    assert all("+0.0000" not in x and "-0.0000" not in x for x in got["tiny"][0] + got["tiny"][1])
    sci = re.compile(r"[+-]\d\.\d\de-\d+ nats: ")  # ~1e-7 nats: scientific, 3 significant digits
    assert all(sci.match(x) for x in got["tiny"][0] + got["tiny"][1]), got["tiny"]
    assert "colour scale \u00b12.50e-6 nats" in got["title"] and got["ticks"][:3] == ["-2.50e-6", "0", "+2.50e-6"]
    assert got["small"]["tip"] == "position 2: +0.0123 nats"  # above 1e-3: 3 significant digits, no exponent
    three = re.compile(r"[+-](\d\.\d\d|0\.0*[1-9]\d\d) nats: ")  # 0.130, 0.0123, 2.50: 3 significant digits
    assert all(three.match(x) for x in got["small"]["lists"][0] + got["small"]["lists"][1]), got["small"]
    assert got["small"]["lists"][0][0].startswith("+1.46 nats: ")  # the value's own third digit, not 1.465's


def test_bad_tables_are_refused_naming_the_table():
    with pytest.raises(InputError, match="lacks column.*delta_loss"):
        token_effects_payload(_table().drop(columns="delta_loss"))
    with pytest.raises(InputError, match="two rows"):
        token_effects_payload(pd.concat([_table(), _table().iloc[:1]]))
    with pytest.raises(InputError, match="empty"):
        token_effects_payload(_table().iloc[:0])


@pytest.mark.browser
def test_token_effects_drawn_and_switched_in_chromium(tmp_path):
    t = _table()
    page = document("effects", token_effects_fragment(t, element_id="te"))
    driver = r"""
    const spans = () => [...document.querySelectorAll('#te .te-tok')];
    const first = spans().map(s => [s.textContent, s.dataset.delta === undefined ? null : +s.dataset.delta]);
    const h = document.querySelector('#te .te-head'); h.value = 'm|2,3'; h.dispatchEvent(new Event('change'));
    const w = document.querySelector('#te .te-window'); w.value = '1'; w.dispatchEvent(new Event('change'));
    const after = spans().map(s => [s.textContent, +s.dataset.delta, s.style.background]);
    out({first, after, title: document.querySelector('#te .te-title').textContent,
         up: [...document.querySelectorAll('#te .te-list')][0].children[0].textContent,
         scripts: document.querySelectorAll('script').length, bar: document.querySelectorAll('#te .te-cbar rect').length});
    """
    got, err = drive(page, driver, tmp_path)
    assert not script_errors(err)
    want0 = t[(t["layer"] == 0) & (t["intervention"] == "sym") & (t["window"] == 0)].sort_values("position")
    assert [v for _, v in got["first"]][1:] == pytest.approx(want0["delta_loss"].iloc[1:].tolist(), rel=1e-3)
    assert got["first"][0][1] is None  # the NaN token has no colour
    assert [s for s, *_ in got["after"]][3:6] == ["\u21b5\n", " <script>", "</div>"]  # text stays text
    assert got["after"][4][1] == 2.5 and got["after"][4][2] == "rgb(255, 55, 45)"  # the largest rise: full red
    assert "L2H3 under sym" in got["title"] and got["up"].startswith("+2.50 nats")
    assert got["scripts"] == 4  # the page's three and the driver's: none injected by the text
    assert got["bar"] == 41


def test_atlas_page_carries_the_token_effects_section():
    from attnscope.atlas.html import atlas_page
    from attnscope.atlas.stats import correlation_table

    rng = np.random.default_rng(0)
    t = pd.DataFrame({"model": "m", "stack": "decoder", "layer": [0, 0, 1, 1, 2, 2], "head": [0, 1] * 3, "kv_head": 0})
    t["symmetry"], t["induction_random"] = rng.normal(size=6), rng.uniform(size=6)
    corr = correlation_table(t, ["symmetry"], ["induction_random"], n_boot=20)
    page = atlas_page(t, corr, {"model": "m"}, token_effects=_table())
    assert "What an intervention changes, per token" in page and 'id="atlas-te-data"' in page
    assert "What an intervention changes" not in atlas_page(t, corr, {"model": "m"})
