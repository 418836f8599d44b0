"""HTML pages: one home for what every page of attnscope shares, as :mod:`attnscope.plots` is for figures.

Every page is one self-contained file: no network, no external script, font or style at view time. This room
owns the pieces each page needs, so that a room writing a page brings only its own section and script:

* :func:`esc`          -- text from a model, a corpus or a user, escaped for element content and attributes
  (a corpus window holding ``<script>`` or ``</div>`` stays text)
* :func:`json_script`  -- data embedded as JSON in ``<script type="application/json" id=...>``, with ``</``
  and ``<!--`` neutralised so no string inside it can close the element; read it in the page's script with
  ``JSON.parse(document.getElementById(id).textContent)``. :func:`json_script_parts` gives the same text in
  pieces (one per value a few levels down: a head's data, a window), :func:`json_parts` the JSON alone
* :func:`style`, :func:`script` -- inline ``<style>`` / ``<script>`` elements (a ``</script>`` or
  ``</style>`` inside them is refused: it would end the element early)
* :func:`document`     -- the whole page: doctype, charset, title, :data:`BASE_CSS` plus a page's own CSS,
  an escaped heading and an optional subtitle line around a body of sections; :func:`document_parts` the
  same around a body given in pieces, itself in pieces
* :func:`number`       -- a float made JSON-safe (NaN and infinities become null, numpy scalars Python's)
* :class:`Computed`   -- a mapping whose values are made when read (:func:`json_parts` writes each and lets it go)
* :func:`new_id`       -- a unique element id prefix, so that several fragments (a notebook's cells)
  can live in one document
* :func:`js_string`    -- text as a JavaScript string literal inside an inline script (an element id passed to
  ``getElementById``: never pasted raw into code); :func:`check_element_id` / :func:`check_hook` refuse an id or a
  hook name an API caller gives that is no HTML id / JavaScript name
* :func:`token_label`, :func:`token_text` -- a token as a label (whitespace visible) or in running text: None,
  controls, bidirectional overrides, zero-width characters and lone surrogates shown as escapes on every path
* :data:`DOM_JS`       -- the page scripts' shared helpers: ``attnscopeDom.h(tag, attrs, text)`` (an HTML
  element) and ``attnscopeDom.s(...)`` (an SVG one), text always set as ``textContent`` (never parsed)

Pieces: a page of many megabytes (the atlas's head views) is never one string. Its builders yield pieces
(``*_parts``; the data of a ``json_script_parts`` is made when the pieces are first asked for, and each
JSON piece when it is reached), :func:`attnscope.outputs.write_result_set` writes an iterable of pieces
to the file as they come (hashing as it goes), and the string forms (``document``, ``json_script``, the
fragments for a notebook) are the pieces joined once. A head's data is in a :class:`Computed` mapping: made
when its piece is written, gone after.

Sections built on it: :mod:`.head_view` (a head's attention on real text, token by token: the atlas page
and :meth:`attnscope.atlas.AtlasResult.view` in notebooks) and :mod:`.token_effects` (a per-token
quantity, e.g. the change in loss under an intervention, coloured on the text). The atlas page
(:func:`attnscope.atlas.html.atlas_page`), the emergence page (:func:`attnscope.emergence.html.emergence_page`)
and the model report (:func:`attnscope.report.render_html`) are framed by :func:`document`.

A new page: ``document(title, body, css=PAGE_CSS)`` around its sections; its data through
``json_script(data, "xx-data")``; its ``<style>``/``<script>`` through :func:`style`/:func:`script` (a script
drawing elements starts with :data:`DOM_JS`); every text from outside through :func:`esc`, every token through
:func:`token_label` / :func:`token_text`, every id in a script through :func:`js_string`.
"""

from __future__ import annotations

import html
import json
import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
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


#: how many levels of nested dicts and lists :func:`json_parts` opens into pieces (below: one piece per value)
JSON_DEPTH = 3


def _json_text(data: Any) -> str:
    # `</` could close the script element; `<!--` could open a comment state in old parsers. A `<` is only ever
    # inside a JSON string, and every string is whole inside one piece: escaping piece by piece is exact.
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_plain)
    return text.replace("</", "<\\/").replace("<!--", "<\\u0021--")


class Computed(Mapping):
    """``{key: make(key) for key in keys}``, each value made when it is read and not kept: the data of a large
    page (a head's weights) exists one value at a time while :func:`json_parts` writes it."""

    def __init__(self, keys: Iterable[str], make: Callable[[str], Any]):
        self._keys, self._make = list(keys), make
        self._known = set(self._keys)

    def __getitem__(self, key: str) -> Any:
        if key not in self._known:
            raise KeyError(key)
        return self._make(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):  # a Computed one a whole value holds: made here
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON-able")


