"""The emergence page: self-contained, the right values at each revision, the inline script draws them (node)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnscope.emergence.html import emergence_page, page_payload
from attnscope.errors import InputError


def _table():
    rows = []
    for i, step in enumerate((0, 100, 1000)):
        for layer in range(2):
            for head in range(3):
                rows.append({"model": "org/m", "revision": f"step{step}", "step": step, "tokens": step * 8,
                             "stack": "decoder", "level": "head", "layer": layer, "head": head,
                             "symmetry": 0.1 * i + 0.01 * head, "directionality": -0.2 * i,
                             "induction_random": np.nan if i == 0 else 0.3 * i})
            rows.append({"model": "org/m", "revision": f"step{step}", "step": step, "tokens": step * 8,
                         "stack": "decoder", "level": "layer", "layer": layer, "head": None, "symmetry": 0.5,
                         "directionality": 0.0, "induction_random": np.nan})
    return pd.DataFrame(rows)


def test_payload_holds_every_head_at_every_revision():
    got = page_payload(_table(), ["symmetry", "induction_random"])
    assert [r["step"] for r in got["revisions"]] == [0, 100, 1000] and got["revisions"][2]["tokens"] == 8000
    assert got["stacks"] == [{"stack": "decoder", "layers": 2, "heads": 3}]
    sym = got["values"]["symmetry"]["decoder"]
    assert sym[1][1 * 3 + 2] == pytest.approx(0.12)  # revision 1, layer 1, head 2
    assert got["values"]["induction_random"]["decoder"][0] == [None] * 6  # NaN travels as null, never as 0
    assert got["signed"] == {"symmetry": True, "induction_random": False}


def test_page_is_self_contained():
    page = emergence_page(_table())
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    assert "<option value=\"induction_random\">" in page and 'max="2"' in page
    with pytest.raises(InputError, match="emergence table"):
        emergence_page(pd.DataFrame({"symmetry": [1.0]}))


_SHIM = r"""
const fs = require('fs'); const html = fs.readFileSync(process.argv[2], 'utf8');
const data = html.split('id="em-data">')[1].split('</script>')[0];
const script = html.split('<script>')[1].split('</script>')[0];
function node(tag){return {tag, attrs: {}, children: [], listeners: {}, textContent: '', style: {}, innerHTML: '',
  setAttribute(k, v){this.attrs[k] = v;}, addEventListener(e, f){this.listeners[e] = f;},
  appendChild(c){this.children.push(c); return c;}};}
const els = {'em-data': Object.assign(node('script'), {textContent: data}), 'em-step': Object.assign(node('input'), {value: '1'}),
  'em-metric': Object.assign(node('select'), {value: process.argv[3]}), 'em-label': node('span'), 'em-tip': node('div'),
  'em-grids': node('div'), 'em-legend': node('div'), 'em-traj': node('div')};
for (const k in els) { const e = els[k]; Object.defineProperty(e, 'innerHTML', {set(v){ e.children = []; }, get(){ return ''; }}); }
global.window = global;
global.document = {getElementById: id => els[id], createElementNS: (ns, tag) => node(tag), createElement: tag => node(tag)};
eval(script);
const fig = els['em-grids'].children[0], svg = fig.children[1];
const rects = svg.children.filter(c => c.tag === 'rect');
rects[5].listeners['mousemove']({pageX: 1, pageY: 1});
const tip = els['em-tip'].textContent;
rects[5].listeners['click']();
const traj = els['em-traj'].children[1], paths = traj.children.filter(c => c.tag === 'path');
const texts = svg => svg.children.filter(c => c.tag === 'text').map(c => c.textContent);
console.log(JSON.stringify({rects: rects.length, fills: rects.map(r => r.attrs.fill), label: els['em-label'].textContent,
  tip, caption: fig.children[0].textContent, width: +rects[0].attrs.width, axis: texts(svg),
  legend: texts(els['em-legend'].children[0]), traj: els['em-traj'].children[0].textContent,
  paths: paths.map(p => p.attrs.d.split('L').length), dashes: paths.map(p => p.attrs['stroke-dasharray']),
  picked: els['em-grids'].children[0].children[1].children.filter(c => c.tag === 'rect')
    .map(r => r.attrs['class']).indexOf('cell picked')}));
