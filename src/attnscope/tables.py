"""Tidy tables and files on disk: atomic writes, format-by-extension, config mappings.

Every result file attnscope writes goes through :func:`atomic_write_bytes` (write to a temporary
file in the same directory, fsync, rename), so a crash never leaves a half-written file where a
good one was (results of several files are replaced as a whole by :mod:`attnscope.outputs`); a write that fails (a full disk, a read-only directory) raises :class:`StorageError`
naming the path and leaves nothing behind. :func:`check_writable` lets a command refuse a bad
``--out`` before it starts an hour of work. :func:`write_table` / :func:`read_table` pick CSV,
Parquet or JSON by extension; :func:`numeric_columns` checks the columns a computation reads back.
"""

from __future__ import annotations

import errno
import io
import json
import os
import tempfile
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, FormatError, InputError, StorageError, check_type, named

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

TABLE_SUFFIXES = (".csv", ".parquet", ".json", ".jsonl")


#: the start of every temporary file of :func:`atomic_write_bytes` (``.attnscope-tmp.NAME.<8 random characters>.tmp``)
TEMP_PREFIX = ".attnscope-tmp."

def storage_error(path: str | os.PathLike, exc: OSError) -> StorageError:
    """One line naming ``path`` and what the operating system said (ENOSPC -> "no space left on device")."""
    if exc.strerror:  # "No space left on device" -> "no space left on device"
        reason = exc.strerror[0].lower() + exc.strerror[1:]
    else:
        reason = str(exc) or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return StorageError(f"cannot write {path}: {reason}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename).

    Any OSError (a full disk, a read-only directory, a file where a directory should be) becomes a
    :class:`StorageError` naming ``path``; the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a name no user file has by chance (outputs.clean_stale removes only such names), the target's
        # name cut so that a long one still leaves room under the file system's 255
        fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise storage_error(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are shared like any file
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise storage_error(path, exc) from None
        raise
    return path


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory's entries (a rename into it) to disk; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def check_writable(path: str | os.PathLike, option: str = "out", directory: bool = False,
                   suffixes: tuple[str, ...] | None = None) -> Path:
    """Refuse an output path that cannot be written, before any work starts; return it as a Path.

    ``suffixes``: the file extensions the writer accepts (e.g. :data:`TABLE_SUFFIXES`).
    ``directory=False``: ``path`` will be a file (it must not be a directory); ``directory=True``:
    ``path`` will be (or already is) a directory. Missing parents are fine (they are created when
    writing) as long as the nearest existing one is a directory we can create files in; that is
    probed by creating and removing a temporary file, so read-only mounts and ``/proc`` are caught
    even for root. Nothing is left behind. ``option``: the parameter (or CLI flag) the messages name.
    """
    path = Path(path).expanduser()
    where = named(option, path)
    if suffixes and not directory and path.suffix.lower() not in suffixes:
        raise InputError(f"{where}: use a file name ending in {', '.join(suffixes)}", params=option)
    if path.exists():
        if directory and not path.is_dir():
            raise StorageError(f"{where}: exists and is not a directory", params=option)
        if not directory and path.is_dir():
            raise StorageError(f"{where}: is a directory; give a file name", params=option)
    if directory and not path.exists() and path.is_symlink():  # mkdir would fail after the work with "file exists"
        raise StorageError(f"{where}: is a symbolic link to nothing (dangling, or a loop); give a directory",
                           params=option)
    probe = path if directory and path.is_dir() else path.parent
    while not probe.exists():
        if probe.is_symlink() or probe == probe.parent:  # a dangling link / no existing ancestor
            raise StorageError(f"{where}: {probe} cannot be created", params=option)
        probe = probe.parent
    if not probe.is_dir():
        raise StorageError(f"{where}: {probe} is a file, not a directory", params=option)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".attnscope-probe-", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise StorageError(f"{where}: cannot write into {probe}: {exc.strerror or exc}", params=option) from None
    return path


def can_write_in(folder: str | os.PathLike) -> bool:
    """True when a file can be created in ``folder`` or, while it is missing, in its nearest existing parent
    (where it would be made); tried for real with a temporary file, nothing else is created. A folder that
    cannot even be looked at (in a HOME this user may not search) is not writable: False, never an error."""
    folder = Path(folder)
    try:
        while not folder.exists() and folder.parent != folder:
            folder = folder.parent
        with tempfile.TemporaryFile(dir=folder):
            pass
    except (OSError, ValueError):  # PermissionError from exists() itself, a name with a NUL
        return False
    return True


def make_out_dir(path: str | os.PathLike, option: str = "out") -> Path:
    """Check ``path`` can be a writable directory (:func:`check_writable`), create it, and return it."""
    path = check_writable(path, option, directory=True)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(path, exc) from None
    return path


#: the columns every score table (geometry.score, the trainer's logged scores, the zoo store) has
SCORE_COLUMNS = ("model", "family", "stack", "level", "layer", "symmetry", "directionality")


def check_table(df: Any, columns: Sequence[str], param: str = "df", what: str = "table") -> None:
    """Refuse a ``df`` that is not a DataFrame (:class:`ArgumentTypeError`) or lacks any of ``columns``
    (InputError naming the missing columns and all the ones ``what`` needs), before any arithmetic."""
    import pandas as pd

    check_type(df, pd.DataFrame, param, f"a pandas DataFrame ({what})")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        lacks = "none of them" if len(missing) == len(columns) else f"no {', '.join(missing)}"
        raise InputError(f"{param} is not {what}: it needs the columns {', '.join(columns)} and has {lacks}",
                         params=param)


def numeric_columns(df: pd.DataFrame, columns: list[str] | tuple[str, ...], what: str = "table",
                    finite: bool = True) -> pd.DataFrame:
    """``df[columns]`` as float64, or one FormatError naming the first column with a non-number
    (a string, or with ``finite=True`` also NaN / inf) and the row where it sits."""
    import numpy as np
    import pandas as pd

    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise FormatError(f"{what} has no column(s) {', '.join(map(str, missing))}")
    out = {}
    for col in columns:
        raw = df[col]
        if raw.dtype == bool:
            raw = raw.astype(np.float64)
        vals = pd.to_numeric(raw, errors="coerce").astype(np.float64)
        bad = vals.isna() & raw.notna()
        if finite:
            bad |= ~np.isfinite(vals.to_numpy())
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise FormatError(f"{what}: column {col!r} holds {raw.iloc[i]!r} in row {i}; expected a finite number")
        out[col] = vals.to_numpy()
    return pd.DataFrame(out, index=df.index)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    return atomic_write_text(path, json_text(obj))


def json_text(obj: Any) -> str:
    """``obj`` as the indented JSON text :func:`atomic_write_json` writes (numpy values and paths as plain JSON)."""
    return json.dumps(obj, indent=2, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def records_to_json(df: pd.DataFrame) -> str:
    """A DataFrame as a JSON list of records (NaN -> null)."""
    return df.to_json(orient="records", double_precision=15)


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a tidy table atomically; the format follows the extension (.csv, .parquet, .json, .jsonl)."""
    return atomic_write_bytes(path, table_bytes(df, path))


def table_bytes(df: pd.DataFrame, path: str | os.PathLike) -> bytes:
    """The bytes :func:`write_table` writes for ``path`` (the format follows its extension)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        data = df.to_csv(index=False).encode()
    elif suffix == ".parquet":
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        data = buf.getvalue()
    elif suffix == ".json":
        data = records_to_json(df).encode()
    elif suffix == ".jsonl":
        data = df.to_json(orient="records", lines=True, double_precision=15).encode()
    else:
        raise InputError(f"cannot write table {path}: use one of {', '.join(TABLE_SUFFIXES)}")
    return data


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a table written by :func:`write_table` (format by extension).

    A table that belongs to a result of several files (:mod:`attnscope.outputs`) is read only when the
    folder holds that whole result as written (its manifest matches); a mix is one FormatError.
    """
    import pandas as pd

    from .outputs import check_member

    path = Path(path)
    if not path.is_file():
        raise InputError(f"no such table file: {path}")
    check_member(path)  # one file of a result written whole: the others must be of the same run
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path)
        if suffix == ".parquet":
            return pd.read_parquet(path)
        if suffix == ".json":
            return pd.read_json(path, orient="records")
        if suffix == ".jsonl":
            return pd.read_json(path, orient="records", lines=True)
    except Exception as exc:  # corrupt file: one line, not a traceback
        raise FormatError(f"cannot read table {path}: {exc.__class__.__name__}: {exc}") from exc
    raise InputError(f"cannot read table {path}: use one of {', '.join(TABLE_SUFFIXES)}")


#: a config file (pattern YAML, run config) larger than this is refused before it is parsed
MAX_CONFIG_BYTES = 1 << 20
#: at most this many values once YAML's aliases are expanded (a few hundred bytes of nested aliases, "billion
#: laughs", would otherwise stand for billions of values)
MAX_CONFIG_VALUES = 100_000


def _yaml_loader() -> type:
    """yaml.SafeLoader whose documents may stand for at most MAX_CONFIG_VALUES values with every alias expanded
    (counted on the composed graph, before anything is built) and contain no value that contains itself."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        def compose_document(self):  # type: ignore[no-untyped-def]
            node = super().compose_document()
            sizes: dict[int, int] = {}

            def size(n: Any, open_: set[int]) -> int:
                if id(n) in sizes:
                    return sizes[id(n)]
                if id(n) in open_:
                    raise ConfigError("a value contains itself (a YAML alias to one of its own parents)")
                total = 1
                if isinstance(n, (yaml.SequenceNode, yaml.MappingNode)):
                    open_.add(id(n))
                    children = n.value if isinstance(n, yaml.SequenceNode) else [c for kv in n.value for c in kv]
                    for child in children:
                        total += size(child, open_)
                        if total > MAX_CONFIG_VALUES:
                            break
                    open_.discard(id(n))
                sizes[id(n)] = total
                if total > MAX_CONFIG_VALUES:
                    raise ConfigError(f"its aliases expand to more than {MAX_CONFIG_VALUES:,} values")
                return total

            size(node, set())
            return node

    return BoundedLoader


def read_mapping(path: str | os.PathLike, what: str = "config file") -> dict[str, Any]:
    """A YAML (.yaml/.yml/other), TOML (.toml) or JSON (.json) file holding a mapping, as a dict.

    Missing file -> InputError; larger than :data:`MAX_CONFIG_BYTES`, unparsable, expanding (YAML aliases) to more
    than :data:`MAX_CONFIG_VALUES` values, or not a mapping -> ConfigError; one line each.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no such {what}: {path}")
    suffix = path.suffix.lower()
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{what} {path} is {size:,} bytes; a config file is at most {MAX_CONFIG_BYTES:,}")
        text = path.read_text()
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader, bounded
    except ConfigError as exc:
        if str(exc).startswith(f"{what} {path}"):
            raise
        raise ConfigError(f"cannot parse {what} {path}: {exc}") from None
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:200]
        raise ConfigError(f"cannot parse {what} {path}: {exc.__class__.__name__}: {first}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping at the top level")
    return data