def json_parts(data: Any, depth: int = JSON_DEPTH) -> Iterator[str]:
    """``data`` as compact JSON in pieces (joined: one JSON text), safe inside a ``<script>`` element: dicts
    (string keys) and lists are opened ``depth`` levels down, each value below that is one piece, made when
    it is reached (a :class:`Computed` mapping is opened at any depth)."""
    if isinstance(data, Computed):
        depth = max(depth, 1)
    if depth > 0 and isinstance(data, Mapping) and data and all(isinstance(k, str) for k in data):
        yield "{"
        for i, (key, value) in enumerate(data.items()):
            yield ("," if i else "") + _json_text(key) + ":"
            yield from json_parts(value, depth - 1)
        yield "}"
    elif depth > 0 and isinstance(data, (list, tuple)) and data:
        yield "["
        for i, value in enumerate(data):
            if i:
                yield ","
            yield from json_parts(value, depth - 1)
        yield "]"
    else:
        yield _json_text(data)


def json_script_parts(data: Any, element_id: str) -> Iterator[str]:
    """:func:`json_script` in pieces (:func:`json_parts`)."""
    yield f'<script type="application/json" id="{esc(element_id)}">'
    yield from json_parts(data)
    yield "</script>"


def json_script(data: Any, element_id: str) -> str:
    """``data`` as JSON inside ``<script type="application/json" id="element_id">``; no string in it can end
    the element (``</script>`` travels as ``<\\/script>``, which JSON reads back unchanged). NaN is refused:
    pass values through :func:`number` first."""
    return "".join(json_script_parts(data, element_id))


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


def js_string(text: str) -> str:
    """``text`` as a JavaScript string literal safe inside an inline ``<script>`` (JSON-quoted: a quote, a backslash,
    ``</script>`` or a line separator in it never ends the string or the element)."""
    return _json_text(str(text)).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def token_label(token: Any) -> str:
    """A token as a label on a page (:func:`attnscope.heads.tokens.label`): whitespace visible, every character that
    shows as nothing or changes the text after it (a right-to-left override, a zero-width space, a control, a lone
    surrogate) as its escape; ``∅`` for None or no text."""
    from attnscope.heads.tokens import label

    return label(token)


def token_text(token: Any) -> str:
    """A token in running text on a page (:func:`attnscope.heads.tokens.readable`): spaces, tabs and newlines kept,
    the characters :func:`token_label` escapes escaped; None is no text."""
    from attnscope.heads.tokens import readable

    if token is None or (isinstance(token, float) and token != token):
        return ""
    return readable(token if isinstance(token, str) else str(token))


def check_element_id(element_id: Any, param: str = "element_id") -> str | None:
    """``element_id`` as given (None passes): a non-empty string of at most 200 characters without whitespace
    or control characters (an HTML id); anything else is one InputError naming ``param``."""
    from attnscope.errors import ArgumentTypeError, InputError, excerpt

    if element_id is None:
        return None
    if not isinstance(element_id, str):
        raise ArgumentTypeError(f"{param} must be a string (an HTML id), not {type(element_id).__name__}", params=param)
    if not element_id or len(element_id) > 200 or any(c.isspace() or not c.isprintable() for c in element_id):
        raise InputError(f"{param} {excerpt(element_id, 60)} is no HTML id: 1 to 200 printable characters, no "
                         "whitespace", params=param)
    return element_id


def check_hook(hook: Any, param: str = "hook") -> str | None:
    """``hook`` as given (None passes): a JavaScript identifier (it becomes ``window.<hook>``); else one InputError."""
    import re

    from attnscope.errors import InputError, excerpt

    if hook is None:
        return None
    if not isinstance(hook, str) or not re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]{0,99}", hook):
        raise InputError(f"{param} {excerpt(hook, 60)} is no JavaScript name (letters, digits, _ and $)", params=param)
    return hook


def new_id(prefix: str = "as") -> str:
    """A fresh element-id prefix (``prefix-`` and 8 hex digits)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def document_parts(title: str, body: Iterable[str], *, css: str = "", heading: str | None = None,
                   subtitle: str | None = None, lang: str = "en") -> Iterator[str]:
    """:func:`document` around a ``body`` given in pieces, in pieces."""
    head = esc(title if heading is None else heading)
    sub = f'<p class="note">{esc(subtitle)}</p>\n' if subtitle else ""
    yield (f'<!DOCTYPE html>\n<html lang="{esc(lang)}"><head><meta charset="utf-8"><title>{esc(title)}</title>'
           f"{style(BASE_CSS + css)}</head><body>\n<h1>{head}</h1>\n{sub}")
    yield from body
    yield "\n</body></html>\n"


def document(title: str, body: str, *, css: str = "", heading: str | None = None, subtitle: str | None = None,
             lang: str = "en") -> str:
    """The whole self-contained page: ``title`` and ``heading`` (default: the title) and ``subtitle`` are
    text (escaped here); ``body`` is HTML (the sections, already escaped by whoever built them)."""
    return "".join(document_parts(title, [body], css=css, heading=heading, subtitle=subtitle, lang=lang))
