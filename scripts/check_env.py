"""Check that the running environment holds exactly the versions a lock file pins (run by scripts/setup.sh).

    python scripts/check_env.py requirements/lock.txt

Exit 1 with one line per package that is missing or at another version; also runs ``pip check`` (every
installed package's own requirements satisfied), except for the weight packages of requirements/real.txt,
which `make real` installs with --no-deps on purpose (they are data). Stdlib only.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ \\;]+)")


def mismatches(lock: Path) -> list[str]:
    bad = []
    for line in lock.read_text().splitlines():
        m = PIN.match(line)
        if not m:
            continue
        name, want = m.groups()
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            bad.append(f"{name}: not installed (lock pins {want})")
            continue
        if have != want:
            bad.append(f"{name}: {have} installed, lock pins {want}")
    return bad


def main() -> None:
    lock = Path(sys.argv[1])
    bad = mismatches(lock)
    for line in bad:
        print(f"setup: {line}", file=sys.stderr)
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    problems = [ln for ln in (check.stdout.strip() or check.stderr.strip()).splitlines()
                if _norm(ln.split(" ", 1)[0]) not in data_only(lock.parent / "real.txt")]
    if check.returncode != 0 and problems:
        print("setup: pip check: " + "\n".join(problems), file=sys.stderr)
    if bad or (check.returncode != 0 and problems):
        sys.exit(1)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def data_only(real: Path) -> set[str]:
    """The weight packages pinned in ``real`` (installed --no-deps: their declared requirements are not wanted)."""
    if not real.is_file():
        return set()
    return {_norm(m.group(1)) for line in real.read_text().splitlines() if (m := PIN.match(line))}


if __name__ == "__main__":
    main()
