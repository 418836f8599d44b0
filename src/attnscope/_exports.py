"""How every attnscope subpackage exports its public API: one lazy mechanism, declared as data.

Each ``attnscope/<room>/__init__.py`` lists its public names by module::

    __all__, __getattr__, __dir__ = lazy_exports(__name__, {
        ".score": ["score", "summarize"],
        ".kernels": ["symmetry", "directionality"],
    })

``from attnscope.geometry import score`` then imports ``attnscope.geometry.score`` on first use only,
so importing a package (and the CLI's ``--help``) stays cheap, and ``dir()`` / tab completion in a
notebook shows the whole API. A name that is also the name of its module (``geometry.score`` the
function in ``geometry/score.py``) is bound at package import, so the function, not the module, is
what ``from attnscope.geometry import score`` gives whatever was imported first. A test imports every
name of every ``__all__``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


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
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        sys.modules[package].__dict__[name] = value  # cache: later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(public) | set(sys.modules[package].__dict__))

    for name, module in where.items():  # a function named like its module: bind it now (see above)
        if module.lstrip(".") == name:
            sys.modules[package].__dict__[name] = getattr(importlib.import_module(module, package), name)

    return public, __getattr__, __dir__
