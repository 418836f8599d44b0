"""The sweep as one self-contained HTML page: each stack's layer x head grid coloured by s, d (or a behaviour
score) at the revision a step slider picks, with a colour legend, head and layer labels and whole titles;
hovering a cell shows the head and its value, clicking it draws the head's trajectory (s, d and the chosen
score over every revision, the layer form M_L of its layer dashed, the slider's revision marked).

Built on :mod:`attnscope.pages` like the atlas page: its page frame, escaping, JSON embedding and script
helpers; the values travel as JSON inside the page (rounded to 3 decimals), a few lines of inline JavaScript
draw SVG; no network, script, font or style is fetched at view time. ``attnscope emergence`` writes it as
``emergence.html``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

_CSS = """
body{max-width:1200px}svg{background:#fff}#em-tip{position:absolute;display:none;background:#fffbe6;border:1px solid #aa8;padding:4px 6px;
font-size:12px;pointer-events:none;white-space:pre}#em-step{width:520px;vertical-align:middle}
figure{display:inline-block;margin:6px 18px 6px 0;vertical-align:top}figcaption{font-weight:600;font-size:14px;
margin-bottom:4px}#em-traj{margin-top:10px}.cell{cursor:pointer}.picked{stroke:#000;stroke-width:2.5}
"""

_JS = r"""
(function(){
const D = JSON.parse(document.getElementById('em-data').textContent);
const slider = document.getElementById('em-step'), pick = document.getElementById('em-metric');
const label = document.getElementById('em-label'), tip = document.getElementById('em-tip');
const el = attnscopeDom.s, LEFT = 44, TOP = 8;
let chosen = {stack: D.stacks.length ? D.stacks[0].stack : null, layer: 0, head: 0};
function colour(v, signed){ if (v === null || v === undefined) return '#ddd';
  if (signed) { const t = Math.max(-1, Math.min(1, v)); const a = Math.abs(t);
    return t >= 0 ? 'rgb(' + 255 + ',' + Math.round(255 - 190 * a) + ',' + Math.round(255 - 200 * a) + ')'
                  : 'rgb(' + Math.round(255 - 200 * a) + ',' + Math.round(255 - 150 * a) + ',255)'; }
  const t = Math.max(0, Math.min(1, v)); return 'hsl(' + Math.round(270 - 210 * t) + ',70%,' + Math.round(25 + 40 * t) + '%)'; }
function fmtStep(s){ return s >= 1e6 ? +(s / 1e6).toPrecision(3) + 'M' : s >= 1e3 ? +(s / 1e3).toPrecision(3) + 'k' : '' + s; }
function legend(m){
  const signed = D.signed[m], svg = el('svg', {width: 330, height: 44}), id = 'em-grad-' + (signed ? 's' : 'u');
  const defs = el('defs', {}), grad = el('linearGradient', {id: id});
  for (let i = 0; i <= 10; i++) { const v = signed ? -1 + i / 5 : i / 10;
    grad.appendChild(el('stop', {offset: (10 * i) + '%', 'stop-color': colour(v, signed)})); }
  defs.appendChild(grad); svg.appendChild(defs);
  svg.appendChild(el('rect', {x: 10, y: 4, width: 220, height: 14, fill: 'url(#' + id + ')', stroke: '#999'}));
  const ticks = signed ? [-1, 0, 1] : [0, 0.5, 1];
  ticks.forEach((v, i) => svg.appendChild(el('text', {x: 10 + 110 * i, y: 34, 'font-size': 11, 'text-anchor': 'middle'},
    (signed && v > 0 ? '+' : '') + v)));
  svg.appendChild(el('rect', {x: 250, y: 4, width: 14, height: 14, fill: '#ddd', stroke: '#999'}));
  svg.appendChild(el('text', {x: 270, y: 16, 'font-size': 11}, 'not scored'));
  return svg;
}
function grids(){
  const r = +slider.value, m = pick.value, rev = D.revisions[r];
  label.textContent = rev.name + ' (step ' + rev.step + (rev.tokens === null ? '' : ', ' + rev.tokens + ' tokens') + ')';
  const host = document.getElementById('em-grids'); host.innerHTML = '';
  for (const s of D.stacks) {
    const vals = (D.values[m][s.stack] || [])[r] || [], C = Math.max(26, Math.min(44, Math.floor(720 / s.heads)));
    const fig = document.createElement('figure'), cap = document.createElement('figcaption');
    cap.textContent = s.stack + ': ' + m + ' at step ' + rev.step; fig.appendChild(cap);
    const svg = el('svg', {width: LEFT + C * s.heads + 10, height: TOP + C * s.layers + 40});
    for (let l = 0; l < s.layers; l++) for (let h = 0; h < s.heads; h++) {
      const v = vals.length ? vals[l * s.heads + h] : null;
      const picked = chosen.stack === s.stack && chosen.layer === l && chosen.head === h;
      const rect = el('rect', {x: LEFT + C * h, y: TOP + C * (s.layers - 1 - l), width: C - 2, height: C - 2,
        fill: colour(v, D.signed[m]), 'class': 'cell' + (picked ? ' picked' : '')});
      rect.addEventListener('mousemove', e => { tip.style.display = 'block'; tip.style.left = (e.pageX + 12) + 'px';
        tip.style.top = (e.pageY + 12) + 'px';
        tip.textContent = s.stack + ' L' + l + 'H' + h + '\n' + m + ' = ' + (v === null ? 'n/a' : v.toFixed(3)); });
      rect.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
      rect.addEventListener('click', () => { chosen = {stack: s.stack, layer: l, head: h}; draw(); });
      svg.appendChild(rect);
    }
    for (let l = 0; l < s.layers; l++) svg.appendChild(el('text', {x: LEFT - 6, y: TOP + C * (s.layers - 1 - l) + C / 2 + 4,
      'font-size': 11, 'text-anchor': 'end'}, 'L' + l));
    const every = Math.ceil(s.heads / 16);
    for (let h = 0; h < s.heads; h += every) svg.appendChild(el('text', {x: LEFT + C * h + C / 2 - 1,
      y: TOP + C * s.layers + 13, 'font-size': 11, 'text-anchor': 'middle'}, '' + h));
    svg.appendChild(el('text', {x: LEFT + C * s.heads / 2, y: TOP + C * s.layers + 32, 'font-size': 12,
      'text-anchor': 'middle'}, 'head'));
    svg.appendChild(el('text', {x: 12, y: TOP + C * s.layers / 2, 'font-size': 12, 'text-anchor': 'middle',
      transform: 'rotate(-90 12 ' + (TOP + C * s.layers / 2) + ')'}, 'layer'));
    fig.appendChild(svg); host.appendChild(fig);
  }
  const leg = document.getElementById('em-legend'); leg.innerHTML = ''; leg.appendChild(legend(m));
}
function trajectory(){
  const host = document.getElementById('em-traj'); host.innerHTML = '';
  if (chosen.stack === null) return;
  const s = D.stacks.find(x => x.stack === chosen.stack), at = chosen.layer * s.heads + chosen.head;
  const m = pick.value, names = ['symmetry', 'directionality'].concat(D.signed[m] ? [] : [m]);
  const hues = {symmetry: '#c0392b', directionality: '#2060c0'}, series = [], bands = [];
  for (const name of names) {
    const col = hues[name] || '#2a9d4a';
    const band = ((D.bands[name] || {})[s.stack] || {})[chosen.layer + ',' + chosen.head];
    if (band) bands.push({name: name, colour: col, b: band});
    series.push({label: name + ' (L' + chosen.layer + 'H' + chosen.head + ')', colour: col, dash: '',
                 ys: D.revisions.map((_, i) => ((D.values[name][s.stack] || [])[i] || [])[at])});
    const lay = (D.layers[name] || {})[s.stack];
    if (lay) series.push({label: name + ' (layer form M_L of L' + chosen.layer + ')', colour: col, dash: '5,4',
                          ys: D.revisions.map((_, i) => (lay[i] || [])[chosen.layer])});
  }
  const W = 760, H = 260, L = 56, R = 250, T = 14, B = 40, steps = D.revisions.map(r => r.step || 0);
  const pos = steps.filter(x => x > 0), lin = pos.length ? Math.min.apply(null, pos) : 1;
  const X = st => st < lin ? 0.5 * st / lin : 0.5 + Math.log10(st / lin);
  const xmax = Math.max(X(Math.max.apply(null, steps)), 1e-9);
  const px = st => L + (W - L - R) * X(st) / xmax;
  const edges = [].concat.apply([], bands.map(q => [q.b[0] - q.b[1], q.b[0] + q.b[1]]));
  const all = [].concat.apply([], series.map(q => q.ys)).concat(edges).filter(v => v !== null && v !== undefined);
  let lo = Math.min.apply(null, all.concat([0])), hi = Math.max.apply(null, all.concat([0]));
  const pad = (hi - lo) * 0.08 || 0.05; lo -= pad; hi += pad;
  const py = v => T + (H - T - B) * (hi - v) / (hi - lo);
  const svg = el('svg', {width: W, height: H});
  svg.appendChild(el('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: 'none', stroke: '#bbb'}));
  svg.appendChild(el('line', {x1: L, x2: W - R, y1: py(0), y2: py(0), stroke: '#aaa'}));
  let last = -1e9;
  steps.forEach(st => { const x = px(st); if (x - last < 40) return; last = x;
    svg.appendChild(el('text', {x: x, y: H - B + 14, 'font-size': 11, 'text-anchor': 'middle'}, fmtStep(st))); });
  svg.appendChild(el('text', {x: L + (W - L - R) / 2, y: H - 6, 'font-size': 12, 'text-anchor': 'middle'},
    'training step (log)'));
  for (let i = 0; i <= 4; i++) { const v = lo + (hi - lo) * i / 4;
    svg.appendChild(el('text', {x: L - 6, y: py(v) + 4, 'font-size': 11, 'text-anchor': 'end'}, v.toFixed(2))); }
  bands.forEach((q, k) => {  // the noise band: initial +- margin; the formation step and its interval
    const [v0, mg, outcome, at, low, high] = q.b;
    svg.appendChild(el('rect', {x: L, y: py(v0 + mg), width: W - L - R, height: Math.max(0, py(v0 - mg) - py(v0 + mg)),
      fill: q.colour, 'fill-opacity': 0.08, 'class': 'em-band'}));
    if (at !== null) { const y = T + 5 + 6 * k;
      if (low !== null && high !== null) svg.appendChild(el('line', {x1: px(low), x2: px(high), y1: y, y2: y,
        stroke: q.colour, 'stroke-width': 2, 'class': 'em-interval'}));
      svg.appendChild(el('circle', {cx: px(at), cy: y, r: 3.5, fill: q.b[6] ? '#fff' : q.colour, stroke: q.colour})); }
  });
  const now = px(steps[+slider.value]);
  svg.appendChild(el('line', {x1: now, x2: now, y1: T, y2: H - B, stroke: '#888', 'stroke-dasharray': '2,3'}));
  series.forEach((q, k) => {
    let d = ''; q.ys.forEach((v, i) => { if (v === null || v === undefined) return;
      d += (d ? 'L' : 'M') + px(steps[i]).toFixed(1) + ',' + py(v).toFixed(1); });
    if (d) svg.appendChild(el('path', {d: d, fill: 'none', stroke: q.colour, 'stroke-width': 2, 'stroke-dasharray': q.dash}));
    svg.appendChild(el('line', {x1: W - R + 12, x2: W - R + 36, y1: T + 10 + 18 * k, y2: T + 10 + 18 * k, stroke: q.colour,
      'stroke-width': 2, 'stroke-dasharray': q.dash}));
    svg.appendChild(el('text', {x: W - R + 42, y: T + 14 + 18 * k, 'font-size': 11}, q.label));
  });
  const cap = document.createElement('div'); cap.className = 'note';
  cap.textContent = chosen.stack + ' layer ' + chosen.layer + ', head ' + chosen.head +
    ' over training (click another cell to follow it; dotted line: the step the slider picks' +
    (bands.length ? '; shaded: its initial value +- the margin a change must exceed to form, the noise band; ' +
     'on top: the formation step and its 95% interval over redraws of the checkpoints\' noise' : '') + ')' +
    bands.map(q => '. ' + q.name + ': ' + q.b[2] + (q.b[3] !== null ? ' at step ' + q.b[3] +
      (q.b[4] !== null ? ' [' + q.b[4] + ', ' + q.b[5] + ']' : '') : '') + (q.b[6] ? ' (borderline: within 10% of its margin)' : '') +
      (q.b[7] ? ' (after an overshoot)' : '')).join('');
  host.appendChild(cap); host.appendChild(svg);
}
function draw(){ grids(); trajectory(); }
slider.addEventListener('input', draw); pick.addEventListener('change', draw); draw();
})();
"""


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return round(f, 3) if math.isfinite(f) else None


def _int_or_none(v: Any) -> int | None:
    f = _num(v)
    return None if f is None else int(f)


def _bands(formed: "pd.DataFrame | None") -> dict[str, dict[str, dict[str, list[Any]]]]:
    """Per metric, stack and "layer,head": [initial, margin, outcome, formed_step, low, high, borderline, overshoot]
    of a head's formation row (:func:`attnscope.emergence.formation`); {} without a table."""
    out: dict[str, dict[str, dict[str, list[Any]]]] = {}
    if formed is None or not len(formed) or "margin" not in formed:
        return out
    rows = formed[formed["level"] == "head"] if "level" in formed else formed
    for r in rows.itertuples(index=False):
        initial, margin = _num(r.initial), _num(r.margin)
        if initial is None or margin is None:
            continue
        out.setdefault(str(r.metric), {}).setdefault(str(r.stack), {})[f"{int(r.layer)},{int(r.head)}"] = [
            initial, margin, str(r.outcome), _int_or_none(r.formed_step), _int_or_none(getattr(r, "formed_step_low", None)),
            _int_or_none(getattr(r, "formed_step_high", None)), bool(getattr(r, "borderline", False)),
            bool(getattr(r, "overshoot", False))]
    return out


def page_payload(table: "pd.DataFrame", metrics: list[str], formed: "pd.DataFrame | None" = None) -> dict[str, Any]:
    """What the page draws: revisions in order, each stack's shape, per metric and stack a
    [revisions][layer * heads + head] list of values (None where missing), ``layers``: per metric the table
    holds layer rows of and stack, the layer form M_L as [revisions][layer], and ``bands``: each head's noise
    band and formation (:func:`_bands`) from ``formed``."""
    heads = table[table["level"] == "head"]
    revs = list(dict.fromkeys(table["revision"]))
    axis = table.drop_duplicates("revision").set_index("revision")
    stacks = []
    values: dict[str, dict[str, list[list[float | None]]]] = {m: {} for m in metrics}
    for stack, grp in heads.groupby("stack", sort=False):
        n_l, n_h = int(grp["layer"].max()) + 1, int(grp["head"].max()) + 1
        stacks.append({"stack": str(stack), "layers": n_l, "heads": n_h})
        for m in metrics:
            grid: list[list[float | None]] = [[None] * (n_l * n_h) for _ in revs]
            at = {r: i for i, r in enumerate(revs)}
            for rev, layer, head, v in zip(grp["revision"], grp["layer"], grp["head"], grp[m]):
                grid[at[rev]][int(layer) * n_h + int(head)] = _num(v)
            values[m][str(stack)] = grid
    layer_values: dict[str, dict[str, list[list[float | None]]]] = {}
    layer_rows = table[table["level"] == "layer"]
    for m in metrics:
        for stack, grp in layer_rows.groupby("stack", sort=False):
            if not grp[m].notna().any():
                continue
            n_l = int(grp["layer"].max()) + 1
            lgrid: list[list[float | None]] = [[None] * n_l for _ in revs]
            at = {r: i for i, r in enumerate(revs)}
            for rev, layer, v in zip(grp["revision"], grp["layer"], grp[m]):
                lgrid[at[rev]][int(layer)] = _num(v)
            layer_values.setdefault(m, {})[str(stack)] = lgrid
    signed = {m: m in ("symmetry", "directionality") for m in metrics}
    return {"revisions": [{"name": str(r), "step": _int_or_none(axis.loc[r, "step"]),
                           "tokens": _int_or_none(axis.loc[r, "tokens"]) if "tokens" in axis else None} for r in revs],
            "stacks": stacks, "values": values, "layers": layer_values, "signed": signed, "bands": _bands(formed)}


def emergence_page(table: "pd.DataFrame", title: str | None = None, formed: "pd.DataFrame | None" = None) -> str:
    """The whole document (a string): a metric menu (s, d and any behaviour score of the table), a step slider,
    one layer x head grid per stack; with ``formed`` (:func:`attnscope.emergence.formation`) a head's trajectory
    shows its noise band, its formation step and that step's interval."""
    from attnscope.atlas.build import behaviour_columns
    from attnscope.pages import DOM_JS, document, esc, json_script, script
    from attnscope.tables import check_table

    check_table(table, ("model", "revision", "step", "stack", "level", "layer", "head", "symmetry", "directionality"),
                "table", "an emergence table (attnscope.emergence.sweep(...).table)")
    metrics = ["symmetry", "directionality", *[c for c in behaviour_columns(table) if table[c].notna().any()]]
    name = title or str(table["model"].iloc[0])
    n = max(table["revision"].nunique() - 1, 0)
    options = "".join(f'<option value="{esc(m)}">{esc(m)}</option>' for m in metrics)
    body = "\n".join([
        f'<p><label>score <select id="em-metric">{options}</select></label> '
        f'<label>revision <input type="range" id="em-step" min="0" max="{n}" value="{n}" step="1"></label> '
        '<span id="em-label"></span></p><div id="em-legend"></div>',
        '<div id="em-grids"></div><div id="em-traj"></div><div id="em-tip"></div>',
        json_script(page_payload(table, metrics, formed), "em-data"), script(DOM_JS + _JS),
    ])  # fmt: skip
    return document(f"{name}: emergence", body, css=_CSS, heading=f"{name}: W_qk geometry over training",
                    subtitle="Every head's score at the revision the slider picks, one layer x head grid per stack "
                    "(layer 0 at the bottom). Symmetry s and directionality d run from -1 (blue) through 0 (white) to "
                    "+1 (red); behaviour scores from 0 (purple) to 1 (yellow); grey: not scored at that revision. "
                    "Hover a cell for its value; click it to follow that head over training below.")
