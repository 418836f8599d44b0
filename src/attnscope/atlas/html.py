"""The atlas as HTML: an interactive geometry-vs-behaviour scatter and the correlation table.

:func:`atlas_section` is a fragment (for the model report, :mod:`attnscope.report`);
:func:`atlas_page` wraps it as a whole document (``attnscope atlas`` writes :func:`atlas_page_parts`, the same
page in pieces, as ``atlas.html``: the page is never one string in memory), with
:func:`interventions_section` (change in loss per intervention, the heads whose behaviour collapses when
only the symmetric part of their W_qk is kept, and whether it lives in the antisymmetric part or needs
both) when ``attnscope atlas --interventions`` ran. The scatter opens on the strongest relation
(:func:`opening_pair`).
Self-contained: the per-head table travels as JSON inside the page and a few lines of inline
JavaScript draw an SVG scatter (choose x = s or d, y = any behaviour column); hovering a point shows
its model, layer, head and every metric; clicking a point selects the head and draws its example
attention map (the probe's whole first window, each cell the largest weight of a block of query x key
positions so that at most :data:`~attnscope.heads.probes.MAP_SIDE` cells make a side; kept by
:func:`attnscope.atlas.atlas` and embedded as integers in thousandths, each head's map its own JSON element
``atlas-map-<layer>-<head>``, parsed when the head is clicked). No network, no external
script, font or style at view time. With the atlas's text windows (:attr:`attnscope.atlas.AtlasResult.views`)
a click also opens the head's attention on real text, token by token (the "text" tab,
:mod:`attnscope.pages.head_view`); the probe map above is the "pattern" tab. The page frame, escaping and
JSON embedding come from :mod:`attnscope.pages`.
"""

from __future__ import annotations

import html
import itertools
import math
from typing import TYPE_CHECKING, Any, Iterator

from attnscope.heads.probes import MAP_SIDE

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    import pandas as pd

    from attnscope.heads.text import TextViews

#: map values travel as round(value * MAP_SCALE) integers
MAP_SCALE = 1000

_SECTION_CSS = """
.atlas-tabs button{font:inherit;padding:3px 12px;border:1px solid #aab;background:#f3f3f7;cursor:pointer}
.atlas-tabs button.on{background:#1a3a8a;color:#fff}
#atlas-plot,#atlas-map{border:1px solid #ccc;background:#fff}#atlas-tip{position:absolute;display:none;background:#fffbe6;
border:1px solid #aa8;padding:4px 6px;font-size:12px;pointer-events:none;white-space:pre}
"""

