"""The results store: one file per task, written atomically, validated before reuse, merged at the end.

Layout under ``root``::

    tasks/<key>.parquet     one tidy table per finished task (atomic: temp file + rename)
    failed/<key>.txt        the one-line error of a task that failed (removed when it later succeeds)
    set-aside/<key>.*       files that could not be reused (unreadable, foreign, other settings), moved aside
    .lock                   held (flock) by the run filling the store; a second run is refused

Every task file carries, in its Parquet schema metadata under ``attnscope``, the task key and the
store's ``settings`` it was computed with. A task is done when its file exists, reads back, names
this key, was computed with this store's settings, has the store's required ``columns`` and (when
``key_column`` is set) holds only this key in that column. Anything else (a truncated file, a
foreign table dropped in, a result of other settings) is quarantined with one warning line and
recomputed. Keys are free text (model ids with slashes, parameter tuples); they are mapped to safe,
reversible file names.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from attnscope.errors import InputError
from attnscope.tables import atomic_write_bytes, atomic_write_text, storage_error

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

SUFFIX = ".parquet"
META_KEY = b"attnscope"  # Parquet schema metadata entry holding {"key": ..., "settings": ...}


class QuarantineWarning(UserWarning):
    """A stored result could not be reused and was moved aside (it will be recomputed)."""


class InvalidResult(Exception):
    """Why a stored task file cannot be reused (internal; becomes a quarantine)."""


def key_to_name(key: str) -> str:
    """A file-name-safe, reversible encoding of a task key."""
    return quote(str(key), safe="-_.=+,@") or "%00"


def name_to_key(name: str) -> str:
    return unquote(name)


def _canonical(settings: Any) -> Any:
    """Settings as they read back from JSON (tuples -> lists), so stored and current compare equal."""
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


class ResultsStore:
    """A directory of validated per-task result tables (see module docstring).

    ``settings``: what every result must have been computed with (JSON-able; stored in each file).
    ``columns``: columns every result table must have. ``key_column``: a column that must hold only
    the task's key (e.g. ``model`` for the zoo survey). ``also``: older spellings of the same settings
    (what an earlier attnscope recorded for results provably equal to these), accepted as these. All are
    optional.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        settings: dict[str, Any] | None = None,
        columns: Sequence[str] = (),
        key_column: str | None = None,
        also: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.root = Path(root)
        self.tasks_dir = self.root / "tasks"
        self.failed_dir = self.root / "failed"
        self.aside_dir = self.root / "set-aside"
        self.settings = _canonical(settings or {})
        self.also = [_canonical(a) for a in also]
        self.columns = tuple(columns)
        self.key_column = key_column
        if self.root.exists() and not self.root.is_dir():
            raise InputError(f"results store {self.root} exists and is not a directory")
        try:
            self.tasks_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise storage_error(self.tasks_dir, exc) from None

    def path(self, key: str) -> Path:
        return self.tasks_dir / f"{key_to_name(key)}{SUFFIX}"

    def keys(self) -> list[str]:
        """Keys of all task files present (readable or not)."""
        return sorted(name_to_key(p.name[: -len(SUFFIX)]) for p in self.tasks_dir.glob(f"*{SUFFIX}"))

    # -- validation -----------------------------------------------------------------------------
    def _validate(self, key: str, p: Path) -> None:
        """Raise InvalidResult saying why the file of ``key`` cannot be reused."""
        import pyarrow.parquet as pq

        try:
            footer = pq.read_metadata(p)
            schema = footer.schema.to_arrow_schema()
        except Exception as exc:  # truncated / garbage
            raise InvalidResult(f"unreadable ({exc.__class__.__name__})") from None
        raw = (schema.metadata or {}).get(META_KEY)
        if raw is None:
            raise InvalidResult("not written by this store (no attnscope metadata)")
        try:
            meta = json.loads(raw)
        except (ValueError, RecursionError):
            raise InvalidResult("its attnscope metadata is not JSON") from None
        if not isinstance(meta, dict) or meta.get("key") != key:
            other = meta.get("key") if isinstance(meta, dict) else None
            raise InvalidResult(f"it holds the result of {other!r}, not {key!r}")
        if meta.get("settings") != self.settings and meta.get("settings") not in self.also:
            old, new = meta.get("settings") or {}, self.settings
            diff = ", ".join(f"{k}={old.get(k)!r} (now {new.get(k)!r})" for k in sorted(set(old) | set(new))
                             if old.get(k) != new.get(k)) if isinstance(old, dict) else repr(old)
            raise InvalidResult(f"it was computed with other settings: {diff}")
        missing = [c for c in self.columns if c not in schema.names]
        if missing:
            raise InvalidResult(f"it lacks column(s) {', '.join(missing)}")
        if self.key_column is not None and not self._key_column_is(footer, schema, key):
            try:
                col = pq.read_table(p, columns=[self.key_column]).column(0).to_pylist()
            except Exception as exc:
                raise InvalidResult(f"unreadable ({exc.__class__.__name__})") from None
            stray = sorted({str(v) for v in col if v != key})
            if stray:
                raise InvalidResult(f"its {self.key_column} column names {', '.join(stray[:3])}, not {key!r}")

    def _key_column_is(self, footer: Any, schema: Any, key: str) -> bool:
        """True when the footer's column statistics prove the key column holds only ``key`` (no data read);
        False means "read the column to find out" (no statistics, or they differ)."""
        idx = schema.get_field_index(self.key_column)
        if idx < 0 or footer.num_columns != len(schema.names):  # nested columns: leave it to the slow path
            return False
        for rg in range(footer.num_row_groups):
            stats = footer.row_group(rg).column(idx).statistics
            if stats is None or not stats.has_min_max or stats.null_count or stats.min != key or stats.max != key:
                return False
        return True

    def is_done(self, key: str) -> bool:
        """True when the task's file exists and is valid (see class docstring); else it is moved aside."""
        p = self.path(key)
        if not p.is_file():
            return False
        try:
            self._validate(key, p)
            return True
        except InvalidResult as why:
            self._quarantine(p, str(why))
            return False

    def _quarantine(self, p: Path, why: str) -> None:
        try:
            self.aside_dir.mkdir(parents=True, exist_ok=True)
            dest = self.aside_dir / p.name
            n = 1
            while dest.exists():
                dest = self.aside_dir / f"{p.name}.{n}"
                n += 1
            os.replace(p, dest)
        except OSError as exc:
            raise storage_error(self.aside_dir, exc) from None
        warnings.warn(f"results store: {p.name} cannot be reused: {why}; moved to {dest}, recomputing",
                      QuarantineWarning, stacklevel=2)

    # -- reading and writing --------------------------------------------------------------------
    def write(self, key: str, df: pd.DataFrame) -> Path:
        """Store one task's table atomically (with its key and the store's settings); clears a failure record."""
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(df, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[META_KEY] = json.dumps({"key": key, "settings": self.settings}).encode()
        buf = io.BytesIO()
        pq.write_table(table.replace_schema_metadata(meta), buf)
        out = atomic_write_bytes(self.path(key), buf.getvalue())
        fail = self.failed_dir / f"{key_to_name(key)}.txt"
        if fail.exists():
            fail.unlink()
        return out

    def read(self, key: str) -> pd.DataFrame:
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

    def merge(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Concatenate the valid finished tables (all, or those of ``keys`` in that order)."""
        import pandas as pd

        keys = [k for k in (self.keys() if keys is None else keys) if self.is_done(k)]
        frames = [f for f in (self.read(k) for k in keys) if len(f)]
        if not frames:
            return pd.DataFrame()
        return pd.concat(frames, ignore_index=True)

    # -- one run at a time ----------------------------------------------------------------------
    def lock(self) -> StoreLock:
        """A context manager holding the store's lock for one run (a second concurrent run is refused)."""
        return StoreLock(self.root / ".lock")


class StoreLock:
    """An exclusive, non-blocking ``flock`` on ``<root>/.lock``; released when the holder exits or dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> StoreLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise storage_error(self.path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise InputError(
                f"{self.path.parent} is in use by another run (pid {holder}); wait for it or use another output directory"
            ) from None
        try:  # the holder's pid, for the message above; informational only (the disk may be full)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the flock
            self._fd = None
