"""Results of several files replaced whole: :func:`write_result_set`, its manifest, its readers and the cleanup.

A command that writes several files into one folder (``atlas``, ``compare --out``, ``heads --plot``,
``geometry --plot``, ``report``, ``geometry --zoo``'s merged tables, ``emergence``) hands them all to
:func:`write_result_set`::

    write_result_set(out, {"atlas.csv": csv_bytes, "atlas.png": lambda: figure_bytes(fig)}, settings, kind="atlas")

1. every file is rendered (a callable is called) and written into a fresh hidden staging folder
   ``OUT/.attnscope-staging-<kind>-<pid>-<random>/`` (the same filesystem as ``OUT``), locked by this
   process while it lives; nothing in ``OUT`` changes yet, so a failure or a kill here leaves the
   previous result whole;
2. a commit record (the new manifest entry: file names, their SHA-256, the settings) is written into
   the staging folder: from here on the new result is decided;
3. the files are moved into ``OUT`` (rename within one filesystem), files of the previous result of the
   same kind that the new one does not have are removed, and ``OUT/attnscope-manifest.json`` is
   written last; the staging folder is removed.

A kill during step 3 leaves a committed staging folder: the next write into ``OUT`` or the next reader
(:func:`check_result_set`, :func:`attnscope.tables.read_table`) finishes the move first (as a journal is
replayed), so a reader sees the complete old or the complete new result, never a mix. A reader refuses
a folder whose files do not match its manifest (a file of another run, an edited or missing one) with
one line naming the files. One folder can hold results of several kinds (``heads --plot`` and
``geometry --plot`` into one figures folder): the manifest keeps one entry per kind, and files that
belong to no entry (the user's own) are never touched.

Cleaned at the next write into a folder: staging folders whose process is gone (their lock is free)
and attnscope's own temporaries (``.attnscope-tmp.NAME.<8 random characters>.tmp`` of
:func:`attnscope.tables.atomic_write_bytes`, ``.attnscope-probe-<8 random characters>`` of
:func:`attnscope.tables.check_writable`) older than this process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Union

from .errors import FormatError, InputError, StorageError
from .tables import _umask, atomic_write_bytes, fsync_dir, make_out_dir, storage_error

__all__ = ["MANIFEST", "STAGING_PREFIX", "Content", "check_member", "check_result_set", "clean_stale",
           "write_result_set"]

#: the manifest of a result folder (one entry per kind of result written there)
MANIFEST = "attnscope-manifest.json"
#: the name of every staging folder starts with this
STAGING_PREFIX = ".attnscope-staging-"
_COMMIT = "commit.json"  # inside a staging folder: the decided manifest entry
_FORMAT = "attnscope-manifest/1"
#: a temporary file of atomic_write_bytes (mkstemp: prefix ".attnscope-tmp.NAME.", 8 random characters, suffix
#: ".tmp"; a user's own ".NAME.xxxxxxxx.tmp" is not one)
#: or of check_writable's probe
_TEMPORARY = re.compile(r"^\.attnscope-tmp\..+\.[a-z0-9_]{8}\.tmp$|^\.attnscope-probe-[a-z0-9_]{8}$")
_KIND = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")

#: a file's content: its bytes, text (UTF-8), or a function rendering either (called before anything moves)
Content = Union[bytes, str, Callable[[], Union[bytes, str]]]


def _process_start() -> float:
    """When this process started (wall clock; a file older than this is no temporary of this process)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # since boot
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):  # not Linux: this module's import is close enough
        return time.time()


_STARTED = _process_start()


@contextlib.contextmanager
def _locked(path: Path, blocking: bool = True) -> Iterator[bool]:
    """An exclusive flock on the directory ``path`` (yields False when ``blocking=False`` and it is held elsewhere).

    A lock dies with its process (SIGKILL included), so a held lock means a live writer. Without fcntl
    (Windows) nothing is locked and the lock is always "acquired".
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield True
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _set_hash(files: Mapping[str, Mapping[str, Any]]) -> str:
    """One hash of a whole result: the files' names and hashes, sorted."""
    return _sha256("".join(f"{name}\0{files[name]['sha256']}\n" for name in sorted(files)).encode())


