"""One import surface: every subpackage's __all__ resolves, lazily, the same way."""

import importlib
import subprocess
import sys

import pytest

PACKAGES = ["sources", "families", "geometry", "training", "sparse", "heads", "dynamics", "zoo", "runs", "plots", "atlas"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name):
    pkg = importlib.import_module(f"attnscope.{name}")
    assert pkg.__all__, f"attnscope.{name} exports nothing"
    for attr in pkg.__all__:
        assert getattr(pkg, attr) is not None, f"attnscope.{name}.{attr}"
    assert set(pkg.__all__) <= set(dir(pkg))


def test_a_function_named_like_its_module_wins_whatever_is_imported_first():
    code = ("import sys, attnscope.geometry.score; from attnscope.geometry import score;"
            "print(callable(score) and score is sys.modules['attnscope.geometry.score'].score)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "True", r.stderr


def test_importing_packages_is_lazy():
    code = ("import sys; import attnscope.heads, attnscope.sparse, attnscope.zoo, attnscope.runs, attnscope.dynamics;"
            "print(sorted(m for m in ('torch', 'pandas', 'numba', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_unknown_name_is_an_attribute_error():
    import attnscope.heads

    with pytest.raises(AttributeError, match="no attribute"):
        attnscope.heads.not_a_thing  # noqa: B018


def test_attnscope_atlas_is_callable_lazily():
    code = ("import sys, attnscope; from attnscope.atlas import atlas, spearman; import attnscope.atlas.build as b;"
            "print(callable(attnscope.atlas), atlas is b.atlas, callable(spearman),"
            " sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "True True True []", r.stdout + r.stderr
