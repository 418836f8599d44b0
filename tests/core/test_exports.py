"""One import surface: every package's _EXPORTS resolves lazily at run time and statically for type checkers."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from attnscope import _exportgen

PACKAGES = ["sources", "families", "geometry", "training", "sparse", "heads", "dynamics", "zoo", "runs", "plots", "atlas"]
SRC = Path(__file__).resolve().parents[2] / "src" / "attnscope"


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name):
    pkg = importlib.import_module(f"attnscope.{name}")
    assert pkg.__all__, f"attnscope.{name} exports nothing"
    for attr in pkg.__all__:
        assert getattr(pkg, attr) is not None, f"attnscope.{name}.{attr}"
    assert set(pkg.__all__) <= set(dir(pkg))


def test_the_static_blocks_are_generated_from_the_one_list():
    """The TYPE_CHECKING re-exports say exactly what _EXPORTS says (run `python -m attnscope._exportgen`)."""
    inits = _exportgen.package_inits(SRC)
    assert SRC / "__init__.py" in inits and SRC / "geometry" / "__init__.py" in inits
    stale = [str(p.relative_to(SRC)) for p in inits if _exportgen.expected_text(p) != p.read_text()]
    assert stale == [], f"out of step with _EXPORTS: {stale}; run python -m attnscope._exportgen"


def test_a_stale_block_is_caught(tmp_path):
    init = tmp_path / "pkg" / "__init__.py"
    init.parent.mkdir()
    good = '_EXPORTS = {".a": ["f", "g"]}\n\n' + _exportgen.generated_block({".a": ["f", "g"]}) + "x = 1\n"
    init.write_text(good)
    assert _exportgen.expected_text(init) == good
    init.write_text(good.replace('_EXPORTS = {".a": ["f", "g"]}', '_EXPORTS = {".a": ["f", "g", "h"]}'))
    fixed = _exportgen.expected_text(init)
    assert "h as h," in fixed and fixed.endswith("# <<< generated\nx = 1\n")


def test_the_runtime_all_is_the_static_all():
    for name in [None, *PACKAGES]:
        pkg = importlib.import_module("attnscope" if name is None else f"attnscope.{name}")
        init = Path(pkg.__file__)
        exports = _exportgen.declared_exports(init)
        if exports is None:
            continue
        static = sorted(n for names in exports.values() for n in names)
        assert sorted(set(pkg.__all__) & set(static)) == static


def test_a_function_named_like_its_module_wins_whatever_is_imported_first():
    code = ("import sys, attnscope.training.compare; from attnscope.training import compare;"
            "print(callable(compare) and compare is sys.modules['attnscope.training.compare'].compare)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "True", r.stderr


def test_the_rooms_are_attributes_of_attnscope_imported_on_first_use():
    code = ("import sys, attnscope;"
            "before = sorted(m for m in sys.modules if m.startswith('attnscope.'));"
            "ok = callable(attnscope.geometry.score) and 'geometry' in dir(attnscope) and 'heads' in dir(attnscope);"
            "print(before, ok, 'attnscope.geometry' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split("] ")[0] + "]" == "['attnscope._exports']", r.stdout + r.stderr
    assert r.stdout.strip().endswith("True True"), r.stdout + r.stderr


def test_importing_packages_is_lazy():
    code = ("import sys; import attnscope.heads, attnscope.sparse, attnscope.zoo, attnscope.runs, attnscope.dynamics;"
            "import attnscope.geometry, attnscope.training;"
            "print(sorted(m for m in ('torch', 'pandas', 'numba', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_unknown_name_is_an_attribute_error():
    import attnscope
    import attnscope.heads

    with pytest.raises(AttributeError, match="no attribute"):
        attnscope.heads.not_a_thing  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute"):
        attnscope.not_a_room  # noqa: B018


def test_attnscope_atlas_is_callable_lazily():
    code = ("import sys, attnscope; from attnscope.atlas import atlas, spearman; import attnscope.atlas.build as b;"
            "print(callable(attnscope.atlas), atlas is b.atlas, callable(spearman),"
            " sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "True True True []", r.stdout + r.stderr


def test_the_atlas_room_stays_a_module_when_its_function_was_used_first():
    """``attnscope.atlas`` used as a function first (a notebook's first cell), then a submodule imported by
    name: the room stays bound (it is callable), so ``import attnscope.atlas.html as h`` works."""
    code = ("import attnscope; f = attnscope.atlas; import attnscope.atlas.html as h; import attnscope.atlas.build as b;"
            "print(callable(attnscope.atlas), attnscope.atlas is __import__('sys').modules['attnscope.atlas'],"
            " hasattr(h, 'atlas_page'), f is attnscope.atlas)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "True True True True", r.stdout + r.stderr