_JS = r"""
(function(){
const D = JSON.parse(document.getElementById('atlas-data').textContent);
const sx = document.getElementById('atlas-x'), sy = document.getElementById('atlas-y');
const svg = document.getElementById('atlas-plot'), tip = document.getElementById('atlas-tip');
const W = 760, H = 440, M = {l: 60, r: 20, t: 20, b: 50};
const NS = 'http://www.w3.org/2000/svg';
function el(name, attrs, text){const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]); if (text !== undefined) e.textContent = text; return e;}
function colour(i){const r = D.rows[i]; if (D.hue === 'model') {const k = D.models.indexOf(r.model);
    return 'hsl(' + Math.round(360 * k / Math.max(1, D.models.length)) + ',70%,45%)';}
  const t = D.maxLayer > 0 ? r.layer / D.maxLayer : 0; return 'hsl(' + Math.round(260 - 200 * t) + ',75%,' + Math.round(30 + 25 * t) + '%)';}
function fmt(v){return (v === null || v === undefined) ? 'n/a' : (Math.abs(v) >= 100 ? v.toFixed(1) :
  (v !== 0 && Math.abs(v) < 0.01) ? v.toPrecision(3) : v.toFixed(3));}
function tick(v, span){const d = Math.min(6, Math.max(0, 1 - Math.floor(Math.log10(span / 4 || 1)))); return v.toFixed(d);}
function draw(){
  const x = sx.value, y = sy.value; while (svg.firstChild) svg.removeChild(svg.firstChild);
  const pts = D.rows.map((r, i) => [r[x], r[y], i]).filter(p => p[0] !== null && p[1] !== null);
  if (!pts.length) {document.getElementById('atlas-rho').textContent = 'no head has both ' + x + ' and ' + y; return;}
  let x0 = Math.min(...pts.map(p => p[0])), x1 = Math.max(...pts.map(p => p[0]));
  let y0 = Math.min(...pts.map(p => p[1])), y1 = Math.max(...pts.map(p => p[1]));
  if (x1 === x0) {x0 -= 1; x1 += 1;} if (y1 === y0) {y0 -= 1; y1 += 1;}
  const X = v => M.l + (v - x0) / (x1 - x0) * (W - M.l - M.r), Y = v => H - M.b - (v - y0) / (y1 - y0) * (H - M.t - M.b);
  svg.appendChild(el('rect', {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, fill: 'none', stroke: '#888'}));
  for (let k = 0; k <= 4; k++) {const vx = x0 + k * (x1 - x0) / 4, vy = y0 + k * (y1 - y0) / 4;
    svg.appendChild(el('text', {x: X(vx), y: H - M.b + 16, 'text-anchor': 'middle', 'font-size': 11}, tick(vx, x1 - x0)));
    svg.appendChild(el('text', {x: M.l - 6, y: Y(vy) + 4, 'text-anchor': 'end', 'font-size': 11}, tick(vy, y1 - y0)));}
  svg.appendChild(el('text', {x: (W + M.l) / 2, y: H - 10, 'text-anchor': 'middle', 'font-size': 13}, x));
  svg.appendChild(el('text', {x: 14, y: H / 2, 'text-anchor': 'middle', 'font-size': 13, transform: 'rotate(-90 14 ' + H / 2 + ')'}, y));
  for (const p of pts) {
    const on = p[2] === selected;
    const c = el('circle', {cx: X(p[0]), cy: Y(p[1]), r: on ? 7 : 4.5, fill: colour(p[2]), 'fill-opacity': 0.8, class: 'pt',
      stroke: on ? '#000' : 'none', 'stroke-width': 2, 'data-head': D.rows[p[2]].layer + ',' + D.rows[p[2]].head});
    c.addEventListener('click', () => {selected = p[2]; draw(); showMap(p[2]);
      const r = D.rows[p[2]]; if (globalThis.atlasHeadView) globalThis.atlasHeadView(r.layer, r.head);});
    c.addEventListener('mouseenter', ev => {const r = D.rows[p[2]];
      tip.textContent = r.model + '\nlayer ' + r.layer + ', head ' + r.head + '\n' +
        D.columns.map(k => k + ': ' + fmt(r[k])).join('\n');
      tip.style.display = 'block'; tip.style.left = (ev.pageX + 12) + 'px'; tip.style.top = (ev.pageY + 12) + 'px';});
    c.addEventListener('mouseleave', () => {tip.style.display = 'none';});
    svg.appendChild(c);}
  const rho = D.corr[x + '|' + y]; document.getElementById('atlas-rho').textContent = rho || '';
}
function showMap(i){
  const r = D.rows[i], title = document.getElementById('atlas-map-title');
  const kept = document.getElementById('atlas-map-' + r.layer + '-' + r.head), e = kept ? JSON.parse(kept.textContent) : null;
  const box = document.getElementById('atlas-map'); while (box.firstChild) box.removeChild(box.firstChild);
  const who = (D.hue === 'model' ? r.model + ', ' : '') + 'layer ' + r.layer + ', head ' + r.head;
  if (!e) {title.textContent = who + ': no attention map kept'; return;}
  const m = e.cells, n = m.length, o = 44, S = 300, c = S / n, b = e.block, L = e.length;
  let top = 0; for (const row of m) for (const v of row) top = Math.max(top, v);
  title.textContent = who + ': attention on the ' + D.mapProbe + ' probe, first window, query x key positions 0..' +
    (L - 1) + ' (' + (b > 1 ? n + ' x ' + n + ' cells, each the largest weight of a ' + b + ' x ' + b + ' block; ' : '') +
    'darker = more, max ' + (top / D.mapScale).toFixed(3) + ')';
  box.appendChild(el('rect', {x: o, y: o, width: S, height: S, fill: '#fff', stroke: '#888'}));
  for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) {const v = m[q][k]; if (v <= 0) continue;
    box.appendChild(el('rect', {x: o + k * c, y: o + q * c, width: c, height: c, fill: '#1a3a8a', 'fill-opacity': (v / top).toFixed(3), class: 'cell'}));}
  box.appendChild(el('text', {x: o + S / 2, y: 16, 'text-anchor': 'middle', 'font-size': 12}, 'key position'));
  box.appendChild(el('text', {x: 14, y: o + S / 2, 'text-anchor': 'middle', 'font-size': 12, transform: 'rotate(-90 14 ' + (o + S / 2) + ')'}, 'query position'));
  for (const [t, p] of [[0, 0], [n - 1, L - 1]]) {  // cell t holds positions t*b .. t*b + b - 1: label its first / the last
    box.appendChild(el('text', {x: o + (t + 0.5) * c, y: o - 4, 'text-anchor': 'middle', 'font-size': 10}, String(p)));
    box.appendChild(el('text', {x: o - 4, y: o + (t + 0.5) * c + 3, 'text-anchor': 'end', 'font-size': 10}, String(p)));}
}
let selected = -1;
sx.addEventListener('change', draw); sy.addEventListener('change', draw); draw();
})();
"""


