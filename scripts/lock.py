"""Write requirements/lock.txt: every package of a resolved environment, pinned, with the sha256 of every file
PyPI holds for that version (so the same lock installs on other platforms too).

Run by scripts/lock.sh (``make lock``) with the python of a freshly resolved venv; stdlib and ``packaging``
only. torch is left out (scripts/setup.sh installs it first, as a CPU build, from requirements/torch.txt),
and so is attnscope itself. The simple index's JSON form (PEP 691) gives the hashes: no file is downloaded.

    python scripts/lock.py --out requirements/lock.txt --extras test,demo
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

INDEX = os.environ.get("ATTNSCOPE_LOCK_INDEX", "https://pypi.org/simple")
LEFT_OUT = {"torch", "attnscope"}  # torch: requirements/torch.txt; attnscope: installed from the checkout


def frozen() -> list[tuple[str, str]]:
    """(name, version) of every distribution in this interpreter's environment, pip/setuptools/wheel too."""
    out = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
                         check=True, capture_output=True, text=True).stdout
    pins = []
    for line in out.splitlines():
        if "==" not in line or line.startswith("#"):
            raise SystemExit(f"lock: cannot pin {line!r} (installed from a path or URL?)")
        name, version = line.split("==", 1)
        if canonicalize_name(name) not in LEFT_OUT:
            pins.append((canonicalize_name(name), version.strip()))
    return sorted(pins)


def file_version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except Exception:  # eggs, .exe installers, odd names: never what pip installs here
        return None


def hashes(name: str, version: str) -> list[str]:
    """sha256 of every wheel and sdist of ``name==version`` on the index."""
    req = urllib.request.Request(f"{INDEX}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    want = Version(version)
    found = sorted({f["hashes"]["sha256"] for f in files
                    if "sha256" in f.get("hashes", {}) and file_version(f["filename"]) == want})
    if not found:
        raise SystemExit(f"lock: {name}=={version} has no file on {INDEX}")
    return found


def render(pins: list[tuple[str, str]], extras: str) -> str:
    py = ".".join(platform.python_version_tuple()[:2])
    head = [
        "# The exact environment `make test` and `make demo` install (scripts/setup.sh), with hashes.",
        f"# Made by `make lock` on {dt.date.today().isoformat()} with Python {py} on {sys.platform}, extras [{extras}];",
        "# torch is pinned in requirements/torch.txt (a CPU build, installed first). Do not edit by hand.",
        f"# python: {py}",
        f"# extras: {extras}",
    ]
    body = []
    for name, version in pins:
        hs = hashes(name, version)
        body.append(f"{name}=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hs))
    return "\n".join(head) + "\n" + "\n".join(body) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--extras", required=True, help="the extras the environment was resolved with")
    args = ap.parse_args()
    text = render(frozen(), args.extras)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=".lock-")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, args.out)
    print(f"lock: wrote {args.out} ({text.count('==')} packages)", file=sys.stderr)


if __name__ == "__main__":
    main()
