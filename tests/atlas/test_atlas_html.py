"""The atlas HTML: self-contained page and report section; the scatter drawn by a real browser when one exists."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from attnscope.atlas.html import atlas_page, atlas_section
from attnscope.atlas.stats import correlation_table


def _synthetic(n_layers=3, n_heads=4, models=("m",)):
    rng = np.random.default_rng(0)
    rows = [{"model": m, "stack": "decoder", "layer": li, "head": h, "kv_head": h // 2} for m in models
            for li in range(n_layers) for h in range(n_heads)]
    t = pd.DataFrame(rows)
    t["symmetry"], t["directionality"] = rng.normal(size=len(t)), rng.normal(size=len(t))
    t["induction_random"], t["sink_text"] = rng.uniform(size=len(t)), rng.uniform(size=len(t))
    t.loc[0, "sink_text"] = np.nan  # NaN travels as null
    t["cluster"] = 0
    corr = correlation_table(t, ["symmetry", "directionality"], ["induction_random", "sink_text"], n_boot=100)
    return t, corr


def _data(page: str) -> dict:
    return json.loads(page.split('id="atlas-data">')[1].split("</script>")[0])


def test_page_embeds_every_head_and_fetches_nothing():
    t, corr = _synthetic()
    page = atlas_page(t, corr, {"model": "m", "lengths": {"random": 255, "text": 256}})
    d = _data(page)
    assert len(d["rows"]) == 12 and d["hue"] == "layer" and d["maxLayer"] == 2
    assert d["rows"][0]["sink_text"] is None and d["columns"][:2] == ["symmetry", "directionality"]
    assert "symmetry|induction_random" in d["corr"] and "percentile bootstrap" in d["corr"]["symmetry|induction_random"]
    assert " src=" not in page and "href=" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "no relation distinguishable from chance" in page or "positive" in page or "negative" in page


def test_pooled_section_colours_by_model_and_names_models_in_the_table():
    t, _ = _synthetic(models=("a", "b"))
    corr = correlation_table(t, ["symmetry"], ["induction_random"], n_boot=50, by="model")
    sec = atlas_section(t, corr, {})
    assert _data(sec)["hue"] == "model" and _data(sec)["models"] == ["a", "b"]
    assert "<th class=\"l\">model</th>" in sec


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium)")
    return exe


@pytest.mark.browser
def test_scatter_is_drawn_in_chromium(tmp_path):
    t, corr = _synthetic()
    page = tmp_path / "atlas.html"
    page.write_text(atlas_page(t, corr, {"model": "m"}))
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert dom.count("<circle") == 12  # one point per head, drawn by the inline script (none in the source)
    assert "Spearman rho =" in dom  # the title line of the selected pair was filled in


_DOM_SHIM = r"""
const fs = require('fs'); const html = fs.readFileSync(process.argv[2], 'utf8');
const data = html.split('id="atlas-data">')[1].split('</script>')[0];
const script = html.split('<script>')[1].split('</script>')[0];
function node(tag){return {tag, attrs: {}, children: [], listeners: {}, textContent: '', style: {},
  setAttribute(k, v){this.attrs[k] = v;}, addEventListener(e, f){this.listeners[e] = f;},
  appendChild(c){this.children.push(c); return c;}, removeChild(c){this.children.splice(this.children.indexOf(c), 1);},
  get firstChild(){return this.children[0] || null;}};}
const els = {'atlas-data': Object.assign(node('script'), {textContent: data}), 'atlas-x': Object.assign(node('select'), {value: 'symmetry'}),
  'atlas-y': Object.assign(node('select'), {value: process.argv[3]}), 'atlas-plot': node('svg'), 'atlas-tip': node('div'), 'atlas-rho': node('p')};
global.document = {getElementById: id => els[id], createElementNS: (ns, tag) => node(tag)};
eval(script);
const circles = els['atlas-plot'].children.filter(c => c.tag === 'circle');
circles[1].listeners['mouseenter']({pageX: 5, pageY: 5});
console.log(JSON.stringify({circles: circles.length, rho: els['atlas-rho'].textContent, tip: els['atlas-tip'].textContent}));
"""


@pytest.mark.parametrize("y, drawn", [("induction_random", 12), ("sink_text", 11)])
def test_inline_script_draws_every_head_and_the_hover_names_it(tmp_path, y, drawn):
    """The page's own script run by node against a minimal DOM: one circle per head with values, hover text."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("no node on PATH")
    t, corr = _synthetic()
    page = tmp_path / "atlas.html"
    page.write_text(atlas_page(t, corr, {"model": "m"}))
    (tmp_path / "shim.js").write_text(_DOM_SHIM)
    r = subprocess.run([node, str(tmp_path / "shim.js"), str(page), y], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["circles"] == drawn  # the head with a NaN is left out, not drawn at 0
    assert got["rho"].startswith("Spearman rho =")
    first = t.dropna(subset=[y]).iloc[1]
    assert f"layer {first.layer}, head {first['head']}" in got["tip"] and "induction_random: " in got["tip"]
