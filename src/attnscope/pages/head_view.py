"""The head view: a head's attention on real text, token by token, drawn by inline JavaScript.

What it shows (one head at a time, over the windows of a :class:`attnscope.heads.text.TextViews`):

* the window's tokens as text (a window selector picks the window); hovering a query token shades the keys
  it attends to by weight (darkest = the row's largest weight), clicking pins it; the row's kept keys and
  their weights are listed below, the weight of keys not kept summed as "other";
* a heatmap with token labels for a stretch of up to 64 tokens (start and size chosen on the page);
* beside them, the head's most attended tokens (share of all its attention over the windows) and its mean
  attention distance.

Data: per (head, window) one base64 string of little-endian uint16 pairs ``[L, k, (key, weight)]``: each
query's top ``k`` keys (key 65535 = none) and their weights as round(weight x :data:`WEIGHT_SCALE`) (so
shown to 4 decimals); ``k`` and whether the rows are exact travel beside them and are said on the page.
In the page each head's entry is its own JSON element (``<root>-h-<layer>-<head>``), read when the head is
first shown: loading the page parses the windows' tokens, never the megabytes of every head's weights.

* :func:`head_view_payload` -- the JSON-able data (all heads, or a few; each head's entry made when it is
  read, so a page of all heads holds one head's encoded weights at a time)
* :func:`head_view_fragment` -- a self-contained fragment (style, root element, data, script) for a page
  or a notebook cell; :func:`head_view_parts` the same in pieces (a page writes them to its file as they
  come), :func:`head_view_script` the script alone
* :class:`HeadView` -- one head of an atlas result, ``_repr_html_`` for Jupyter, ``.table`` the weights shown
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from attnscope.pages import (DOM_JS, Computed, check_element_id, check_hook, esc, js_string, json_script_parts, new_id,
                             number, script, style, token_label, token_text)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from attnscope.heads.text import TextViews

#: weights travel as round(weight * WEIGHT_SCALE) in a uint16
WEIGHT_SCALE = 10000
#: key position meaning "no key" (a causal row shorter than k)
NO_KEY = 65535
#: the longest stretch the heatmap draws
HEAT_MAX = 64

CSS = """
.hv{font-size:13px}.hv .hv-bar{margin:4px 0}.hv .hv-bar label{margin-right:12px}
.hv .hv-main{display:flex;gap:18px;align-items:flex-start}.hv .hv-side{min-width:220px;max-width:260px}
.hv .hv-text{white-space:pre-wrap;line-height:1.9;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;
border:1px solid #ccc;padding:6px 8px;max-height:430px;overflow-y:auto;background:#fff;flex:1}
.hv .tok{cursor:pointer;border-radius:2px;padding:1px 0}.hv .tok:nth-child(odd){box-shadow:inset 0 -1px #dde}
.hv .tok.hv-q{outline:2px solid #d9480f}.hv .tok.hv-sp{color:#888}
.hv .hv-row{min-height:2.4em}.hv .hv-heat{border:1px solid #ccc;background:#fff}.hv ol{padding-left:22px;margin:4px 0}
.hv code{background:#f3f3f7;padding:0 2px}
"""

JS = r"""
window.attnscopeHeadView = function(root, D){
const L = D.length, K = D.k;
const h = attnscopeDom.h, s = attnscopeDom.s;
function f4(v){return v.toFixed(4);}
const st = {key: null, w: 0, q: -1, pin: -1, start: 0, span: Math.min(32, L, D.heatMax)};
const cache = {}, entries = {}, kept = new Set(D.order);
function entry(key){  // a head's data: its own JSON element, parsed when the head is first shown
  if (!(key in entries)) {const e = kept.has(key) && document.getElementById(root.id + '-h-' + key.replace(',', '-'));
    entries[key] = e ? JSON.parse(e.textContent) : null;}
  return entries[key];}
function pairs(key, w){const id = key + '/' + w; if (cache[id]) return cache[id];
  const b = atob(entry(key).w[w]), u = new Uint8Array(b.length); for (let i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);
  return (cache[id] = new Uint16Array(u.buffer));}
function row(q){  // [[key, weight], ...] most first, and the weight not kept
  const u = pairs(st.key, st.w), out = []; let sum = 0;
  for (let r = 0; r < K; r++) {const j = u[(q * K + r) * 2]; if (j === D.noKey) continue;
    const v = u[(q * K + r) * 2 + 1] / D.scale; out.push([j, v]); sum += v;}
  out.sort((a, b) => b[1] - a[1]); return [out, Math.max(0, 1 - sum)];}
root.textContent = '';
const title = root.appendChild(h('p', {class: 'hv-title'}));
const bar = root.appendChild(h('div', {class: 'hv-bar'}));
let pick = null;
if (D.order.length > 1) {const lab = bar.appendChild(h('label', {}, 'head '));
  pick = lab.appendChild(h('select', {class: 'hv-head'}));
  for (const k of D.order) {const [l, hd] = k.split(','); pick.appendChild(h('option', {value: k}, 'L' + l + 'H' + hd));}
  pick.addEventListener('change', () => show(...pick.value.split(',').map(Number)));}
const wl = bar.appendChild(h('label', {}, 'window ')), wsel = wl.appendChild(h('select', {class: 'hv-window'}));
D.texts.forEach((t, i) => {const txt = t.join('').replace(/\s+/g, ' ').trim();
  wsel.appendChild(h('option', {value: i}, i + ': ' + (txt.length > 60 ? txt.slice(0, 60) + '...' : txt)));});
wsel.addEventListener('change', () => {st.w = +wsel.value; st.pin = -1; st.q = -1; text(); heat(); side();});
const main = root.appendChild(h('div', {class: 'hv-main'}));
const box = main.appendChild(h('div', {class: 'hv-text'})), sideBox = main.appendChild(h('div', {class: 'hv-side'}));
const info = root.appendChild(h('p', {class: 'hv-row note'}));
const hb = root.appendChild(h('div', {class: 'hv-bar'}));
const sl = hb.appendChild(h('label', {}, 'heatmap from token ')), start = sl.appendChild(h('input', {class: 'hv-start', type: 'number', min: 0, max: L - 1, value: 0, style: 'width:5em'}));
const zl = hb.appendChild(h('label', {}, ' tokens ')), span = zl.appendChild(h('select', {class: 'hv-span'}));
for (const n of [16, 32, 48, 64]) if (n <= Math.max(16, Math.min(L, D.heatMax))) span.appendChild(h('option', {value: n}, String(n)));
span.value = String(st.span);
start.addEventListener('change', () => {st.start = Math.max(0, Math.min(L - 1, +start.value || 0)); heat();});
span.addEventListener('change', () => {st.span = +span.value; heat();});
const svg = root.appendChild(s('svg', {class: 'hv-heat'}));
const note = root.appendChild(h('p', {class: 'note hv-k'}));
function text(){
  box.textContent = ''; const toks = D.texts[st.w];
  toks.forEach((t, i) => {const sp = box.appendChild(h('span', {class: 'tok' + (D.special[st.w][i] ? ' hv-sp' : ''), 'data-i': i}));
    sp.textContent = t === '' ? '\u2205' : t.replace(/\n/g, '\u21b5\n').replace(/\t/g, '\u21e5');
    sp.title = 'position ' + i + ': ' + D.tokens[st.w][i];
    sp.addEventListener('mouseenter', () => shade(i)); sp.addEventListener('mouseleave', () => shade(st.pin));
    sp.addEventListener('click', () => pin(i));});
  shade(st.pin);}
function pin(i){st.pin = st.pin === i ? -1 : i; shade(st.pin); heat();}
function shade(q){
  st.q = q; const spans = box.children;
  for (const sp of spans) {sp.style.background = ''; sp.style.color = ''; sp.classList.remove('hv-q'); sp.removeAttribute('data-w');}
  if (q < 0 || st.key === null) {info.textContent = 'Hover a token to see which tokens it attends to; click to pin it.'; return;}
  const [ks, other] = row(q), top = ks.length ? ks[0][1] : 1;
  for (const [j, v] of ks) {const sp = spans[j], a = top > 0 ? v / top : 0;
    sp.style.background = 'rgba(26,58,138,' + (0.08 + 0.82 * a).toFixed(3) + ')'; if (a > 0.55) sp.style.color = '#fff';
    sp.setAttribute('data-w', f4(v)); sp.title = 'position ' + j + ': ' + D.tokens[st.w][j] + '  weight ' + f4(v);}
  spans[q].classList.add('hv-q');
  info.textContent = 'query ' + q + ' "' + D.tokens[st.w][q] + '" attends to: ' +
    ks.slice(0, 8).map(([j, v]) => '"' + D.tokens[st.w][j] + '" (' + j + ') ' + f4(v)).join(', ') +
    (ks.length > 8 ? ', ... ' : '') + (D.exact ? '' : '; other ' + f4(other));}
function heat(){
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  if (st.key === null) return;
  const a = Math.min(st.start, Math.max(0, L - st.span)), n = Math.min(st.span, L - a), c = Math.max(7, Math.min(14, Math.floor(560 / n)));
  const m = 92, S = n * c; svg.setAttribute('width', m + S + 10); svg.setAttribute('height', m + S + 10);
  const lab = D.tokens[st.w], cut = t => t.length > 12 ? t.slice(0, 11) + '\u2026' : t;
  let top = 0; const cells = [];
  for (let q = a; q < a + n; q++) {const [ks] = row(q); for (const [j, v] of ks) if (j >= a && j < a + n) {cells.push([q, j, v]); top = Math.max(top, v);}}
  svg.appendChild(s('rect', {x: m, y: m, width: S, height: S, fill: '#fff', stroke: '#888'}));
  for (const [q, j, v] of cells) {if (v <= 0) continue;
    const r = svg.appendChild(s('rect', {x: m + (j - a) * c, y: m + (q - a) * c, width: c, height: c, fill: '#1a3a8a',
      'fill-opacity': (v / top).toFixed(3), class: 'hv-cell', 'data-q': q, 'data-k': j, 'data-w': f4(v)}));
    r.appendChild(s('title', {}, 'query ' + q + ' "' + lab[q] + '" -> key ' + j + ' "' + lab[j] + '": ' + f4(v)));
    r.addEventListener('click', () => pin(q));}
  const fs = Math.min(10, c);
  for (let t = a; t < a + n; t++) {
    svg.appendChild(s('text', {x: m - 3, y: m + (t - a + 0.5) * c + fs / 3, 'text-anchor': 'end', 'font-size': fs,
      fill: t === st.pin ? '#d9480f' : '#222'}, cut(lab[t])));
    const x = m + (t - a + 0.5) * c + fs / 3;
    svg.appendChild(s('text', {x: x, y: m - 3, 'text-anchor': 'start', 'font-size': fs, transform: 'rotate(-90 ' + x + ' ' + (m - 3) + ')'}, cut(lab[t])));}
  svg.appendChild(s('text', {x: 4, y: 12, 'font-size': 11}, 'query (rows) x key (columns); darkest = ' + f4(top)));}
function side(){
  sideBox.textContent = ''; if (st.key === null) return; const e = entry(st.key);
  sideBox.appendChild(h('b', {}, 'Most attended tokens'));
  sideBox.appendChild(h('div', {class: 'note'}, 'share of all its attention over the ' + D.texts.length + ' windows'));
  const ol = sideBox.appendChild(h('ol', {class: 'hv-top'}));
  for (const [t, share, count] of e.top) ol.appendChild(h('li', {}, '"' + t + '" ' + (100 * share).toFixed(1) + '% (' + count + 'x)'));
  sideBox.appendChild(h('p', {class: 'hv-dist'}, 'mean attention distance: ' + e.dist.toFixed(1) + ' tokens'));}
function show(layer, head){
  const key = layer + ',' + head;
  if (!entry(key)) {st.key = null; title.textContent = 'layer ' + layer + ', head ' + head + ': no text view kept'; text(); heat(); side(); return;}
  st.key = key; if (pick) pick.value = key;
  title.textContent = (D.model ? D.model + ', ' : '') + 'layer ' + layer + ', head ' + head + ': attention on ' +
    D.texts.length + ' held-out text window' + (D.texts.length > 1 ? 's' : '') + (D.data ? ' of ' + D.data : '') + ' (' + L + ' tokens each)';
  text(); heat(); side();}
note.textContent = D.exact ? 'Every weight of every row is kept (exact, to 4 decimals).' :
  'Each query keeps its top ' + K + ' keys (rows with at most ' + K + ' keys are exact); the weight of the others is summed as "other" and their heatmap cells are blank. Weights to 4 decimals.';
title.textContent = 'Click a head to see its attention on text.';
return {show: show, select: function(w, q){wsel.value = String(w); st.w = w; st.pin = -1; text(); if (q !== undefined) pin(q); side();},
        state: st};
};
"""


def _encode(keys: np.ndarray, weights: np.ndarray) -> str:
    """[L, k] int keys (-1 = none) and float weights -> base64 of little-endian uint16 (key, weight) pairs."""
    out = np.empty((*keys.shape, 2), dtype="<u2")
    out[..., 0] = np.where(keys < 0, NO_KEY, keys)
    out[..., 1] = np.rint(np.clip(weights, 0, 1) * WEIGHT_SCALE).astype(np.int64)
    return base64.b64encode(out.tobytes()).decode("ascii")


def head_view_payload(views: "TextViews", heads: Iterable[tuple[int, int]] | None = None, top: int = 8) -> dict[str, Any]:
    """The data the head view draws: every head of ``views`` (or ``heads``), each query's kept keys;
    ``heads`` is a :class:`attnscope.pages.Computed` mapping ("layer,head" -> the head's entry, made when read)."""
    if views.length >= NO_KEY:
        raise ValueError(f"windows of {views.length} tokens do not fit the view's 16-bit positions")
    chosen = views.heads if heads is None else [(int(l), int(h)) for l, h in heads]
    for layer, head in chosen:
        views.check_head(layer, head)

    def entry(key: str) -> dict[str, Any]:
        layer, head = map(int, key.split(","))
        keys, weights = views.keys[layer][head], views.weights[layer][head]  # [W, L, k]
        return {"w": [_encode(keys[w], weights[w]) for w in range(views.n_windows)],
                "top": [[token_label(t), round(share, 5), n] for t, share, n in views.top_tokens(layer, head, top)],
                "dist": number(round(views.mean_distance(layer, head), 3))}

    order = [f"{layer},{head}" for layer, head in chosen]
    special = [[int(x) for x in row] for row in views.special] or [[0] * views.length] * views.n_windows
    return {"k": int(min(views.k, views.length)), "exact": bool(views.exact), "scale": WEIGHT_SCALE, "noKey": NO_KEY,
            "length": views.length, "heatMax": HEAT_MAX, "causal": views.causal,
            "tokens": [[token_label(t) for t in row] for row in views.labels],
            "texts": [[token_text(t) for t in row] for row in views.texts], "special": special, "heads": Computed(order, entry), "order": order,
            "model": str(views.info.get("model", "")), "data": str(views.info.get("data", ""))}


def head_view_script() -> str:
    """The inline script defining ``window.attnscopeHeadView(root, data)`` -> ``{show(layer, head), select(window,
    query)}`` (data: :func:`head_view_payload`)."""
    return script(DOM_JS + JS)


def head_view_parts(views: "TextViews", heads: Iterable[tuple[int, int]] | None = None,
                    show: tuple[int, int] | None = None, element_id: str | None = None,
                    hook: str | None = None) -> Iterator[str]:
    """:func:`head_view_fragment` in pieces (the heads checked at once, their data made as the pieces are read)."""
    root = check_element_id(element_id) or new_id("hv")
    check_hook(hook)
    data = head_view_payload(views, heads)
    call = (f"const v = attnscopeHeadView(document.getElementById({js_string(root)}), "
            f"JSON.parse(document.getElementById({js_string(root + '-data')}).textContent));")
    if show is not None:
        call += f" v.show({int(show[0])}, {int(show[1])});"
    if hook:
        call += f" window.{hook} = v.show; window.{hook}View = v;"

    def pieces() -> Iterator[str]:
        yield f'{style(CSS)}\n<div class="hv" id="{esc(root)}"></div>\n'
        yield from json_script_parts({k: v for k, v in data.items() if k != "heads"}, f"{root}-data")
        for key in data["order"]:  # each head's entry its own element, parsed when the head is first shown
            yield "\n"
            yield from json_script_parts(data["heads"][key], f"{root}-h-{key.replace(',', '-')}")
        yield f"\n{head_view_script()}\n{script(f'(function(){{{call}}})();')}"

    return pieces()


def head_view_fragment(views: "TextViews", heads: Iterable[tuple[int, int]] | None = None,
                       show: tuple[int, int] | None = None, element_id: str | None = None,
                       hook: str | None = None) -> str:
    """A self-contained HTML fragment: the head view of ``heads`` (default all), showing ``show`` at once.
    ``element_id``: the root element's id (default a fresh one; the data's is ``<id>-data``). ``hook``: a
    global function name the page's other scripts call as ``hook(layer, head)`` to show a head."""
    return "".join(head_view_parts(views, heads, show, element_id, hook))


@dataclass
class HeadView:
    """One head's attention on the atlas's text windows: displays itself in Jupyter (``_repr_html_``); ``table``
    holds exactly the weights drawn (:meth:`attnscope.heads.text.TextViews.table`)."""

    views: "TextViews"
    layer: int
    head: int

    @classmethod
    def of(cls, result: Any, layer: int, head: int) -> "HeadView":
        views = getattr(result, "views", None)
        if views is None:
            from attnscope.errors import InputError

            raise InputError("this atlas kept no text windows (it ran without the text probe, or is pooled): "
                             "run attnscope.atlas(..., probes='both') for head views", params="probes")
        views.check_head(layer, head)
        return cls(views, int(layer), int(head))

    @property
    def table(self) -> "pd.DataFrame":
        return self.views.table(self.layer, self.head)

    def html(self) -> str:
        """The fragment (style, data, script) of this one head."""
        return head_view_fragment(self.views, heads=[(self.layer, self.head)], show=(self.layer, self.head))

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        k = "every key" if self.views.exact else f"top {self.views.k} keys per query"
        return (f"HeadView(layer={self.layer}, head={self.head}: {self.views.n_windows} windows x "
                f"{self.views.length} tokens, {k}; .table for the weights)")
