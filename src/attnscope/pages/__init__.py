"""HTML pages: one home for what every page of attnscope shares, as :mod:`attnscope.plots` is for figures.

Every page is one self-contained file: no network, no external script, font or style at view time. This room
owns the pieces each page needs, so that a room writing a page brings only its own section and script:

* :func:`esc`          -- text from a model, a corpus or a user, escaped for element content and attributes
  (a corpus window holding ``<script>`` or ``</div>`` stays text)
* :func:`json_script`  -- data embedded as JSON in ``<script type="application/json" id=...>``, with ``</``
  and ``<!--`` neutralised so no string inside it can close the element; read it in the page's script with
  ``JSON.parse(document.getElementById(id).textContent)``
* :func:`style`, :func:`script` -- inline ``<style>`` / ``<script>`` elements (a ``</script>`` or
  ``</style>`` inside them is refused: it would end the element early)
* :func:`document`     -- the whole page: doctype, charset, title, :data:`BASE_CSS` plus a page's own CSS,
  an escaped heading and an optional subtitle line around a body of sections
* :func:`number`       -- a float made JSON-safe (NaN and infinities become null, numpy scalars Python's)
* :func:`new_id`       -- a unique element id prefix, so that several fragments (a notebook's cells)
  can live in one document
* :data:`DOM_JS`       -- the page scripts' shared helpers: ``attnscopeDom.h(tag, attrs, text)`` (an HTML
  element) and ``attnscopeDom.s(...)`` (an SVG one), text always set as ``textContent`` (never parsed)

Sections built on it: :mod:`.head_view` (a head's attention on real text, token by token: the atlas page
and :meth:`attnscope.atlas.AtlasResult.view` in notebooks) and :mod:`.token_effects` (a per-token
quantity, e.g. the change in loss under an intervention, coloured on the text). The atlas page
(:func:`attnscope.atlas.html.atlas_page`), the emergence page (:func:`attnscope.emergence.html.emergence_page`)
and the model report (:func:`attnscope.report.render_html`) are framed by :func:`document`.

A new page: ``document(title, body, css=PAGE_CSS)`` around its sections; its data through
``json_script(data, "xx-data")``; its ``<style>``/``<script>`` through :func:`style`/:func:`script` (a script
drawing elements starts with :data:`DOM_JS`); every text from outside through :func:`esc`.
"""

from __future__ import annotations

import html
import json
import math
import uuid
from typing import Any

from attnscope._exports import submodules

__getattr__ = submodules(__name__)  # attnscope.pages.head_view / .token_effects, imported on first use

#: the look every page shares (a page adds its own rules after these)
BASE_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#1a1a2e;max-width:1150px}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
td.l,th.l{text-align:left}.note{color:#555;font-size:13px}.sub{color:#555}
"""


#: shared helpers of the inline scripts (include once per fragment with :func:`script`; defining twice is harmless)
DOM_JS = r"""
window.attnscopeDom = (function(){
function make(el, attrs, text){for (const a in (attrs || {})) el.setAttribute(a, attrs[a]);
  if (text !== undefined) el.textContent = text; return el;}
return {h: (tag, attrs, text) => make(document.createElement(tag), attrs, text),
        s: (tag, attrs, text) => make(document.createElementNS('http://www.w3.org/2000/svg', tag), attrs, text)};
})();
"""


def esc(text: Any) -> str:
    """``str(text)`` escaped for HTML element content and (double- or single-quoted) attribute values."""
    return html.escape(str(text), quote=True)


def _json_text(data: Any) -> str:
    # `</` could close the script element; `<!--` could open a comment state in old parsers
    return json.dumps(data, ensure_ascii=False, allow_nan=False).replace("</", "<\\/").replace("<!--", "<\\u0021--")


def json_script(data: Any, element_id: str) -> str:
    """``data`` as JSON inside ``<script type="application/json" id="element_id">``; no string in it can end
    the element (``</script>`` travels as ``<\\/script>``, which JSON reads back unchanged). NaN is refused:
    pass values through :func:`number` first."""
    return f'<script type="application/json" id="{esc(element_id)}">{_json_text(data)}</script>'


def _inline(tag: str, body: str) -> str:
    if f"</{tag}" in body.lower():
        raise ValueError(f"an inline <{tag}> must not hold '</{tag}': it would end the element early")
    return f"<{tag}>{body}</{tag}>"


def script(js: str) -> str:
    """An inline ``<script>`` element holding ``js`` (code written here, never text from a model or user)."""
    return _inline("script", js)


def style(css: str) -> str:
    """An inline ``<style>`` element holding ``css``."""
    return _inline("style", css)


def number(v: Any) -> Any:
    """A JSON-safe value: NaN / inf -> None, numpy scalars -> Python scalars; anything else as it is."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def new_id(prefix: str = "as") -> str:
    """A fresh element-id prefix (``prefix-`` and 8 hex digits)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def document(title: str, body: str, *, css: str = "", heading: str | None = None, subtitle: str | None = None,
             lang: str = "en") -> str:
    """The whole self-contained page: ``title`` and ``heading`` (default: the title) and ``subtitle`` are
    text (escaped here); ``body`` is HTML (the sections, already escaped by whoever built them)."""
    head = esc(title if heading is None else heading)
    sub = f'<p class="note">{esc(subtitle)}</p>\n' if subtitle else ""
    return (f'<!DOCTYPE html>\n<html lang="{esc(lang)}"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"{style(BASE_CSS + css)}</head><body>\n<h1>{head}</h1>\n{sub}{body}\n</body></html>\n")
