"""The lowest-direct constraints (scripts/dep_bounds.py) and docs/dependencies.md follow pyproject.toml."""

import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _dep_bounds():
    spec = importlib.util.spec_from_file_location("dep_bounds", ROOT / "scripts" / "dep_bounds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bounds() -> dict[str, str]:
    """{name: lower bound} of every direct dependency of the lowest run (the [test,demo] install)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    out = {}
    for line in project["dependencies"] + extras["test"] + extras["demo"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(?:>=\s*([0-9][^,;\s]*))?.*", line)
        out.setdefault(m.group(1), m.group(2))
    return out


def test_lowest_pins_every_bounded_direct_dependency_at_its_bound():
    pins = dict(line.split("==") for line in _dep_bounds().constraints("lowest", ["test", "demo"]))
    bounds = _bounds()
    assert pins.pop("torch") == "2.13.0"  # held at the CPU build scripts/setup.sh installs
    assert pins == {name: b for name, b in bounds.items() if b is not None and name != "torch"}


def test_latest_holds_only_torch():
    assert _dep_bounds().constraints("latest", ["test", "demo"]) == ["torch==2.13.0"]


def test_the_docs_table_lists_the_bounds_of_pyproject():
    doc = (ROOT / "docs" / "dependencies.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Za-z0-9_.-]+)` \| `>=([^`]+)` \|", doc, re.M))
    assert rows == {name: b for name, b in _bounds().items() if b is not None}
