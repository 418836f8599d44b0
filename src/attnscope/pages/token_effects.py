"""A per-token quantity on the text: what an intervention on a head changes at each token, drawn by inline JavaScript.

Input: a tidy table with :data:`COLUMNS` (model, layer, head, intervention, window, position, token, delta_loss),
one row per token of each window under each (head, intervention): ``delta_loss`` the change in loss there in
nats (intervened minus clean), ``token`` the token's text as people read it
(:func:`attnscope.heads.tokens.token_texts`). The page shows, for the head and intervention chosen (and a
window selector), the window's tokens coloured by the change (red: loss up, blue: loss down, white: none; the
scale symmetric around 0 at the largest change of that head and intervention), a colour bar in nats, and the
biggest increases and decreases listed with their position and token. Hovering a token gives its change.

* :func:`token_effects_payload` -- the JSON-able data (values kept to :data:`DIGITS` significant digits, so a
  change of 1e-7 nats travels as itself, not as 0)
* :func:`token_effects_fragment` -- a self-contained fragment (style, root, data, script) for a page or a notebook;
  :func:`token_effects_parts` the same in pieces
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from attnscope.pages import (DOM_JS, check_element_id, esc, js_string, json_script_parts, new_id, script, style,
                             token_label, token_text)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: the columns :func:`token_effects_payload` reads
COLUMNS = ("model", "layer", "head", "intervention", "window", "position", "token", "delta_loss")
#: changes listed each way
LISTED = 10
#: significant digits a change keeps in the payload: the page shows 3, and rounding twice (here, then there) changes
#: the third only for a value within a few millionths of a rounding boundary
DIGITS = 6

CSS = """
.te{font-size:13px}.te .te-bar label{margin-right:12px}.te .te-main{display:flex;gap:18px;align-items:flex-start}
.te .te-text{white-space:pre-wrap;line-height:1.9;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;
border:1px solid #ccc;padding:6px 8px;max-height:430px;overflow-y:auto;background:#fff;flex:1}
.te .te-tok{border-radius:2px}.te .te-side{min-width:260px}.te ol{padding-left:22px;margin:4px 0}
"""

JS = r"""
window.attnscopeTokenEffects = function(root, D){
const h = attnscopeDom.h, s = attnscopeDom.s;
function col(v, m){const t = m > 0 ? Math.max(-1, Math.min(1, v / m)) : 0, a = Math.abs(t);
  return t >= 0 ? 'rgb(255,' + Math.round(255 - 200 * a) + ',' + Math.round(255 - 210 * a) + ')'
                : 'rgb(' + Math.round(255 - 210 * a) + ',' + Math.round(255 - 150 * a) + ',255)';}
// 3 significant digits, a sign; scientific below 1e-3 (a change of 2e-7 nats reads as such, never as +0.0000)
function f(v){if (v === 0) return '0'; const a = Math.abs(v);
  return (v > 0 ? '+' : '') + (a < 1e-3 || a >= 1e4 ? v.toExponential(2) : v.toPrecision(3));}
const bar = root.appendChild(h('div', {class: 'te-bar'}));
function sel(label, cls, opts){const l = bar.appendChild(h('label', {}, label + ' ')), e = l.appendChild(h('select', {class: cls}));
  for (const [v, t] of opts) e.appendChild(h('option', {value: v}, t)); e.addEventListener('change', draw); return e;}
const head = sel('head', 'te-head', D.order.map(k => [k, D.names[k]]));
const kind = sel('intervention', 'te-kind', []), win = sel('window', 'te-window', []);
const title = root.appendChild(h('p', {class: 'te-title note'}));
const main = root.appendChild(h('div', {class: 'te-main'}));
const box = main.appendChild(h('div', {class: 'te-text'})), side = main.appendChild(h('div', {class: 'te-side'}));
const svg = root.appendChild(s('svg', {class: 'te-cbar', width: 420, height: 46}));
function fill(e, vals){const keep = e.value; e.textContent = ''; for (const v of vals) e.appendChild(h('option', {value: v}, v));
  if (vals.map(String).includes(keep)) e.value = keep;}
function draw(){
  const H = D.heads[head.value]; fill(kind, Object.keys(H)); const K = H[kind.value];
  fill(win, Object.keys(K.windows)); const W = K.windows[win.value];
  title.textContent = D.names[head.value] + ' under ' + kind.value + ': change in loss at each token (nats), window ' + win.value +
    '; colour scale \u00b1' + f(K.scale).replace('+', '') + ' nats (the largest change of this head and intervention)';
  box.textContent = '';
  W.tokens.forEach((t, i) => {const v = W.delta[i], sp = box.appendChild(h('span', {class: 'te-tok', 'data-pos': W.pos[i]}));
    sp.textContent = t === '' ? '\u2205' : t.replace(/\n/g, '\u21b5\n');
    if (v !== null) {sp.style.background = col(v, K.scale); sp.setAttribute('data-delta', String(v));}
    sp.title = 'position ' + W.pos[i] + ': ' + (v === null ? 'no value' : f(v) + ' nats');});
  side.textContent = '';
  for (const [name, list] of [['Largest increases', K.up], ['Largest decreases', K.down]]) {
    side.appendChild(h('b', {}, name)); const ol = side.appendChild(h('ol', {class: 'te-list'}));
    for (const [w, p, t, v] of list) ol.appendChild(h('li', {}, f(v) + ' nats: "' + t + '" (window ' + w + ', position ' + p + ')'));
    if (!list.length) ol.appendChild(h('li', {}, 'none'));}
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const x0 = 10, x1 = 410, n = 40;
  for (let k = 0; k < n; k++) {const v = -K.scale + 2 * K.scale * (k + 0.5) / n;
    svg.appendChild(s('rect', {x: x0 + k * (x1 - x0) / n, y: 4, width: (x1 - x0) / n + 0.5, height: 14, fill: col(v, K.scale)}));}
  svg.appendChild(s('rect', {x: x0, y: 4, width: x1 - x0, height: 14, fill: 'none', stroke: '#888'}));
  for (const [x, v, a] of [[x0, -K.scale, 'start'], [(x0 + x1) / 2, 0, 'middle'], [x1, K.scale, 'end']])
    svg.appendChild(s('text', {x: x, y: 32, 'text-anchor': a, 'font-size': 11}, f(v)));
  svg.appendChild(s('text', {x: (x0 + x1) / 2, y: 44, 'text-anchor': 'middle', 'font-size': 11}, 'change in loss (nats): blue = down, red = up'));}
draw();
return {draw: draw, state: {head: head, kind: kind, win: win}};
};
"""


def _check(table: "pd.DataFrame") -> None:
    from attnscope.errors import InputError

    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise InputError(f"the token-effects table lacks column(s) {', '.join(missing)} (needs {', '.join(COLUMNS)})",
                         params="table")
    if not len(table):
        raise InputError("the token-effects table is empty", params="table")
    if table.duplicated(["model", "layer", "head", "intervention", "window", "position"]).any():
        raise InputError("the token-effects table has two rows for one (model, layer, head, intervention, window, "
                         "position)", params="table")


def _sig(x: float) -> float:
    """``x`` kept to :data:`DIGITS` significant digits (0 stays 0)."""
    return float(f"{x:.{DIGITS - 1}e}")


def token_effects_payload(table: "pd.DataFrame", listed: int = LISTED) -> dict[str, Any]:
    """The data the view draws: per head (``model|layer,head``) and intervention, each window's tokens and
    changes in loss (None where not finite), the colour scale (largest absolute change) and the ``listed``
    largest increases and decreases as (window, position, token, delta); every value to :data:`DIGITS`
    significant digits."""
    _check(table)
    several = table["model"].nunique() > 1
    heads: dict[str, Any] = {}
    names: dict[str, str] = {}
    for (model, layer, head), sub in table.groupby(["model", "layer", "head"], sort=True):
        key = f"{model}|{int(layer)},{int(head)}"
        names[key] = (f"{model} " if several else "") + f"L{int(layer)}H{int(head)}"
        per: dict[str, Any] = {}
        for kind, part in sub.groupby("intervention", sort=False):
            part = part.sort_values(["window", "position"])
            d = part["delta_loss"].to_numpy(dtype=float)
            fin = np.isfinite(d)
            scale = float(np.abs(d[fin]).max()) if fin.any() else 0.0
            wins = {}
            for w, rows in part.groupby("window", sort=True):
                v = rows["delta_loss"].to_numpy(dtype=float)
                wins[str(int(w))] = {"pos": rows["position"].astype(int).tolist(),
                                     "tokens": [token_text(t) for t in rows["token"].tolist()],
                                     "delta": [_sig(x) if np.isfinite(x) else None for x in v]}
            ok = part[fin]
            def pick(frame: "pd.DataFrame") -> list[list[Any]]:  # a label: whitespace visible (" " reads as "·")
                return [[int(r.window), int(r.position), token_label(r.token), _sig(r.delta_loss)]
                        for r in frame.itertuples()]
            up = ok[ok["delta_loss"] > 0].nlargest(listed, "delta_loss")
            down = ok[ok["delta_loss"] < 0].nsmallest(listed, "delta_loss")
            per[str(kind)] = {"scale": _sig(scale), "windows": wins, "up": pick(up), "down": pick(down)}
        heads[key] = per
    return {"heads": heads, "names": names, "order": list(heads)}


def token_effects_parts(table: "pd.DataFrame", element_id: str | None = None) -> Iterator[str]:
    """:func:`token_effects_fragment` in pieces (the table checked at once)."""
    _check(table)
    root = check_element_id(element_id) or new_id("te")
    call = (f"attnscopeTokenEffects(document.getElementById({js_string(root)}), "
            f"JSON.parse(document.getElementById({js_string(root + '-data')}).textContent));")

    def pieces() -> Iterator[str]:
        yield f'{style(CSS)}\n<div class="te" id="{esc(root)}"></div>\n'
        yield from json_script_parts(token_effects_payload(table), f"{root}-data")
        yield f"\n{script(DOM_JS + JS)}\n{script(f'(function(){{{call}}})();')}"

    return pieces()


def token_effects_fragment(table: "pd.DataFrame", element_id: str | None = None) -> str:
    """A self-contained HTML fragment drawing ``table`` (see the module docstring) on the text."""
    return "".join(token_effects_parts(table, element_id))