#: a manifest or commit record larger than this is no attnscope record (one entry per kind, a few files each)
MAX_RECORD_BYTES = 8 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _load_record(path: Path, what: str) -> Any:
    """The JSON of a manifest or commit record at ``path``; FormatError when it is too large or unreadable."""
    try:
        size = path.stat().st_size
        if size > MAX_RECORD_BYTES:
            raise FormatError(f"{path}: {size:,} bytes is no {what} (at most {MAX_RECORD_BYTES:,}); rerun the command "
                              "that wrote this folder")
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"{path}: unreadable {what} ({exc.__class__.__name__}); rerun the command that wrote this "
                          "folder") from None


def _bad_name(name: Any) -> bool:
    return (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\0" in name or name.startswith(".") or name == MANIFEST)


def _check_entry(entry: Any, where: str) -> None:
    """FormatError unless ``entry`` is a manifest entry: {"files": {plain file name: {"sha256": hex, ...}}, ...}.

    Every name is checked before a writer moves or removes a file it lists (a name with a ``/`` or ``..``
    would reach outside the folder)."""
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(files, dict):
        raise FormatError(f"{where}: an entry without a 'files' mapping")
    for name, info in files.items():
        if _bad_name(name):
            raise FormatError(f"{where}: {name!r:.80} is not a plain file name of this folder")
        if not isinstance(info, dict) or not isinstance(info.get("sha256"), str) or not _SHA256.match(info["sha256"]):
            raise FormatError(f"{where}: file {name!r:.80} has no SHA-256")


def _read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of ``folder`` ({} when there is none), its structure and file names checked; FormatError
    (one line) for an unreadable, oversized or malformed one."""
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    data = _load_record(path, "manifest")
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise FormatError(f"{path} is not an attnscope manifest (no 'results' mapping)")
    for kind, entry in data["results"].items():
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise FormatError(f"{path} is not an attnscope manifest (result kind {kind!r:.80})")
        _check_entry(entry, f"{path} [{kind}]")
    return data


def _check_name(name: str) -> None:
    if _bad_name(name):
        raise InputError(f"files: {name!r} is not a plain file name a result may have", params="files")


def _read_commit(path: Path) -> dict[str, Any]:
    """The commit record of a staging folder, checked as a manifest entry (its names stay inside the folder)."""
    commit = _load_record(path, "commit record of a killed write")
    if not isinstance(commit, dict) or not isinstance(commit.get("kind"), str) or not _KIND.match(commit["kind"]):
        raise FormatError(f"{path}: not a commit record of a killed write; remove that folder")
    _check_entry(commit.get("entry"), str(path))
    replaces = commit.get("replaces", [])
    if not isinstance(replaces, list) or any(_bad_name(n) for n in replaces):
        raise FormatError(f"{path}: 'replaces' is not a list of plain file names; remove that folder")
    return commit


def write_result_set(out_dir: str | os.PathLike, files: Mapping[str, Content], settings: Mapping[str, Any] | None = None,
                     *, kind: str, replaces: Iterable[str] = ()) -> list[Path]:
    """Write ``files`` ({file name: bytes, text or a callable returning either}) into ``out_dir`` as one
    result, replacing the previous result of the same ``kind`` there as a whole (see the module doc).

    ``settings``: JSON-able settings stored in the manifest beside the files' hashes. ``replaces``:
    names a result of this kind may have had in a folder written without a manifest; removed when
    this result does not write them (so an old figure does not sit beside a new table). Returns the
    written paths (in the order of ``files``). A failure before the move (a rendering error, a full
    disk) leaves the folder as it was and no staging folder behind.
    """
    if not isinstance(kind, str) or not _KIND.match(kind):
        raise InputError(f"kind must be a lower-case name of at most 100 characters (a-z, 0-9, ., -, _), not {kind!r}",
                         params="kind")
    if not isinstance(files, Mapping) or not files:
        raise InputError("files must be a non-empty mapping {file name: content}", params="files")
    for name in files:
        _check_name(name)
    try:
        settings_json = json.loads(json.dumps(dict(settings or {}), default=str))
    except (TypeError, ValueError) as exc:
        raise InputError(f"settings must be JSON-able: {exc}", params="settings") from None
    out = make_out_dir(out_dir, "out_dir")
    with contextlib.ExitStack() as held:
        with _locked(out):  # a cleaner (holding it too) never sees our staging folder before it is locked
            clean_stale(out, _have_lock=True)
            try:
                staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{kind}-{os.getpid()}-", dir=out))
            except OSError as exc:
                raise storage_error(out, exc) from None
            held.enter_context(_locked(staging))
        try:
            commit = _stage(staging, kind, files, settings_json, sorted(set(replaces)))
        except BaseException as exc:  # nothing moved: the previous result stays whole
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, OSError):
                raise storage_error(out, exc) from None
            raise
        with _locked(out):
            _apply(out, staging, commit)
    return [out / name for name in files]


def _stage(staging: Path, kind: str, files: Mapping[str, Content], settings: dict[str, Any],
           replaces: list[str]) -> dict[str, Any]:
    """Render and write every file into ``staging``, then its commit record (returned)."""
    listed: dict[str, dict[str, Any]] = {}
    for name, content in files.items():
        data = content() if callable(content) else content
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"files[{name!r}] gave {type(data).__name__}; expected bytes or str")
        data = bytes(data)
        with open(staging / name, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(staging / name, 0o666 & ~_umask())
        listed[name] = {"sha256": _sha256(data), "bytes": len(data)}
    from . import __version__

    entry = {"files": listed, "sha256": _set_hash(listed), "settings": settings, "attnscope": __version__,
             "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    commit = {"kind": kind, "entry": entry, "replaces": replaces}
    atomic_write_bytes(staging / _COMMIT, (json.dumps(commit, indent=2) + "\n").encode())
    fsync_dir(staging)
    return commit


def _apply(out: Path, staging: Path, commit: dict[str, Any]) -> None:
    """Move a committed staging folder's files into ``out``, drop the previous result's extra files, write
    the manifest last, remove the staging folder. Idempotent: a replay after a kill finishes the job."""
    kind, entry = commit["kind"], commit["entry"]
    try:
        results = _read_manifest(out).get("results", {})
    except FormatError:  # an unreadable manifest: this write replaces it
        results = {}
    previous = results.get(kind, {}).get("files", {}) if isinstance(results.get(kind), dict) else {}
    new = entry["files"]
    try:
        for name in new:
            if (staging / name).exists():
                os.replace(staging / name, out / name)
        others = {n for k, e in results.items() if k != kind and isinstance(e, dict) for n in e.get("files", {})}
        for name in (set(previous) | set(commit.get("replaces", ()))) - set(new) - others:
            (out / name).unlink(missing_ok=True)
        results = {k: e for k, e in results.items() if k != kind}
        for k, e in list(results.items()):  # a file now of this kind is no longer another kind's
            e["files"] = {n: f for n, f in e.get("files", {}).items() if n not in new}
            e["sha256"] = _set_hash(e["files"])
            if not e["files"]:
                del results[k]
        results[kind] = entry
        atomic_write_bytes(out / MANIFEST, (json.dumps({"format": _FORMAT, "results": results}, indent=2)
                                            + "\n").encode())
        fsync_dir(out)
    except OSError as exc:  # the staging folder stays committed: the next run finishes the move
        raise storage_error(out, exc) from None
    shutil.rmtree(staging, ignore_errors=True)


def clean_stale(folder: str | os.PathLike, *, _have_lock: bool = False) -> list[str]:
    """Finish or remove what killed attnscope processes left in ``folder``; the names handled.

    A staging folder whose process is gone is replayed when it was committed (its result is then in
    place) and removed otherwise; a live one (its lock held) is left alone. attnscope's own temporary
    files older than this process are removed. Nothing else is touched.
    """
    folder = Path(folder)
    handled: list[str] = []
    if not folder.is_dir():
        return handled
    if not _have_lock:
        with _locked(folder):
            return clean_stale(folder, _have_lock=True)
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        name = entry.name
        try:
            if name.startswith(STAGING_PREFIX) and entry.is_dir(follow_symlinks=False):
                with _locked(Path(entry.path), blocking=False) as free:
                    if not free:
                        continue  # a live writer
                    commit = Path(entry.path) / _COMMIT
                    if commit.is_file():  # decided: finish the move
                        _apply(folder, Path(entry.path), _read_commit(commit))
                    else:
                        shutil.rmtree(entry.path, ignore_errors=True)
                handled.append(name)
            elif _TEMPORARY.match(name) and entry.is_file(follow_symlinks=False) \
                    and entry.stat(follow_symlinks=False).st_mtime < _STARTED:
                os.unlink(entry.path)
                handled.append(name)
        except FileNotFoundError:  # another process cleaned it first
            continue
        except OSError as exc:
            raise storage_error(entry.path, exc) from None
        except (ValueError, KeyError, TypeError):
            raise FormatError(f"{entry.path}: unreadable commit record of a killed write; remove that folder") from None
    return handled


def _replay(folder: Path) -> None:
    """Before reading ``folder``: finish a move a killed writer left (when there is one and we may)."""
    if not any(n.startswith(STAGING_PREFIX) for n in os.listdir(folder)):
        return
    try:
        clean_stale(folder)
    except StorageError:  # a read-only folder: the check below then names what is mixed
        pass


def check_result_set(folder: str | os.PathLike, kind: str | None = None) -> dict[str, Any]:
    """The manifest entries of ``folder`` ({kind: entry}; only ``kind`` when given), after checking that every
    listed file is there with the content the manifest says; FormatError naming the mixed files otherwise.

    A folder without a manifest (written by hand, or before manifests) passes with ``{}``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such result folder")
    _replay(folder)
    results = _read_manifest(folder).get("results", {})
    if kind is not None:
        results = {kind: results[kind]} if kind in results else {}
    for k, entry in results.items():
        files = entry.get("files", {}) if isinstance(entry, dict) else {}
        missing = [n for n in sorted(files) if not (folder / n).is_file()]
        changed = [n for n in sorted(files) if n not in missing and _file_sha256(folder / n) != files[n].get("sha256")]
        if missing or changed:
            parts = []
            if changed:
                parts.append(f"{', '.join(changed)} {'differs' if len(changed) == 1 else 'differ'} from it")
            if missing:
                parts.append(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing")
            intact = len(files) - len(missing) - len(changed)
            raise FormatError(f"{folder} holds a mixed {k} result: {'; '.join(parts)} ({intact} of {len(files)} files "
                              f"match {MANIFEST}); rerun the command that wrote it")
    return results


def check_member(path: str | os.PathLike) -> None:
    """Before reading ``path``: when its folder's manifest lists it, check that whole result (mixed: FormatError)."""
    path = Path(path)
    folder = path.parent
    if not (folder / MANIFEST).is_file() and not any(n.startswith(STAGING_PREFIX) for n in os.listdir(folder or ".")):
        return
    _replay(folder)
    for kind, entry in _read_manifest(folder).get("results", {}).items():
        if isinstance(entry, dict) and path.name in entry.get("files", {}):
            check_result_set(folder, kind)