"""


@pytest.mark.parametrize("metric", ["symmetry", "induction_random"])
def test_inline_script_draws_the_chosen_revision(tmp_path, metric):
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("no node on PATH")
    page = tmp_path / "emergence.html"
    page.write_text(emergence_page(_table()))
    (tmp_path / "shim.js").write_text(_SHIM)
    r = subprocess.run([node, str(tmp_path / "shim.js"), str(page), metric], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["rects"] == 6 and got["label"].startswith("step100 (step 100")
    value = 0.12 if metric == "symmetry" else 0.3  # rect 5: layer 1, head 2 at revision 1
    assert got["tip"] == f"decoder L1H2\n{metric} = {value:.3f}"
    assert len(set(got["fills"])) > 1 or metric == "induction_random"
    assert got["caption"] == f"decoder: {metric} at step 100" and got["width"] > 20  # a whole title, cells > 20 px
    assert {"L0", "L1", "0", "1", "2", "head", "layer"} <= set(got["axis"])
    assert got["legend"][:3] == (["-1", "0", "+1"] if metric == "symmetry" else ["0", "0.5", "1"])
    # clicked: rect 5's head followed over the 3 revisions; s, d (+ the behaviour score), layer forms dashed
    assert got["picked"] == 5 and got["traj"].startswith("decoder layer 1, head 2 over training")
    assert got["paths"][0] == 3 and got["dashes"][:2] == ["", "5,4"]
    assert len(got["paths"]) == (4 if metric == "symmetry" else 5)  # induction has no layer form


@pytest.mark.browser
def test_page_in_chromium_follows_a_clicked_head_and_escapes_the_title(tmp_path):
    """In a real browser: the grid, a click on a cell and a slider move change what is shown; the model name
    (here holding markup) stays text."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "pages"))
    from _chromium import drive, script_errors

    table = _table().assign(model="org/<b>m</b>")
    driver = r"""
const cells = () => document.querySelectorAll('#em-grids rect.cell');
cells()[4].dispatchEvent(new MouseEvent('click', {bubbles: true}));
const s = document.getElementById('em-step'); s.value = 0; s.dispatchEvent(new Event('input'));
out({cells: cells().length, picked: [...cells()].findIndex(c => c.classList.contains('picked')),
     label: document.getElementById('em-label').textContent, h1: document.querySelector('h1').textContent,
     bold: document.querySelectorAll('h1 b').length, traj: document.querySelector('#em-traj .note').textContent,
     paths: document.querySelectorAll('#em-traj path').length});
"""
    got, stderr = drive(emergence_page(table), driver, tmp_path, size=(1000, 800))
    assert script_errors(stderr) == []
    assert got["cells"] == 6 and got["picked"] == 4 and got["label"].startswith("step0 (step 0")
    assert got["h1"] == "org/<b>m</b>: W_qk geometry over training" and got["bold"] == 0
    assert got["traj"].startswith("decoder layer 1, head 1 over training") and got["paths"] == 4


def test_a_heads_trajectory_draws_its_noise_band_and_formation(tmp_path):
    """Item 10 of issue 49: the noise band (initial +- margin) and the formation step with its interval on the page."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("no node on PATH")
    from attnscope.emergence import formation

    table = _table()
    formed = formation(table)
    payload = page_payload(table, ["symmetry"], formed)
    band = payload["bands"]["symmetry"]["decoder"]["1,2"]
    row = formed[(formed["metric"] == "symmetry") & (formed["layer"] == 1) & (formed["head"] == 2)].iloc[0]
    assert band[:3] == [pytest.approx(row["initial"], abs=1e-3), pytest.approx(row["margin"], abs=1e-3), row["outcome"]]
    page = tmp_path / "emergence.html"
    page.write_text(emergence_page(table, formed=formed))
    shim = _SHIM.replace("console.log(JSON.stringify({", "console.log(JSON.stringify({bands: traj.children.filter("
                         "c => c.attrs['class'] === 'em-band').length, ")
    (tmp_path / "shim.js").write_text(shim)
    r = subprocess.run([node, str(tmp_path / "shim.js"), str(page), "symmetry"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["bands"] == 2  # s and d of the clicked head
    assert "the noise band" in got["traj"] and f"symmetry: {row['outcome']}" in got["traj"]
