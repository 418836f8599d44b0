"""Family specs: where W_q and W_k live in each architecture, keyed by config ``model_type``.

Every module in this package may define ``SPECS`` (a list of :class:`FamilySpec`); they are
collected automatically, so adding a family is adding one small module. ``get_family(config)``
finds the spec for a config or raises one clear line naming the supported model types.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from attnscope._exports import lazy_exports
from attnscope.errors import UnsupportedError

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".base": ["AttentionFactors", "FamilySpec", "StackInfo", "kv_head_index"],
})
__all__ += ["get_family", "registry"]

if TYPE_CHECKING:  # pragma: no cover
    from .base import FamilySpec

_REGISTRY: dict[str, FamilySpec] | None = None


def registry() -> dict[str, FamilySpec]:
    """model_type -> spec, collected from every module of this package that defines ``SPECS``."""
    global _REGISTRY
    if _REGISTRY is None:
        reg: dict[str, FamilySpec] = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if info.name.startswith("_") or info.name == "base":
                continue
            mod = importlib.import_module(f"{__name__}.{info.name}")
            for spec in getattr(mod, "SPECS", ()):
                for mt in spec.model_types:
                    if mt in reg and reg[mt] is not spec:
                        raise RuntimeError(f"model_type {mt!r} claimed by two family specs")
                    reg[mt] = spec
        _REGISTRY = reg
    return _REGISTRY


def get_family(config: dict[str, Any]) -> FamilySpec:
    """The spec for ``config['model_type']``; UnsupportedError (one line) if there is none."""
    mt = config.get("model_type")
    reg = registry()
    if mt in reg:
        return reg[mt]
    supported = ", ".join(sorted(k for k in reg if ":" not in k))
    raise UnsupportedError(
        f"unsupported model_type {mt!r}; supported: {supported}. "
        "To add one, write a small spec module in attnscope/families/ (see docs/families.md)."
    )
