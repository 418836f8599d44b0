"""The sweep as one self-contained HTML page: each stack's layer x head grid coloured by s, d (or a behaviour
score) at the revision a step slider picks; hovering a cell shows the head and its value.

In the atlas's style (:mod:`attnscope.atlas.html`): the values travel as JSON inside the page (rounded to
3 decimals), a few lines of inline JavaScript draw SVG rectangles; no network, script, font or style is
fetched at view time. ``attnscope emergence`` writes it as ``emergence.html``.
"""

from __future__ import annotations

import html
import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#1a1a2e;max-width:1150px}.note{color:#555;font-size:13px}
svg{border:1px solid #ccc;background:#fff;margin:4px 12px 4px 0}#em-tip{position:absolute;display:none;
background:#fffbe6;border:1px solid #aa8;padding:4px 6px;font-size:12px;pointer-events:none;white-space:pre}
#em-step{width:520px}
"""

_JS = r"""
(function(){
const D = JSON.parse(document.getElementById('em-data').textContent);
const slider = document.getElementById('em-step'), pick = document.getElementById('em-metric');
const label = document.getElementById('em-label'), tip = document.getElementById('em-tip');
const NS = 'http://www.w3.org/2000/svg', C = 22;
function colour(v, signed){ if (v === null) return '#ddd';
  if (signed) { const t = Math.max(-1, Math.min(1, v)); const a = Math.abs(t);
    return t >= 0 ? 'rgb(' + 255 + ',' + Math.round(255 - 190 * a) + ',' + Math.round(255 - 200 * a) + ')'
                  : 'rgb(' + Math.round(255 - 200 * a) + ',' + Math.round(255 - 150 * a) + ',255)'; }
  const t = Math.max(0, Math.min(1, v)); return 'hsl(' + Math.round(270 - 210 * t) + ',70%,' + Math.round(25 + 40 * t) + '%)'; }
function draw(){
  const r = +slider.value, m = pick.value, rev = D.revisions[r];
  label.textContent = rev.name + ' (step ' + rev.step + (rev.tokens === null ? '' : ', ' + rev.tokens + ' tokens') + ')';
  const host = document.getElementById('em-grids'); host.innerHTML = '';
  for (const s of D.stacks) {
    const vals = (D.values[m][s.stack] || [])[r] || [];
    const svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('width', 60 + C * s.heads); svg.setAttribute('height', 40 + C * s.layers);
    const title = document.createElementNS(NS, 'text'); title.setAttribute('x', 4); title.setAttribute('y', 14);
    title.textContent = s.stack + ': ' + m; svg.appendChild(title);
    for (let l = 0; l < s.layers; l++) for (let h = 0; h < s.heads; h++) {
      const v = vals.length ? vals[l * s.heads + h] : null;
      const rect = document.createElementNS(NS, 'rect');
      rect.setAttribute('x', 40 + C * h); rect.setAttribute('y', 24 + C * (s.layers - 1 - l));
      rect.setAttribute('width', C - 2); rect.setAttribute('height', C - 2);
      rect.setAttribute('fill', colour(v, D.signed[m]));
      rect.addEventListener('mousemove', e => { tip.style.display = 'block'; tip.style.left = (e.pageX + 12) + 'px';
        tip.style.top = (e.pageY + 12) + 'px';
        tip.textContent = s.stack + ' L' + l + 'H' + h + '\n' + m + ' = ' + (v === null ? 'n/a' : v.toFixed(3)); });
      rect.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
      svg.appendChild(rect);
    }
    for (let l = 0; l < s.layers; l++) { const t = document.createElementNS(NS, 'text'); t.setAttribute('x', 4);
      t.setAttribute('y', 38 + C * (s.layers - 1 - l)); t.setAttribute('font-size', 11); t.textContent = 'L' + l; svg.appendChild(t); }
    host.appendChild(svg);
  }
}
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


def page_payload(table: "pd.DataFrame", metrics: list[str]) -> dict[str, Any]:
    """What the page draws: revisions in order, each stack's shape, and per metric and stack a
    [revisions][layer * heads + head] list of values (None where missing)."""
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
    signed = {m: m in ("symmetry", "directionality") for m in metrics}
    return {"revisions": [{"name": str(r), "step": _int_or_none(axis.loc[r, "step"]),
                           "tokens": _int_or_none(axis.loc[r, "tokens"]) if "tokens" in axis else None} for r in revs],
            "stacks": stacks, "values": values, "signed": signed}


def emergence_page(table: "pd.DataFrame", title: str | None = None) -> str:
    """The whole document (a string): a metric menu (s, d and any behaviour score of the table), a step slider,
    one layer x head grid per stack."""
    from attnscope.atlas.build import behaviour_columns

    from attnscope.tables import check_table

    check_table(table, ("model", "revision", "step", "stack", "level", "layer", "head", "symmetry", "directionality"),
                "table", "an emergence table (attnscope.emergence.sweep(...).table)")
    metrics = ["symmetry", "directionality", *[c for c in behaviour_columns(table) if table[c].notna().any()]]
    data = json.dumps(page_payload(table, metrics), separators=(",", ":")).replace("</", "<\\/")
    name = html.escape(title or str(table["model"].iloc[0]))
    n = max(table["revision"].nunique() - 1, 0)
    options = "".join(f'<option value="{html.escape(m)}">{html.escape(m)}</option>' for m in metrics)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{name}: emergence</title><style>{_CSS}</style>"
            f"</head><body><h1>{name}</h1><p class='note'>W_qk geometry of every head at each revision (step); "
            "symmetry and directionality from -1 (blue) to +1 (red), behaviour scores 0 (purple) to 1 (yellow); grey: "
            "not scored at that revision.</p>"
            f"<p><label>metric <select id='em-metric'>{options}</select></label> "
            f"<input type='range' id='em-step' min='0' max='{n}' value='{n}' step='1'> <span id='em-label'></span></p>"
            f"<div id='em-grids'></div><div id='em-tip'></div>"
            f"<script type='application/json' id='em-data'>{data}</script><script>{_JS}</script></body></html>")
