"""What a benchmark script does with its markdown section: print it, and put it into a docs page when asked.

A docs page holds the latest result of each benchmark, not a log of every run (earlier results belong
in CHANGELOG.md): a section whose heading line is already in the page replaces that section (up to the
next heading of the same or a higher level); a new heading is appended.
"""

from __future__ import annotations

import os
import tempfile


def _level(line: str) -> int:
    """The markdown heading level of ``line`` (0 when it is not a heading)."""
    stripped = line.lstrip("#")
    n = len(line) - len(stripped)
    return n if n and stripped.startswith(" ") else 0


def replace_section(page: str, text: str) -> str:
    """``page`` with the section headed by ``text``'s first line replaced by ``text`` (or ``text`` appended)."""
    body = text.strip("\n") + "\n"
    heading = body.splitlines()[0]
    level = _level(heading)
    lines = page.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if level and ln.rstrip("\n") == heading), None)
    if start is None:
        return page.rstrip("\n") + "\n\n" + body if page.strip() else body
    end = next((j for j in range(start + 1, len(lines)) if 0 < _level(lines[j]) <= level), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + body + ("\n" + tail if tail else "")


def emit(text: str, append: str | None = None) -> None:
    """Print ``text``; with ``append`` (a docs page), replace its section there (see the module docstring)."""
    print(text)
    if not append:
        return
    page = open(append, encoding="utf-8").read() if os.path.exists(append) else ""
    new = replace_section(page, text)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(append)), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(new)
    os.replace(tmp, append)


def unwritable(path: str | None, option: str = "--md") -> str | None:
    """Why ``path`` (a script's markdown output) cannot be written, as one sentence; None when it can (or is None).
    Asked before a benchmark runs, so that its minutes are not lost to a typo in the output path."""
    if not path:
        return None
    from attnscope.errors import AttnscopeError
    from attnscope.tables import check_writable

    try:
        check_writable(path, option)
    except AttnscopeError as exc:
        return str(exc)
    return None


def table(df, fmt: str = ".3f") -> str:
    """A pandas DataFrame as a Markdown table (numbers with ``fmt``; no dependency beyond pandas)."""
    def cell(v) -> str:
        if isinstance(v, float):
            return "-" if v != v else format(v, fmt)
        return str(v).replace("|", "\\|")

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *rows])
