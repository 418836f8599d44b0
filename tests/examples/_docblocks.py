"""The Python code blocks of README.md and docs/*.md, as the tests that run and type-check them read them."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: a block whose first line is this comment is not executed; the comment says why (network, size)
SKIP_MARK = "# not run by the docs test:"
#: a block whose first line is ``# needs REQUIREMENT: why`` (e.g. ``# needs transformers>=5: ...``) runs only where
#: the installed packages meet the requirement (a feature an older release of a dependency lacks)
NEEDS_MARK = "# needs "
_FENCE = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)  # also inside a list item


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository
    line: int  # of the block's first code line
    code: str

    @property
    def skip_reason(self) -> str | None:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first[len(SKIP_MARK):].strip() if first.startswith(SKIP_MARK) else None

    @property
    def needs(self) -> tuple[str, str] | None:
        """(requirement, why) of a first line ``# needs REQUIREMENT: why``, else None."""
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        if not first.startswith(NEEDS_MARK) or ":" not in first:
            return None
        req, why = first[len(NEEDS_MARK):].split(":", 1)
        return req.strip(), why.strip()

    def unmet(self) -> str | None:
        """Why this block cannot run with the installed packages (its ``needs`` line), None when it can."""
        from importlib import metadata

        from packaging.requirements import Requirement

        if self.needs is None:
            return None
        req = Requirement(self.needs[0])
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return f"needs {req} ({req.name} is not installed)"
        return None if req.specifier.contains(have, prereleases=True) else f"needs {req} ({req.name} {have} here)"

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [Block(str(path.relative_to(ROOT)), text.count("\n", 0, m.start(2)) + 1, textwrap.dedent(m.group(2)))
            for m in _FENCE.finditer(text)]


def all_blocks() -> list[Block]:
    return [b for f in doc_files() for b in python_blocks(f)]
