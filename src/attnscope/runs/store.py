"""The results store: one file per task, written atomically, merged at the end, resumable.

Layout under ``root``::

    tasks/<key>.parquet     one tidy table per finished task (atomic: temp file + rename)
    failed/<key>.txt        the one-line error of a task that failed (removed when it later succeeds)
    corrupt/<key>.*         files that could not be read back, moved aside (never silently reused)

A task is done when its file exists AND reads back; anything else is pending. Keys are free text
(model ids with slashes, parameter tuples); they are mapped to safe, reversible file names.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Iterable
from urllib.parse import quote, unquote

from attnscope.tables import atomic_write_bytes, atomic_write_text

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

SUFFIX = ".parquet"


def key_to_name(key: str) -> str:
    """A file-name-safe, reversible encoding of a task key."""
    return quote(str(key), safe="-_.=+,@") or "%00"


def name_to_key(name: str) -> str:
    return unquote(name)


class ResultsStore:
    """A directory of per-task result tables (see module docstring)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.tasks_dir = self.root / "tasks"
        self.failed_dir = self.root / "failed"
        self.corrupt_dir = self.root / "corrupt"
        self.tasks_dir.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.tasks_dir / f"{key_to_name(key)}{SUFFIX}"

    def keys(self) -> list[str]:
        """Keys of all task files present (readable or not)."""
        return sorted(name_to_key(p.name[: -len(SUFFIX)]) for p in self.tasks_dir.glob(f"*{SUFFIX}"))

    def is_done(self, key: str) -> bool:
        """True when the task's file exists and reads back; a corrupt file is moved aside (-> False)."""
        p = self.path(key)
        if not p.is_file():
            return False
        try:
            import pyarrow.parquet as pq

            pq.read_metadata(p)
            return True
        except Exception as exc:  # truncated / garbage: keep it for inspection, recompute the task
            self._quarantine(p, exc)
            return False

    def _quarantine(self, p: Path, exc: BaseException) -> None:
        self.corrupt_dir.mkdir(parents=True, exist_ok=True)
        dest = self.corrupt_dir / p.name
        n = 1
        while dest.exists():
            dest = self.corrupt_dir / f"{p.name}.{n}"
            n += 1
        os.replace(p, dest)
        warnings.warn(
            f"results store: {p.name} was unreadable ({exc.__class__.__name__}); moved to {dest} and will be recomputed",
            stacklevel=3,
        )

    def write(self, key: str, df: "pd.DataFrame") -> Path:
        """Store one task's table atomically; clears a previous failure record."""
        import io

        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        out = atomic_write_bytes(self.path(key), buf.getvalue())
        fail = self.failed_dir / f"{key_to_name(key)}.txt"
        if fail.exists():
            fail.unlink()
        return out

    def read(self, key: str) -> "pd.DataFrame":
        import pandas as pd

        return pd.read_parquet(self.path(key))

    def record_failure(self, key: str, message: str) -> None:
        atomic_write_text(self.failed_dir / f"{key_to_name(key)}.txt", message.rstrip() + "\n")

    def failures(self) -> dict[str, str]:
        if not self.failed_dir.is_dir():
            return {}
        return {
            name_to_key(p.stem): p.read_text().strip() for p in sorted(self.failed_dir.glob("*.txt"))
        }

    def pending(self, keys: Iterable[str]) -> list[str]:
        return [k for k in keys if not self.is_done(k)]

    def merge(self, keys: Iterable[str] | None = None) -> "pd.DataFrame":
        """Concatenate the finished tables (all, or those of ``keys`` in that order)."""
        import pandas as pd

        keys = self.keys() if keys is None else [k for k in keys if self.is_done(k)]
        frames = [self.read(k) for k in keys if self.is_done(k)]
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame()
        return pd.concat(frames, ignore_index=True)
