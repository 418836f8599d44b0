"""Per-token effects on the text: the payload from a synthetic table, and the view in a real browser."""

from __future__ import annotations

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
    assert sym["scale"] == 2.5 and sym["up"][0] == [1, 4, " <script>", 2.5]
    assert len(sym["up"]) == 3 and all(r[3] < 0 for r in sym["down"])
    sub = t[(t["layer"] == 2) & (t["intervention"] == "sym") & (t["window"] == 0)].sort_values("position")
    assert sym["windows"]["0"]["delta"] == [round(v, 5) for v in sub["delta_loss"]]
    assert d["heads"]["m|0,1"]["sym"]["windows"]["0"]["delta"][0] is None  # NaN travels as null


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
    assert [v for _, v in got["first"]][1:] == pytest.approx(want0["delta_loss"].iloc[1:].round(5).tolist())
    assert got["first"][0][1] is None  # the NaN token has no colour
    assert [s for s, *_ in got["after"]][3:6] == ["\u21b5\n", " <script>", "</div>"]  # text stays text
    assert got["after"][4][1] == 2.5 and got["after"][4][2] == "rgb(255, 55, 45)"  # the largest rise: full red
    assert "L2H3 under sym" in got["title"] and got["up"].startswith("+2.5000 nats")
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