def _map_payload(maps: "Mapping[tuple[int, int], Any] | None", info: "Mapping[str, Any]") -> "Mapping[str, Any]":
    """(layer, head) -> [L, L] attention weights  ->  "layer,head" -> {cells, block, length}: every map checked
    here, each entry made when it is read (:class:`attnscope.pages.Computed`).

    ``cells``: rows of round(weight * MAP_SCALE); a map wider than :data:`MAP_SIDE` is shrunk here by
    :func:`~attnscope.heads.metrics.map_overview` (block maxima). Maps the atlas already shrank are
    recognised by ``info`` (``map_length`` positions in ``map_block`` blocks give their side) and keep
    what they came from; any other map is described by its own side. Weights must lie in [0, 1].
    """
    from attnscope.pages import Computed

    import numpy as np

    from attnscope.errors import InputError
    from attnscope.heads.metrics import map_overview

    length, block = info.get("map_length"), info.get("map_block")
    shrunk_side = -(-int(length) // int(block)) if length and block else None
    checked: dict[str, Any] = {}
    for key, a in (maps or {}).items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise InputError(f"maps keys must be (layer, head) pairs, not {key!r}", params="maps")
        layer, head = key
        a = np.asarray(a, dtype=np.float64)  # [L, L] query x key
        if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
            raise InputError(f"maps[{layer}, {head}] must be a square query x key array, not shape {a.shape}",
                             params="maps")
        if not np.isfinite(a).all() or a.min() < -1e-6 or a.max() > 1 + 1e-3:
            raise InputError(f"maps[{layer}, {head}] must hold attention weights in [0, 1] (it has "
                             f"{'non-finite values' if not np.isfinite(a).all() else f'{a.min():.3g} .. {a.max():.3g}'})",
                             params="maps")
        checked[f"{int(layer)},{int(head)}"] = key  # the map itself is read again when its entry is made

    def entry(name: str) -> dict[str, Any]:
        a = np.asarray(maps[checked[name]], dtype=np.float64)  # type: ignore[index]
        view, b = map_overview(a.clip(0, 1), MAP_SIDE)
        if b == 1 and a.shape[0] == shrunk_side:  # the atlas's own overview: it covers map_length positions
            where = {"block": int(block), "length": int(length)}
        else:
            where = {"block": b, "length": a.shape[0]}
        return {**where, "cells": np.rint(view * MAP_SCALE).astype(int).tolist()}

    return Computed(checked, entry)


def _payload(table: "pd.DataFrame", correlations: "pd.DataFrame", hue: str,
             info: "Mapping[str, Any] | None" = None) -> dict[str, Any]:
    """The scatter's data (the maps travel apart: :func:`_map_payload`, an element per head)."""
    from attnscope.pages import number

    from .build import GEOMETRY_COLUMNS, behaviour_columns

    cols = [*(c for c in GEOMETRY_COLUMNS if c in table.columns), *behaviour_columns(table),
            *(["cluster"] if "cluster" in table.columns else [])]
    keep = ["model", "layer", "head", *cols]
    rows = [{k: number(v) for k, v in zip(keep, r)} for r in table[keep].itertuples(index=False, name=None)]
    corr = {}
    if "model" not in correlations.columns or correlations["model"].nunique() <= 1:
        from .stats import pvalue

        for r in correlations.itertuples():
            rho = "-" if not math.isfinite(r.rho) else f"{r.rho:+.2f}"  # undefined (constant column): no number
            ci = "-" if not math.isfinite(r.ci_low) else f"[{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
            few = f" (few {r.unit}s: the interval is rough)" if getattr(r, "few_units", False) else ""
            corr[f"{r.x}|{r.y}"] = (f"Spearman rho = {rho}, {r.interval}: {ci}, "
                                    f"n = {r.n} heads in {r.n_units} {r.unit}s{few}, p = {pvalue(r.p)}, "
                                    f"q = {pvalue(r.q_run)} ({r.relation})")
    info = info or {}
    data = {"rows": rows, "columns": cols, "hue": hue, "models": list(dict.fromkeys(table["model"])),
            "maxLayer": int(table["layer"].max()) if len(table) else 0, "corr": corr,
            "mapScale": MAP_SCALE, "mapProbe": str(info.get("map_probe", ""))}
    return data


def _pooled(correlations: "pd.DataFrame") -> bool:
    return "model" in correlations.columns and correlations["model"].nunique() > 1


def _corr_table(correlations: "pd.DataFrame") -> str:
    from .stats import pvalue

    esc = html.escape
    lead = ["model"] if _pooled(correlations) else []
    unit = str(correlations["unit"].iloc[0]) if len(correlations) else "layer"
    qs = ["q (model)", "q (run)"] if lead else ["q"]
    head = "".join(f'<th class="l">{h}</th>' for h in [*lead, "geometry", "behaviour"])
    head += "".join(f"<th>{h}</th>" for h in (f"heads / {unit}s", "rho", "95% CI", "p", *qs)) + '<th class="l">relation</th>'
    body = []
    for r in correlations.itertuples():
        cells = [f'<td class="l">{esc(str(getattr(r, c)))}</td>' for c in [*lead, "x", "y"]]
        ci = "&ndash;" if not math.isfinite(r.ci_low) else f"[{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
        rho = "&ndash;" if not math.isfinite(r.rho) else f"{r.rho:+.2f}"
        ps = [pvalue(r.p), pvalue(r.q), *([pvalue(r.q_run)] if lead else [])]
        few = " (few)" if getattr(r, "few_units", False) else ""  # an interval over fewer than MIN_UNITS units
        cells += [f"<td>{r.n} / {r.n_units}{few}</td>", f"<td>{rho}</td>", f"<td>{ci}</td>",
                  *(f"<td>{v}</td>" for v in ps), f'<td class="l">{esc(str(r.relation))}</td>']
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _judged_by(correlations: "pd.DataFrame") -> str:
    """The sentence under the table: what the interval, p and q are and which q the relation reads."""
    from .stats import ALPHA, MIN_UNITS

    if not len(correlations):
        return ""
    r = correlations.iloc[0]
    family = ("q (model): over each model's tests, q (run): over every test of this run; the relation reads q (run)"
              if _pooled(correlations) else "over the model's tests; the relation reads q")
    copies = int(correlations["copy_of"].fillna("").ne("").sum()) if "copy_of" in correlations.columns else 0
    counted = (f" {copies} rows repeat the test of another geometry column (the same values: positions are no "
               "rotation here) and are counted once." if copies else "")
    few = (f" (few): the interval rests on fewer than {MIN_UNITS} {r['unit']}s, too few resampling units to "
           "trust it." if "few_units" in correlations.columns and correlations["few_units"].any() else "")
    return (f"95% CI: {r['interval']}. p: {r['test']}. q: Benjamini-Hochberg adjusted p ({family} <= {ALPHA}: "
            f"a false-discovery rate of 5% among the relations reported).{counted}{few}")


def opening_pair(table: "pd.DataFrame", correlations: "pd.DataFrame", info: "Mapping[str, Any]") -> tuple[str, str]:
    """The (geometry, behaviour) pair the page opens on: the strongest relation (smallest q, then largest
    |rho|) among behaviours the heads show at all (a range of at least 0.05); never induction for an
    encoder (it has no previous occurrence to copy from: every head scores ~0 there)."""
    import numpy as np

    from .build import GEOMETRY_COLUMNS, behaviour_columns

    def shown(c: str) -> bool:
        v = table[c].to_numpy(float) if c in table.columns else np.empty(0)
        v = v[np.isfinite(v)]
        return len(v) > 0 and float(v.max() - v.min()) >= 0.05 and not (
            info.get("causal") is False and c.startswith("induction_"))

    ys = [c for c in behaviour_columns(table) if shown(c)] or behaviour_columns(table)
    xs = [c for c in GEOMETRY_COLUMNS if c in table.columns and table[c].notna().any()] or list(GEOMETRY_COLUMNS)
    cand = correlations[correlations["x"].isin(xs) & correlations["y"].isin(ys) & correlations["rho"].notna()]
    if "copy_of" in cand.columns:
        cand = cand[cand["copy_of"].fillna("").eq("")]
    q = "q_run" if "q_run" in cand.columns else "q"
    if len(cand):
        best = cand.assign(_a=-cand["rho"].abs()).sort_values([q, "_a"], kind="stable").iloc[0]
        return str(best["x"]), str(best["y"])
    return xs[0], ys[0] if ys else ""


def atlas_section(table: "pd.DataFrame", correlations: "pd.DataFrame", info: dict[str, Any],
                  maps: "Mapping[tuple[int, int], Any] | None" = None, views: "TextViews | None" = None) -> str:
    """The HTML fragment: probe note, interactive scatter (``maps``: (layer, head) -> query x key example
    map, drawn on click; see :attr:`attnscope.atlas.AtlasResult.maps`), the clicked head's attention on the
    text windows (``views``: :attr:`attnscope.atlas.AtlasResult.views`), correlation table."""
    return "".join(atlas_section_parts(table, correlations, info, maps, views))


def atlas_section_parts(table: "pd.DataFrame", correlations: "pd.DataFrame", info: dict[str, Any],
                        maps: "Mapping[tuple[int, int], Any] | None" = None,
                        views: "TextViews | None" = None) -> Iterator[str]:
    """:func:`atlas_section` in pieces (the inputs checked at once; the head views' and maps' data made as the
    pieces are read)."""
    from attnscope.pages import json_script_parts, script, style

    from .build import GEOMETRY_COLUMNS, behaviour_columns

    esc = html.escape
    hue = "model" if table["model"].nunique() > 1 else "layer"
    def usable(c: str) -> bool:  # a column with no value anywhere (e.g. offsets refused) is no choice
        return c in table.columns and bool(table[c].notna().any())

    x0, y0 = opening_pair(table, correlations, info)

    def option(c: str, chosen: str) -> str:
        return f'<option value="{c}"{" selected" if c == chosen else ""}>{c}</option>'

    xs = "".join(option(c, x0) for c in GEOMETRY_COLUMNS if usable(c))
    ys = "".join(option(c, y0) for c in behaviour_columns(table) if usable(c))
    lengths = info.get("lengths", {})
    note = (f"One point per head ({len(table)} heads), coloured by {hue}. Behaviour columns are "
            f"<code>&lt;metric&gt;_&lt;probe&gt;</code>: <code>random</code> = BOS + random tokens + their repeat "
            f"({esc(str(lengths.get('random', '?')))} tokens), <code>text</code> = corpus windows "
            f"({esc(str(lengths.get('text', '?')))} tokens). Hover a point for its layer, head and every metric.")
    if any(c in table.columns for c in ("symmetry_at_1", "symmetry_over_offsets")):
        offs = ", ".join(map(str, info.get("offsets") or [])) or "none"
        note += (" <code>_at_1</code>: the form at offset 1 (the previous token); <code>_over_offsets</code>: its "
                 f"mean over offsets {esc(offs)}.")
    for line in info.get("position_notes") or []:
        note += f" Note: {esc(str(line))}"
    probe = str(info.get("map_probe", ""))
    if views is not None:
        note += (" Click a point for the head's attention on real text (<b>text</b> tab: the held-out windows of "
                 "the text probe, token by token).")
    if maps:
        note += (f" The <b>pattern</b> tab shows its attention on the <code>{esc(probe)}</code> probe: the whole first "
                 f"window (query x key), at most {MAP_SIDE} x {MAP_SIDE} cells, each the largest weight of its block "
                 "of positions (so a one-token stripe keeps its strength), values rounded to 0.001.")
    pattern = ('<p class="note" id="atlas-map-title"></p><svg id="atlas-map" width="360" height="360" '
               'viewBox="0 0 360 360"></svg>')
    data = _payload(table, correlations, hue, info)
    map_data = _map_payload(maps, info)  # checked here, each made as it is written
    text_view = None
    if views is not None:
        from attnscope.pages.head_view import head_view_parts

        text_view = head_view_parts(views, element_id="atlas-hv", hook="atlasHeadView")

    def pieces() -> Iterator[str]:
        yield "\n".join([
            style(_SECTION_CSS), "<h2>Geometry meets behaviour (atlas)</h2>", f'<p class="note">{note}</p>',
            f'<p>x <select id="atlas-x">{xs}</select> y <select id="atlas-y">{ys}</select></p>',
            '<svg id="atlas-plot" width="760" height="440" viewBox="0 0 760 440"></svg>',
            '<p class="note" id="atlas-rho"></p><div id="atlas-tip"></div>', ""])
        if text_view is not None:
            yield ('<div class="atlas-tabs"><button data-tab="text" class="on">text</button>'
                   '<button data-tab="pattern">pattern</button></div>\n<div id="atlas-tab-text">')
            yield from text_view
            yield f'</div>\n<div id="atlas-tab-pattern" style="display:none">{pattern}</div>\n{script(_TABS_JS)}\n'
        else:
            yield pattern + "\n"
        yield "\n".join(["<h3>Spearman rho across heads</h3>",
                         f'<p class="note">{esc(_judged_by(correlations), quote=False)}</p>', _corr_table(correlations), ""])
        yield from json_script_parts(data, "atlas-data")
        for key in map_data:  # a map per element, parsed when its head is clicked (not while the page loads)
            yield "\n"
            yield from json_script_parts(map_data[key], f"atlas-map-{key.replace(',', '-')}")
        yield "\n" + script(_JS)

    return pieces()


_TABS_JS = r"""
(function(){
const bs = document.querySelectorAll('.atlas-tabs button');
for (const b of bs) b.addEventListener('click', () => {for (const o of bs) {o.classList.toggle('on', o === b);
  document.getElementById('atlas-tab-' + o.dataset.tab).style.display = o === b ? '' : 'none';}});
})();
"""


def _fmt(v: float, signed: bool = True) -> str:
    return "&ndash;" if not math.isfinite(v) else (f"{v:+.3f}" if signed else f"{v:.3f}")


def _model_prefix(df: "pd.DataFrame", row: Any) -> str:
    """``"MODEL "`` before a head's name where ``df`` holds several models, else nothing."""
    if "model" in df.columns and df["model"].nunique() > 1:
        return f"{getattr(row, 'model', '')} "
    return ""


def interventions_section(table: "pd.DataFrame") -> str:
    """The HTML fragment of :func:`attnscope.interventions.intervene`'s table: per intervention, the change
    in loss over heads (or, for an encoder, why there is none); the heads whose behaviour collapses under
    ``sym`` and where it lives (:func:`attnscope.interventions.sym_collapse`: the antisymmetric part alone,
    or both parts)."""
    import numpy as np

    from attnscope.interventions.summary import ALPHA, KEEP, STRONG, becomes, sym_collapse

    esc = html.escape
    n = int(max(table["n"].max(), table["n_screen"].max() if "n_screen" in table.columns else 0)) if len(table) else 0
    rows = []
    loss_rows = table[table["measure"] == "loss"]
    screened = "delta_screen" in loss_rows.columns
    for kind, sub in loss_rows.groupby("intervention", sort=False):
        ex = sub[sub["exact"].astype(bool)] if "exact" in sub.columns else sub
        d = ex["delta"].to_numpy(float)
        est = sub["delta_screen"].to_numpy(float) if screened else np.array([np.nan])
        if not (np.isfinite(d).any() or np.isfinite(est).any()):
            continue
        up = int(((ex["p_bh"] < ALPHA) & (ex["delta"] > 0)).sum())
        if np.isfinite(d).any():
            big = ex.loc[ex["delta"].idxmax()]
            worst = f"L{int(big['layer'])}H{int(big['head'])} {_fmt(float(big['delta']))}"
        else:
            worst = "-"
        if screened and np.isfinite(est).any():
            top = sub.loc[sub["delta_screen"].idxmax()]
            if not bool(top.get("exact", False)):  # the screen's largest was not measured: say so, as an estimate
                worst += f' (screen: L{int(top["layer"])}H{int(top["head"])} {_fmt(float(top["delta_screen"]))} <i>est.</i>)'
        detect = float(np.nanmedian(ex["detectable_change"])) if len(ex) and np.isfinite(ex["detectable_change"]).any() \
            else float("nan")
        med = float(np.nanmedian(d)) if np.isfinite(d).any() else float("nan")
        med_est = float(np.nanmedian(est)) if np.isfinite(est).any() else float("nan")
        rows.append(f'<tr><td class="l">{esc(str(kind))}</td><td>{len(sub)}</td><td>{len(ex)}</td><td>{_fmt(med)}</td>'
                    f"<td><i>{_fmt(med_est)}</i></td><td>{_fmt(detect, False)}</td><td>{up}</td><td>{worst}</td></tr>")
    encoder = "stack" in table.columns and set(table["stack"].dropna()) == {"encoder"}
    if rows:
        loss = ("<table><thead><tr><th class=\"l\">intervention</th><th>heads screened</th><th>measured exactly</th>"
                "<th>median change in loss (exact)</th><th>median screened change (<i>est.</i>)</th>"
                "<th>median detectable change</th>"
                f"<th>loss up, p_bh &lt; {ALPHA}</th><th>largest increase</th></tr></thead><tbody>{''.join(rows)}"
                "</tbody></table><p class=\"note\">Every head is first <b>screened</b>: its change in loss estimated "
                "after its own softmax, recomputed exactly under the intervention (to second order by default, "
                "first with <code>--screen-samples 0</code>; one forward and a few backward passes per window; <i>est.</i>, the <code>*_screen</code> columns of interventions.csv). "
                "The heads with the largest screened changes under each intervention are then <b>measured "
                "exactly</b> (<code>exact</code> = true, <code>delta</code>); behaviour "
                "changes are exact for every head. Detectable change: the smallest true change in loss a row's "
                "windows detect with 80% power (two-sided 5% t-test): (t<sub>0.975,n-1</sub> + t<sub>0.8,n-1</sub>) "
                "x sd / &radic;n of its per-window changes. A change below it may be real; 4x the windows halve it.</p>")
    elif encoder:
        loss = ('<p class="note">No change in loss: an encoder (a masked language model here) has no next-token '
                "loss to change, so its interventions are measured by the heads' behaviour alone (below and in "
                "interventions.csv).</p>")
    else:
        loss = '<p class="note">No loss: the model has no output matrix (no LM head) to score the next token with.</p>'
    hit = sym_collapse(table)

    def p_text(p: float) -> str:
        return "-" if p != p else f"{p:.2g}"

    if len(hit):
        body = "".join(
            f'<tr><td class="l">{esc(_model_prefix(hit, r))}L{int(r.layer)}H{int(r.head)}</td>'
            f'<td class="l">{esc(str(r.measure))}</td>'
            f"<td>{_fmt(r.clean, False)}</td><td>{_fmt(r.value, False)}</td><td>{_fmt(r.delta)}</td>"
            f"<td>[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]</td><td>{p_text(r.p_bh)}</td>"
            f"<td>{_fmt(r.sym_vs_control)} ({p_text(r.sym_vs_control_p_bh)})</td>"
            f"<td>{_fmt(r.anti_value, False)} [{_fmt(r.anti_ci_low, False)}, {_fmt(r.anti_ci_high, False)}]</td>"
            f"<td>{_fmt(r.anti_vs_control)} ({p_text(r.anti_vs_control_p_bh)})</td>"
            f'<td class="l">{esc(str(r.lives_in))}</td></tr>'
            for r in hit.itertuples())
        heads = ("<table><thead><tr><th class=\"l\">head</th><th class=\"l\">behaviour</th><th>clean</th>"
                 "<th>under sym</th><th>delta</th><th>95% CI</th><th>p_bh</th><th>sym vs scale:0.5 (p_bh)</th>"
                 "<th>under anti [95% CI]</th><th>anti vs scale:0.5 (p_bh)</th>"
                 "<th class=\"l\">lives in</th></tr></thead>"
                 f"<tbody>{body}</tbody></table>")
    else:
        heads = '<p class="note">No head\'s behaviour collapses under sym by this rule.</p>'
    note = (f"Per head: keep only the symmetric part of its scores (<code>sym</code>, (QK<sup>T</sup> + KQ<sup>T</sup>)/2 "
            "after rotary), only the antisymmetric part (<code>anti</code>), zero its output (<code>ablate</code>) or "
            "replace it by its mean (<code>mean</code>). Deltas are intervened minus clean, "
            f"mean over windows with a 95% t interval (n = {n} windows); p_bh: Benjamini-Hochberg across heads.")
    rule = (f"A head's behaviour collapses under <code>sym</code> when it scores at least {STRONG} on it (induction, "
            f"previous token, sink), keeps less than {KEEP:.0%} of it under <code>sym</code>, and p_bh &lt; {ALPHA}. "
            "Either part alone carries about half of a pattern that is neither symmetric nor antisymmetric (a sink "
            f"column, a diagonal stripe), so the score under <code>anti</code> tells where it lives: kept (at least "
            f"{KEEP:.0%}) under <code>anti</code>, the head needs its <b>antisymmetric part</b> (its direction); lost "
            "under both, it needs <b>both parts</b> (the whole form), not its direction. A claim is made only when "
            "both parts' effects are significant (anti's whole 95% interval at or above the threshold; its loss at "
            f"p_bh &lt; {ALPHA}) and beyond the control <code>scale:0.5</code> (the head's scores halved, which "
            "alone loses about what keeping half a pattern loses): the paired difference over windows, p_bh &lt; "
            f"{ALPHA}; otherwise it is <i>undecided</i>, with the reason.")
    turned = becomes(table)
    if len(turned):
        body = "".join(f'<tr><td class="l">{esc(_model_prefix(turned, r))}L{int(r.layer)}H{int(r.head)}</td>'
                       f'<td class="l">{esc(str(r.intervention))}</td>'
                       f'<td class="l">{esc(str(r.was or "-"))}</td><td class="l">{esc(str(r.measure))}</td>'
                       f"<td>{_fmt(r.clean, False)}</td><td>{_fmt(r.value, False)}</td>"
                       f"<td>{_fmt(r.delta)} [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]</td><td>{p_text(r.p_bh)}</td></tr>"
                       for r in turned.itertuples())
        become = ("<table><thead><tr><th class=\"l\">head</th><th class=\"l\">under</th><th class=\"l\">was "
                  "(strongest clean)</th><th class=\"l\">becomes (rises most)</th><th>clean</th><th>under it</th>"
                  f"<th>delta [95% CI]</th><th>p_bh</th></tr></thead><tbody>{body}</tbody></table>")
    else:
        become = f'<p class="note">No named behaviour rises under a score intervention at p_bh &lt; {ALPHA}.</p>'
    models = ""
    if "model" in table.columns and table["model"].nunique() > 1:  # a zoo: the models side by side
        from attnscope.interventions.summary import across_models

        summary = across_models(table)
        body = "".join(
            f'<tr><td class="l">{esc(str(r.intervention))}</td><td class="l">{esc(str(r.measure))}</td>'
            f'<td class="l">{"<b>all (pooled)</b>" if r.model == "all" else esc(str(r.model))}</td><td>{r.heads}'
            f'{" (few)" if r.few_units else ""}</td><td>{_fmt(r.median, r.statistic.startswith("change"))}</td>'
            f"<td>[{_fmt(r.q1, r.statistic.startswith('change'))}, {_fmt(r.q3, r.statistic.startswith('change'))}]</td>"
            f"<td>{r.collapsed}</td></tr>" for r in summary.itertuples())
        models = ("<h3>The models side by side</h3><p class=\"note\">Per intervention and behaviour: the heads that "
                  f"show the behaviour clean (at least {STRONG}), the median and quartiles of the fraction of it they "
                  f"keep, and how many lose it (below {KEEP:.0%}, p_bh &lt; {ALPHA}); for the loss, the heads measured "
                  "exactly and their median change (and how many raise it, p_bh &lt; 0.05); <i>all</i>: every model's "
                  "heads pooled; (few): fewer than 5 heads. interventions_models.csv holds the table.</p>"
                  "<table><thead><tr><th class=\"l\">intervention</th><th class=\"l\">measure</th><th class=\"l\">"
                  "model</th><th>heads</th><th>median</th><th>[Q1, Q3]</th><th>lost / raised</th></tr></thead>"
                  f"<tbody>{body}</tbody></table>")
    return "\n".join(["<h2>Interventions: does a head need its directional part?</h2>", f'<p class="note">{note}</p>',
                      "<h3>Change in loss</h3>", loss, "<h3>Heads whose behaviour collapses under sym</h3>",
                      f'<p class="note">{rule}</p>', heads, "<h3>What a head becomes</h3>", become, models])


def token_effects_section(table: "pd.DataFrame") -> str:
    """The HTML fragment of a per-token table (model, layer, head, intervention, window, position, token,
    delta_loss): each intervened head's change in loss at every token, on the text
    (:func:`attnscope.pages.token_effects.token_effects_fragment`)."""
    return "".join(token_effects_section_parts(table))


def token_effects_section_parts(table: "pd.DataFrame") -> Iterator[str]:
    """:func:`token_effects_section` in pieces."""
    from attnscope.pages.token_effects import token_effects_parts

    note = ("Per intervened head and intervention, the change in loss at each token of the windows (intervened "
            "minus clean, nats): red where the loss rises, blue where it falls. Pick the head, the intervention "
            "and the window; the largest changes are listed beside the text.")
    fragment = token_effects_parts(table, element_id="atlas-te")  # the table checked here
    return itertools.chain([f'<h2>What an intervention changes, per token</h2>\n<p class="note">{note}</p>\n'],
                           fragment)


def atlas_page(table: "pd.DataFrame", correlations: "pd.DataFrame", info: dict[str, Any],
               maps: "Mapping[tuple[int, int], Any] | None" = None,
               interventions: "pd.DataFrame | None" = None, views: "TextViews | None" = None,
               token_effects: "pd.DataFrame | None" = None) -> str:
    """A whole self-contained HTML document holding :func:`atlas_section` (and :func:`interventions_section`
    when ``interventions`` is given, and :func:`token_effects_section` when ``token_effects`` is)."""
    return "".join(atlas_page_parts(table, correlations, info, maps, interventions, views, token_effects))


def atlas_page_parts(table: "pd.DataFrame", correlations: "pd.DataFrame", info: dict[str, Any],
                     maps: "Mapping[tuple[int, int], Any] | None" = None,
                     interventions: "pd.DataFrame | None" = None, views: "TextViews | None" = None,
                     token_effects: "pd.DataFrame | None" = None) -> Iterator[str]:
    """:func:`atlas_page` in pieces, as :func:`attnscope.outputs.write_result_set` writes them to the file: the
    inputs are checked at once, the large data (head views, maps) made and written a head at a time."""
    from attnscope.naming import model_label
    from attnscope.pages import document_parts

    label = model_label(str(info.get("model", "atlas")))
    source = str(info.get("source", info.get("model", "atlas")))  # the path as typed, below the heading
    atlas = atlas_section_parts(table, correlations, info, maps, views)
    middle = f"\n{interventions_section(interventions) if interventions is not None else ''}\n"
    effects = token_effects_section_parts(token_effects) if token_effects is not None else ()
    return document_parts(f"attnscope atlas: {label}", itertools.chain(atlas, [middle], effects), heading=label,
                          subtitle=source if source != label else None)
