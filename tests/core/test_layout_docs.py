"""README's Layout and the package docstring name every room (subpackage) and every public module."""

from __future__ import annotations

import re
from pathlib import Path

import attnscope

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(attnscope.__file__).parent


def _rooms_and_modules() -> tuple[list[str], list[str]]:
    rooms = sorted(p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    modules = sorted(p.stem for p in PKG.glob("*.py") if not p.stem.startswith("_"))
    return rooms, modules


def test_readme_layout_names_every_room_and_module():
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout"):]
    layout = layout[: layout.index("\n## ", 5)] if "\n## " in layout[5:] else layout
    rooms, modules = _rooms_and_modules()
    missing = [f"{r}/" for r in rooms if f"`{r}/`" not in layout] + [f"{m}.py" for m in modules if f"`{m}.py`" not in layout]
    assert not missing, missing


def test_the_package_docstring_names_every_room_and_module():
    doc = attnscope.__doc__ or ""
    rooms, modules = _rooms_and_modules()
    words = set(re.findall(r"\b\w+\b", doc))
    missing = [n for n in [*rooms, *modules] if n not in words]
    assert not missing, missing
