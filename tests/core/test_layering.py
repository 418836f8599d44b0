"""The house's import directions, read from the source (every import, module level or inside a function).

* plots only draw: a figure module imports nothing that computes or owns data, except the tables
  helpers, the errors, and the zoo registry (which owns the order of modalities and stacks);
* a weight source never reaches up into the trainer, the analyses or the CLI (what a source needs of
  attnscope's own architecture lives in ``attnscope.architecture``);
* the library never imports the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "attnscope"


def _imports(path: Path, root: Path = SRC) -> set[str]:
    """Every attnscope module ``path`` imports (absolute names; relative imports resolved)."""
    pkg = ["attnscope", *path.relative_to(root).parent.parts]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = pkg[: len(pkg) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from . import x` imports module x
    return {m for m in out if m == "attnscope" or m.startswith("attnscope.")}


def _modules(room: str, root: Path = SRC) -> list[Path]:
    return sorted((root / room).rglob("*.py"))


def _crossings(room: str, allowed: tuple[str, ...], root: Path = SRC) -> list[str]:
    bad = []
    for path in _modules(room, root):
        for mod in sorted(_imports(path, root)):
            if not any(mod == a or mod.startswith(a + ".") for a in allowed):
                bad.append(f"{path.relative_to(root).as_posix()} imports {mod}")
    return bad


def test_plots_only_draw():
    allowed = ("attnscope.plots", "attnscope.tables", "attnscope.errors", "attnscope._exports", "attnscope.zoo.registry",
               "attnscope.naming")
    assert _crossings("plots", allowed) == []


def test_sources_never_reach_up():
    allowed = ("attnscope.sources", "attnscope.errors", "attnscope.tables", "attnscope.architecture",
               "attnscope.families", "attnscope._exports", "attnscope.progress")
    assert _crossings("sources", allowed) == []


@pytest.mark.parametrize("room", sorted(p.name for p in SRC.iterdir() if p.is_dir() and p.name not in ("cli", "__pycache__")))
def test_the_library_never_imports_the_cli(room):
    assert [c for c in _crossings(room, ("attnscope",)) if "attnscope.cli" in c] == []
    assert not any(m.startswith("attnscope.cli") for p in _modules(room) for m in _imports(p))


@pytest.mark.parametrize("room", ["geometry", "heads", "training", "dynamics", "sources", "families", "sparse",
                                  "runs"])
def test_compute_never_imports_plots(room):
    """Compute returns tables; only the CLI, the report and the atlas page draw (a model's name: attnscope.naming)."""
    assert [c for c in _crossings(room, ("attnscope",)) if "attnscope.plots" in c] == []


def test_the_checker_sees_a_crossing(tmp_path):
    """The reader above catches a function-level relative import (so the tests can fail)."""
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "survey.py").write_text("def f():\n    from ..zoo.report import load_results\n")
    (tmp_path / "plots" / "ok.py").write_text("from attnscope.zoo.registry import STACK_ORDER\nfrom . import base\n")
    assert _crossings("plots", ("attnscope.plots", "attnscope.zoo.registry"), root=tmp_path) == [
        "plots/survey.py imports attnscope.zoo.report", "plots/survey.py imports attnscope.zoo.report.load_results"]
