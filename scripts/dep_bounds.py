"""Pip constraints for the lowest/latest test environments, read from pyproject.toml.

`lowest`: every direct dependency (``[project] dependencies`` and the extras named on the command line)
pinned to its declared lower bound (``name>=X`` becomes ``name==X``); transitive dependencies are left
to pip ("lowest-direct"). `latest`: no pins, pip takes the newest versions the ranges allow.
In both, torch is held at the CPU build scripts/setup.sh installs (TORCH, default 2.13.0), because
PyPI's Linux torch is a multi-GB CUDA build.

    python scripts/dep_bounds.py lowest test,demo > constraints.txt
    python scripts/dep_bounds.py versions test,demo   # installed version of each direct dependency
"""

from __future__ import annotations

import os
import sys
import tomllib
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare venv: pip carries its own copy of packaging
    from pip._vendor.packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
TORCH = os.environ.get("TORCH", "2.13.0")


def direct_requirements(extras: list[str]) -> list[Requirement]:
    """The direct dependencies: [project] dependencies plus the named extras, first mention wins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    seen: dict[str, Requirement] = {}
    for line in lines:
        req = Requirement(line)
        seen.setdefault(req.name.lower().replace("_", "-"), req)
    return list(seen.values())


def lower_bound(req: Requirement) -> str | None:
    """The version after `>=` (or `==`) in a requirement, None when it has no lower bound."""
    for spec in req.specifier:
        if spec.operator in (">=", "==", "~="):
            return spec.version
    return None


def constraints(mode: str, extras: list[str]) -> list[str]:
    """Constraint lines for `mode` ('lowest' or 'latest')."""
    out = [f"torch=={TORCH}"]
    if mode == "latest":
        return out
    for req in direct_requirements(extras):
        bound = lower_bound(req)
        if req.name != "torch" and bound is not None:
            out.append(f"{req.name}=={bound}")
    return out


def versions(extras: list[str]) -> list[str]:
    """'name  lower-bound  installed' for each direct dependency, as installed in this interpreter."""
    rows = []
    for req in direct_requirements(extras):
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            have = "(missing)"
        rows.append(f"{req.name:24} {str(req.specifier) or '(any)':12} {have}")
    return rows


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[0] not in ("lowest", "latest", "versions"):
        print("usage: dep_bounds.py lowest|latest|versions [EXTRA,EXTRA]", file=sys.stderr)
        return 2
    extras = [e for e in (argv[1] if len(argv) == 2 else "").split(",") if e]
    lines = versions(extras) if argv[0] == "versions" else constraints(argv[0], extras)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
