"""How every attnscope package exports its public API: one lazy mechanism, declared once as data.

Each ``attnscope/<room>/__init__.py`` lists its public names by module, once, in ``_EXPORTS``::

    _EXPORTS = {
        ".scoring": ["score", "summarize"],
        ".kernels": ["symmetry", "directionality"],
    }

(the key ``"."`` lists subpackages: ``attnscope`` itself exports ``geometry``, ``heads``, ...). Below
it, a block generated from that list by ``python -m attnscope._exportgen`` gives

* at run time, ``lazy_exports``: ``from attnscope.geometry import score`` imports
  ``attnscope.geometry.scoring`` on first use only, so importing a package (and the CLI's ``--help``)
  stays cheap, and ``dir()`` / tab completion in a notebook shows the whole API;
* to type checkers and editors (``if TYPE_CHECKING:``), the same names as plain re-exports
  (``from .scoring import score as score``), so mypy, pyright and jedi see real signatures.

Any submodule is reachable as an attribute too (``attnscope.atlas.stats.spearman_test``,
``attnscope.zoo.registry``: imported on first use, as the docs write them), listed or not.
``tests/core/test_exports.py`` fails when a block is out of step with its list (``python -m
attnscope._exportgen`` rewrites the blocks) and imports every name. A name that is also the name of
its module (``training.compare`` the function in ``training/compare.py``) is bound at package
import, so the function, not the module, is what ``from attnscope.training import compare`` gives
whatever was imported first.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

def _resolve(package: str, module: str, name: str) -> Any:
    if module == ".":  # a subpackage or submodule of package
        return importlib.import_module(f".{name}", package)
    return getattr(importlib.import_module(module, package), name)


def lazy_exports(
    package: str, names_by_module: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` exporting ``names_by_module`` lazily."""
    where: dict[str, str] = {}
    for module, names in names_by_module.items():
        for name in names:
            if name in where:
                raise RuntimeError(f"{package}: {name!r} exported twice")
            where[name] = module
    public = sorted(where)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            return submodules(package)(name)  # any submodule, as the docs name them
        value = _resolve(package, module, name)
        room = sys.modules.get(f"{package}.{name}")
        if room is not None and callable(room):  # a callable room (``attnscope.atlas``): keep the module bound,
            value = room  # or ``import attnscope.atlas.html as h`` would look for ``html`` on the function
        sys.modules[package].__dict__[name] = value  # cache: later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(public) | set(sys.modules[package].__dict__))

    for name, module in where.items():  # a function named like its module: bind it now (see above)
        if module.lstrip(".") == name:
            sys.modules[package].__dict__[name] = _resolve(package, module, name)

    return public, __getattr__, __dir__


def submodules(package: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``package.<name>`` on first use (``attnscope.sources.gguf_header``
    after a bare ``import attnscope``); other names: AttributeError."""

    def __getattr__(name: str) -> Any:
        if name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
            return importlib.import_module(f".{name}", package)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
