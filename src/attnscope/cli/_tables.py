"""Console tables that fit the terminal: one helper every CLI module prints its tables with.

A table wider than the console is split into several tables by columns; each part repeats all the
key columns the caller names (e.g. ``model``, ``stack``, ``offset``) so it can be read on its own. Column names are never truncated: a
column is as wide as its name or its widest cell; a long text column too wide for any part wraps its
cells rather than squeezing the key columns. ``--json`` and ``--out`` still carry everything;
this is only what a person reads (``COLUMNS`` wide, or 80 columns when the output is not a terminal).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

__all__ = ["FOLD_WIDTH", "print_frame", "print_table", "split_columns"]

#: cells of a foldable column (model names) wrap beyond this many cells
FOLD_WIDTH = 24


def _cell_width(cell: str) -> int:
    return Text.from_markup(cell).cell_len


def split_columns(widths: Sequence[int], width: int, keys: int | Sequence[int] = 1) -> list[list[int]]:
    """Group column indices so that each group (the key columns + its own) fits ``width``.

    ``keys``: the number of leading key columns, or their indices (anywhere in the table); every group
    holds all of them, and each group lists its columns in the table's order.
    A rich table with the default box costs ``w + 3`` cells per column (padding and a rule) plus 1;
    a column too wide for any group still gets a group of its own (the console folds it).
    """
    def cost(cols: Sequence[int]) -> int:
        return 1 + sum(widths[i] + 3 for i in cols)

    key_cols = list(range(min(keys, len(widths)))) if isinstance(keys, int) else sorted(set(keys))
    groups: list[list[int]] = []
    cur: list[int] = []
    for i in (i for i in range(len(widths)) if i not in key_cols):
        if cur and cost(key_cols + cur + [i]) > width:
            groups.append(sorted(key_cols + cur))
            cur = []
        cur.append(i)
    if cur or not groups:
        groups.append(sorted(key_cols + cur))
    return groups


def print_table(
    con: Any,
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    keys: int | Sequence[str] = 1,
    left: Sequence[str] = (),
    fold: Sequence[str] = (),
    width: int | None = None,
) -> None:
    """Print ``rows`` (cells as strings, rich markup allowed) under ``header`` on console ``con``.

    Splits by columns when wider than ``width`` (default: the console's width), repeating the key
    columns in every part (``keys``: the names of the columns that identify a row, e.g. ``("model",
    "stack", "offset")``, or the number of leading ones); columns named in ``left`` are left-justified, the rest
    right; cells of columns named in ``fold`` (long names) wrap onto more lines beyond
    :data:`FOLD_WIDTH` cells or a third of the width, whichever is more. Header names never wrap or shorten.
    """
    width = width or con.width
    fold_at = max(FOLD_WIDTH, width // 3)  # a wide console (COLUMNS=200) shows long names whole
    widths = []
    for i, h in enumerate(header):
        w = max([len(h)] + [_cell_width(r[i]) for r in rows])
        widths.append(max(len(h), min(w, fold_at)) if h in fold else w)
    key_cols: int | list[int] = keys if isinstance(keys, int) else [header.index(k) for k in keys if k in header]
    unknown = [] if isinstance(keys, int) else [k for k in keys if k not in header]
    if unknown:
        raise ValueError(f"keys: {', '.join(unknown)} not in the header {list(header)}")
    _narrow_folded_keys(widths, header, key_cols, fold, width)
    groups = split_columns(widths, width, key_cols)
    key_set = set(range(min(key_cols, len(widths)))) if isinstance(key_cols, int) else set(key_cols)
    for n, cols in enumerate(groups, 1):
        con.print(escape(title) + (f" ({n}/{len(groups)})" if len(groups) > 1 else ""), style="italic", highlight=False)
        own, wraps = _wrap_to_fit({i: widths[i] for i in cols}, header, key_set, width)
        t = Table()
        need = 1 + sum(own[i] + 3 for i in cols)
        fits = need <= width  # else rich shrinks columns: wrap, never crop a number
        for i in cols:
            t.add_column(escape(header[i]), justify="left" if header[i] in left else "right", width=own[i],
                         no_wrap=fits and header[i] not in fold and i not in wraps, overflow="fold")  # fmt: skip
        for r in rows:
            t.add_row(*[r[i] for i in cols])
        # a part still wider than the console after _wrap_to_fit (COLUMNS=20: the keys alone do not fit) keeps
        # its width and the terminal wraps its lines, rather than rich shrinking the key columns to nothing
        if fits:
            con.print(t)
            continue
        before = getattr(con, "_width", None)  # print(width=) is capped at the console's: widen the console itself
        con.width = need
        try:
            con.print(t)
        finally:
            con._width = before


def _wrap_to_fit(widths: dict[int, int], header: Sequence[str], keys: set[int], width: int) -> tuple[dict[int, int], set[int]]:
    """A part still wider than ``width`` (one long text column, e.g. a verdict): its widest non-key columns are
    narrowed (never below their name) and their cells wrap, so the key columns keep their whole width."""
    own = dict(widths)
    over = 1 + sum(w + 3 for w in own.values()) - width
    wraps: set[int] = set()
    for i in sorted((i for i in own if i not in keys), key=lambda i: -own[i]):
        if over <= 0:
            break
        cut = min(over, own[i] - len(header[i]))
        if cut > 0:
            own[i] -= cut
            over -= cut
            wraps.add(i)
    return own, wraps


def _narrow_folded_keys(widths: list[int], header: Sequence[str], keys: int | Sequence[int], fold: Sequence[str],
                        width: int) -> None:
    """Narrow foldable key columns (long names wrap) until the keys and the widest other column fit ``width``,
    so that no part squeezes a column below its name; never below the column's name or 8 cells."""
    key_cols = list(range(min(keys, len(widths)))) if isinstance(keys, int) else list(keys)
    others = [widths[i] for i in range(len(widths)) if i not in key_cols]
    excess = 1 + sum(widths[i] + 3 for i in key_cols) + (max(others) + 3 if others else 0) - width
    for i in key_cols:
        if excess <= 0:
            return
        if header[i] in fold:
            cut = min(excess, widths[i] - max(len(header[i]), 8))
            if cut > 0:
                widths[i] -= cut
                excess -= cut


def _fmt(v: Any, digits: int) -> str:
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.{digits}f}"
    return escape(str(v))


def print_frame(
    con: Any, title: str, df: Any, *, keys: int | Sequence[str] = 1, digits: int = 3, width: int | None = None
) -> None:
    """:func:`print_table` for a pandas DataFrame (floats to ``digits`` decimals, NaN as ``-``)."""
    header = [str(c) for c in df.columns]
    rows = [[_fmt(v, digits) for v in rec] for rec in df.itertuples(index=False, name=None)]
    left = [str(c) for c, dt in zip(df.columns, df.dtypes) if dt.kind in "OSUb"]
    print_table(con, title, header, rows, keys=keys, left=left, width=width)
