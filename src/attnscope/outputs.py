"""Results of several files replaced whole: :func:`write_result_set`, its manifest, its readers and the cleanup.

Every command that writes results hands them to :func:`write_result_set` (``atlas``, ``compare --out``,
``heads`` and its ``cluster`` / ``study``, ``geometry --plot``, ``report``, ``geometry --zoo``'s merged tables,
``emergence``, ``dynamics *``)::

    write_result_set(out, {"atlas.csv": csv_bytes, "atlas.png": lambda: figure_bytes(fig)}, settings, kind="atlas")

and a single output file given by its path (``geometry --out scores.csv``, ``heads derive --out p.yaml``, a table
with companions such as ``X_silhouette.csv``) to :func:`write_result_file`: one result of its folder, of a kind of
its own per file name (:func:`file_kind`), so the same proof guards it. A reader takes such a file as it is (an
edited one is the user's now, never a "mixed" result). :func:`check_result_file` / :func:`check_result_names`
refuse a name held by the user's file before the work starts.

attnscope replaces or removes a file in ``OUT`` only when it can prove it wrote it: ``OUT/attnscope-manifest.json``
(written by attnscope: each entry carries the hash of its list of files) lists the file with the SHA-256 it
has now. Any other file is the user's and is never touched: a name the new result would write that is
already taken by such a file (a folder without a manifest, a file edited since, an entry edited by hand)
is refused in one line naming it, before anything is rendered (:func:`check_result_names` lets a command
refuse before its work starts), and a file of the previous result that changed since is left in place.

1. every file is rendered (a callable is called; one that gives an iterable of pieces has them written as they
   come, under a temporary name until its hash is recorded) and written into a fresh hidden staging folder
   ``OUT/.attnscope-staging-<kind>-<pid>-<random>/`` (the same filesystem as ``OUT``), locked by this
   process while it lives; its record ``.attnscope-staging.json`` lists every staged file with its hash;
   nothing in ``OUT`` changes yet, so a failure or a kill here leaves the previous result whole;
2. under the folder's lock, the names are checked again and a commit record is written into the staging
   folder: the new manifest, the hash of the manifest it replaces, and the hash of every file of ``OUT`` it
   replaces or removes: from here on the new result is decided;
3. the files are moved into ``OUT`` (rename within one filesystem), files of the previous result that the
   new one does not have are removed (each only while it still has its recorded hash), and the manifest is
   written last; the staging folder is removed.

A kill during step 3 leaves a committed staging folder: the next *write* into ``OUT`` finishes the move
first (as a journal is replayed), but only while the folder's manifest is still the one the commit
record names and every file still has its recorded hash; otherwise it is an obsolete record and only its
own staged files are removed. Reading never changes a folder: a reader (:func:`check_result_set`,
:func:`attnscope.tables.read_table`) refuses a folder whose files do not match its manifest (a killed
write, a file of another run, an edited or missing one) with one line naming the files. One folder can
hold results of several kinds (``heads --plot`` and ``geometry --plot`` into one figures folder): the
manifest keeps one entry per kind.

Cleaned at the next write into a folder: staging folders whose process is gone (their lock is free) and
that carry attnscope's record (a folder named like one without it is left alone, with a warning), each
file removed only when it has the hash its record gives; and attnscope's own temporaries
(``.attnscope-tmp.NAME.<8 random characters>.tmp`` of :func:`attnscope.tables.atomic_write_bytes`,
``.attnscope-probe-<8 random characters>`` of :func:`attnscope.tables.check_writable`) older than this process.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Union

from .errors import FormatError, InputError, StorageError, warn
from .tables import TEMP_PREFIX, _umask, atomic_write_bytes, fsync_dir, make_out_dir, storage_error

__all__ = ["FILE_KIND_PREFIX", "MANIFEST", "STAGING_PREFIX", "Content", "check_member", "check_result_file",
           "check_result_names", "check_result_set", "clean_stale", "file_kind", "write_result_file", "write_result_set"]

#: the manifest of a result folder (one entry per kind of result written there)
MANIFEST = "attnscope-manifest.json"
#: the name of every staging folder starts with this
STAGING_PREFIX = ".attnscope-staging-"
#: inside a staging folder (names no result file may have: they start with a dot): what it staged, what it decided
_RECORD = ".attnscope-staging.json"
_COMMIT = ".attnscope-commit.json"
_FORMAT = "attnscope-manifest/1"
_STAGING_FORMAT = "attnscope-staging/1"
#: a temporary file of atomic_write_bytes (mkstemp: prefix ".attnscope-tmp.NAME.", 8 random characters, suffix
#: ".tmp"; a user's own ".NAME.xxxxxxxx.tmp" is not one)
#: or of check_writable's probe
_TEMPORARY = re.compile(r"^\.attnscope-tmp\..+\.[a-z0-9_]{8}\.tmp$|^\.attnscope-probe-[a-z0-9_]{8}$")
_KIND = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")

#: a file's content: its bytes, text (UTF-8), or a function rendering either, or rendering an iterable of
#: pieces (str or bytes, written to the file as they come: a page of many megabytes is never one string);
#: every function is called before anything moves
Content = Union[bytes, str, Callable[[], Union[bytes, str, Iterable[Union[str, bytes]]]]]
#: pieces are gathered into writes of about this many bytes
_WRITE_CHUNK = 1 << 18


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


def _entry_trusted(entry: Mapping[str, Any]) -> bool:
    """True when an entry's own hash matches its list of files (an entry edited by hand does not)."""
    return entry.get("sha256") == _set_hash(entry["files"])


def _regular_sha256(path: Path) -> str | None:
    """The SHA-256 of the regular file ``path``; None when there is nothing there, or something that is not a
    plain file (a folder, a link: attnscope writes neither)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return ""
    return _file_sha256(path)


class _Folder:
    """What a writer may do in ``out`` now: the manifest's bytes hash and entries, and which files it proves are
    attnscope's (a trusted entry lists them with the hash they have now)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        path = out / MANIFEST
        self.manifest_sha: str | None = None
        if os.path.lexists(path):
            if not path.is_file() or path.is_symlink():
                raise _not_ours(out, [MANIFEST], "it is not a manifest attnscope wrote")
            try:
                self.results = _read_manifest(out).get("results", {})
            except FormatError as exc:
                raise _not_ours(out, [MANIFEST], f"it is no manifest attnscope can read ({_reason(exc)})") from None
            self.manifest_sha = _file_sha256(path)
        else:
            self.results = {}
        self.trusted = {k: e for k, e in self.results.items() if _entry_trusted(e)}
        self._hashes: dict[str, str | None] = {}

    def sha(self, name: str) -> str | None:
        """The hash ``out/name`` has now (None: absent; "": not a plain file)."""
        if name not in self._hashes:
            self._hashes[name] = _regular_sha256(self.out / name)
        return self._hashes[name]

    def owner(self, name: str) -> str | None:
        """The kind of the trusted entry that lists ``name`` with its present content (None: no proof)."""
        now = self.sha(name)
        for kind, entry in self.trusted.items():
            if now and entry["files"].get(name, {}).get("sha256") == now:
                return kind
        return None

    def conflicts(self, names: Iterable[str]) -> list[str]:
        """The names that hold something attnscope cannot prove it wrote (so may not replace)."""
        return [n for n in names if self.sha(n) is not None and self.owner(n) is None]


def _reason(exc: Exception) -> str:
    text = str(exc)
    return (text.split(": ", 1)[1] if ": " in text else text).split(";")[0]


def _not_ours(out: Path, names: list[str], why: str | None = None, other: str = "choose another output folder",
              params: str = "out_dir") -> InputError:
    """One line: these names in ``out`` are not attnscope's to replace, and how to go on."""
    shown = ", ".join(names[:3]) + (f" (and {len(names) - 3} more)" if len(names) > 3 else "")
    exists = "exists" if len(names) == 1 else "exist"
    why = why or (f"no entry of {MANIFEST} there lists {'it' if len(names) == 1 else 'them'} with the content "
                  f"{'it has' if len(names) == 1 else 'they have'} now, so attnscope cannot prove it wrote "
                  f"{'it' if len(names) == 1 else 'them'}")
    return InputError(f"{out}: {shown} {exists} and {why}; attnscope never replaces a file it did not write: move "
                      f"{'it' if len(names) == 1 else 'them'} away or {other}", params=params)


def check_result_names(out_dir: str | os.PathLike, names: Iterable[str], *, other: str = "choose another output folder",
                       params: str = "out_dir") -> None:
    """Refuse (one InputError naming them) result names that ``out_dir`` already holds as files attnscope cannot
    prove it wrote (see the module doc); call before long work. A missing folder passes. ``other``: what the
    line suggests besides moving them away; ``params``: the option it names."""
    out = Path(out_dir).expanduser()
    names = list(names)
    for name in names:
        _check_name(name)
    if not out.is_dir():
        return
    folder = _Folder(out)
    taken = folder.conflicts(names)
    if taken:
        raise _not_ours(out, taken, other=other, params=params)
    _check_replaceable(out, params)


def _check_replaceable(out: Path, params: str) -> None:
    """One line, before any work, when this user could not replace ``out``'s manifest at the end: a folder such as
    /tmp (sticky) where the manifest belongs to another user (the rename that commits a result would fail)."""
    if not hasattr(os, "geteuid"):  # pragma: no cover - Windows
        return
    try:
        folder, manifest = os.stat(out), os.lstat(out / MANIFEST)
    except OSError:
        return
    me = os.geteuid()
    if folder.st_mode & stat.S_ISVTX and me not in (0, manifest.st_uid, folder.st_uid):
        raise InputError(f"{out}: its {MANIFEST} belongs to another user and this shared folder (sticky, as /tmp) lets "
                         "only its owner replace it, so attnscope could not record its result there; write into a "
                         "folder of your own", params=params)


#: the kinds of results written by :func:`write_result_file` start with this: one file (and its named companions)
#: given by its own path; a reader takes it as it is (a file of them edited since is simply the user's, not a mix)
FILE_KIND_PREFIX = "file."


def file_kind(kind: str, name: str) -> str:
    """The manifest kind of the single-file result ``name`` written by a command of ``kind`` (one per file name:
    two tables in one folder are two results, neither replaces the other)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.")[:60] or "file"
    return f"{FILE_KIND_PREFIX}{kind}.{slug}-{_sha256(name.encode('utf-8', 'surrogateescape'))[:8]}"


def _file_names(path: str | os.PathLike, companions: Iterable[str]) -> tuple[Path, list[str]]:
    path = Path(path).expanduser()
    names = [path.name, *companions]
    for name in names:
        if _bad_name(name):
            raise InputError(f"{path.parent / name}: a result file needs a plain name that does not start with a dot "
                             f"(nor {MANIFEST})", params="out")
    return path, names


def check_result_file(path: str | os.PathLike, companions: Iterable[str] = (), *, params: str = "out") -> Path:
    """Refuse, before any work, an output file ``path`` (and its ``companions``: more file names written beside it)
    that already holds a file attnscope cannot prove it wrote (a file of yours, read-only or not, a link, a folder):
    one InputError naming it. The proof is the manifest of its folder, as for :func:`write_result_set`."""
    path, names = _file_names(path, companions)
    check_result_names(path.parent, names, other="choose another output file", params=params)
    return path


def write_result_file(path: str | os.PathLike, content: Content, settings: Mapping[str, Any] | None = None, *,
                      kind: str, companions: Mapping[str, Content] | None = None) -> Path:
    """Write the single file ``path`` (with ``companions``: {file name beside it: content}) as one result of its
    folder (:func:`write_result_set`, kind :func:`file_kind`): it replaces only what attnscope wrote under these
    names, and records them in the folder's manifest so that the next run may replace them. Returns ``path``."""
    path, names = _file_names(path, companions or {})
    check_result_names(path.parent, names, other="choose another output file", params="out")
    try:
        write_result_set(path.parent, {path.name: content, **(companions or {})}, settings,
                         kind=file_kind(kind, path.name))
    except StorageError as exc:  # the file the user named, with what the operating system said
        reason = str(exc).rsplit(": ", 1)[-1] if ": " in str(exc) else str(exc)
        raise StorageError(f"cannot write {path}: {reason}", params="out") from None
    return path


def write_result_set(out_dir: str | os.PathLike, files: Mapping[str, Content], settings: Mapping[str, Any] | None = None,
                     *, kind: str) -> list[Path]:
    """Write ``files`` ({file name: bytes, text or a callable returning either}) into ``out_dir`` as one
    result, replacing the previous result of the same ``kind`` there as a whole (see the module doc).

    ``settings``: JSON-able settings stored in the manifest beside the files' hashes. Returns the written
    paths (in the order of ``files``). A name held by a file attnscope cannot prove it wrote is refused
    (InputError) before anything is rendered. A failure before the move (a rendering error, a full disk)
    leaves the folder as it was and no staging folder behind.
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
            check_result_names(out, files)  # before any rendering
            try:
                staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{kind}-{os.getpid()}-", dir=out))
            except OSError as exc:
                raise storage_error(out, exc) from None
            held.enter_context(_locked(staging))
        try:
            staged = _stage(staging, kind, files)
            with _locked(out):
                commit = _commit(out, staging, kind, staged, settings_json)
                _apply(out, staging, commit)
        except BaseException as exc:  # not committed: nothing moved, the previous result stays whole
            if not (staging / _COMMIT).exists():
                shutil.rmtree(staging, ignore_errors=True)  # ours, alive and locked: all of it was written here
            if isinstance(exc, OSError) and not isinstance(exc, StorageError):  # (a StorageError names its path)
                raise storage_error(out, exc) from None
            raise
    return [out / name for name in files]


def _stage(staging: Path, kind: str, files: Mapping[str, Content]) -> dict[str, dict[str, Any]]:
    """Render and write every file into ``staging``, each recorded with its hash in the staging record (before
    the file is written: a file that does not match its record is never removed by a cleaner); {name: info}."""
    listed: dict[str, dict[str, Any]] = {}
    for name, content in files.items():
        data = content() if callable(content) else content
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            if not isinstance(data, Iterable):
                raise TypeError(f"files[{name!r}] gave {type(data).__name__}; expected bytes, str or pieces of them")
            listed[name], tmp = _stream(staging, name, data)  # written under a temporary name, then renamed
            _write_record(staging / _RECORD, {"format": _STAGING_FORMAT, "kind": kind, "pid": os.getpid(),
                                              "files": listed})
            os.replace(staging / tmp, staging / name)
            continue
        data = bytes(data)
        listed[name] = {"sha256": _sha256(data), "bytes": len(data)}
        _write_record(staging / _RECORD, {"format": _STAGING_FORMAT, "kind": kind, "pid": os.getpid(),
                                          "files": listed})
        fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return listed


def _stream(staging: Path, name: str, pieces: Iterable[str | bytes]) -> tuple[dict[str, Any], str]:
    """Write ``pieces`` (text as UTF-8) into a temporary file of ``staging`` (a name the cleaner removes),
    hashing as they go: ({sha256, bytes}, the temporary's name). The caller records the hash, then renames the
    file to ``name``, so a staged file with a result's name always has the hash its record gives."""
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{name[:100]}.", suffix=".tmp", dir=staging)
    os.chmod(tmp, 0o666 & ~_umask())
    digest, size, held, count = hashlib.sha256(), 0, [], 0
    with os.fdopen(fd, "wb") as fh:
        for piece in itertools.chain(pieces, [None]):  # None: the end
            if piece is not None:
                if isinstance(piece, str):
                    piece = piece.encode("utf-8")
                if not isinstance(piece, (bytes, bytearray, memoryview)):
                    raise TypeError(f"files[{name!r}] gave a piece of {type(piece).__name__}; expected str or bytes")
                held.append(piece)
                count += len(piece)
            if held and (piece is None or count >= _WRITE_CHUNK):  # gathered into writes of about 256 kB
                block = b"".join(held)
                digest.update(block)
                fh.write(block)
                size, held, count = size + len(block), [], 0
        fh.flush()
        os.fsync(fh.fileno())
    return {"sha256": digest.hexdigest(), "bytes": size}, Path(tmp).name


def _write_record(path: Path, record: Mapping[str, Any]) -> None:
    atomic_write_bytes(path, (json.dumps(record, indent=2) + "\n").encode())


def _manifest_bytes(results: Mapping[str, Any]) -> bytes:
    return (json.dumps({"format": _FORMAT, "results": results}, indent=2) + "\n").encode()


def _commit(out: Path, staging: Path, kind: str, staged: dict[str, dict[str, Any]],
            settings: dict[str, Any]) -> dict[str, Any]:
    """Under ``out``'s lock: check the names again, decide the new manifest, and write the commit record."""
    folder = _Folder(out)
    taken = folder.conflicts(staged)
    if taken:
        raise _not_ours(out, taken)
    from . import __version__

    entry = {"files": staged, "sha256": _set_hash(staged), "settings": settings, "attnscope": __version__,
             "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    previous = folder.trusted.get(kind, {}).get("files", {})
    others = {n for k, e in folder.trusted.items() if k != kind for n in e["files"]}
    # a file of the previous result is removed only while it still has the content attnscope wrote
    remove = {n: folder.sha(n) for n in previous if n not in staged and n not in others and folder.owner(n) == kind}
    results: dict[str, Any] = {}
    for k, e in folder.trusted.items():  # entries edited by hand are dropped: their files are the user's now
        if k == kind:
            continue
        kept = {n: f for n, f in e["files"].items() if n not in staged}  # a file now of this kind is no longer k's
        if kept:
            results[k] = {**e, "files": kept, "sha256": _set_hash(kept)}
    results[kind] = entry
    commit = {"format": _STAGING_FORMAT, "kind": kind, "entry": entry, "base": folder.manifest_sha,
              "replace": {n: folder.sha(n) for n in staged if folder.sha(n) is not None}, "remove": remove,
              "results": results}
    _write_record(staging / _COMMIT, commit)
    fsync_dir(staging)
    return commit


def _apply(out: Path, staging: Path, commit: dict[str, Any]) -> None:
    """Move a committed staging folder's files into ``out``, remove the previous result's extra files (each only
    while it has its recorded hash), write the manifest last, remove the staging folder. Idempotent: a replay
    after a kill finishes the job."""
    new = commit["entry"]["files"]
    try:
        for name, info in new.items():
            if os.path.lexists(staging / name):
                os.replace(staging / name, out / name)
        for name, sha in commit["remove"].items():
            if _regular_sha256(out / name) == sha:
                (out / name).unlink()
        atomic_write_bytes(out / MANIFEST, _manifest_bytes(commit["results"]))
        fsync_dir(out)
    except OSError as exc:  # the staging folder stays committed: the next write finishes the move
        raise storage_error(out, exc) from None
    _discard(staging, commit)


def _read_staging(path: Path) -> tuple[dict[str, str], dict[str, Any] | None] | None:
    """(the staged files {name: sha256}, the commit record or None) of a staging folder; None when it carries
    no record attnscope wrote (then it is not attnscope's to touch)."""
    try:
        record = _load_record(path / _RECORD, "staging record")
        if not isinstance(record, dict) or record.get("format") != _STAGING_FORMAT:
            return None
        _check_entry(record, str(path / _RECORD))
        staged = {n: f["sha256"] for n, f in record["files"].items()}
        if not (path / _COMMIT).exists():
            return staged, None
        commit = _load_record(path / _COMMIT, "commit record")
        if not isinstance(commit, dict) or commit.get("format") != _STAGING_FORMAT \
                or not isinstance(commit.get("kind"), str) or not _KIND.match(commit["kind"]):
            return None
        _check_entry(commit.get("entry"), str(path / _COMMIT))
        for field in ("replace", "remove"):
            names = commit.get(field)
            if not isinstance(names, dict) or any(_bad_name(n) or not isinstance(h, str) for n, h in names.items()):
                return None
        results = commit.get("results")
        if not isinstance(results, dict) or results.get(commit["kind"]) != commit["entry"]:
            return None
        for kind, entry in results.items():
            if not isinstance(kind, str) or not _KIND.match(kind):
                return None
            _check_entry(entry, str(path / _COMMIT))
        base = commit.get("base")
        if base is not None and not (isinstance(base, str) and _SHA256.match(base)):
            return None
        staged.update({n: f["sha256"] for n, f in commit["entry"]["files"].items()})
        return staged, commit
    except (FormatError, AttributeError, TypeError, KeyError):
        return None


def _replayable(out: Path, staging: Path, commit: dict[str, Any]) -> bool:
    """True when a dead writer's commit still applies to ``out`` as it is: the manifest is the one it was
    decided against, every staged file has its recorded hash, and every file it replaces or removes is still
    the one it recorded (or already the new one)."""
    if _regular_sha256(out / MANIFEST) != commit["base"]:
        return False
    for name, info in commit["entry"]["files"].items():
        in_staging, now = _regular_sha256(staging / name), _regular_sha256(out / name)
        if in_staging is not None and in_staging != info["sha256"]:
            return False
        if in_staging is None and now != info["sha256"]:  # moved already: it must be the new file
            return False
        if in_staging is not None and now is not None and now not in (commit["replace"].get(name), info["sha256"]):
            return False
    return True


def _discard(staging: Path, commit: dict[str, Any] | None, staged: Mapping[str, str] | None = None) -> bool:
    """Remove a staging folder's files that have the hash its records give, its records and temporaries, then
    the folder; True when it is gone (a file that does not match is left, and the folder with it)."""
    staged = dict(staged or {})
    if commit is not None:
        staged.update({n: f["sha256"] for n, f in commit["entry"]["files"].items()})
    for entry in os.scandir(staging):
        name = entry.name
        if name in (_RECORD, _COMMIT) or _TEMPORARY.match(name):
            continue
        if name in staged and _regular_sha256(Path(entry.path)) == staged[name]:
            os.unlink(entry.path)
    for name in os.listdir(staging):
        if _TEMPORARY.match(name):
            os.unlink(staging / name)
    if set(os.listdir(staging)) - {_RECORD, _COMMIT}:
        return False
    for name in (_COMMIT, _RECORD):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging / name)
    os.rmdir(staging)
    return True


def clean_stale(folder: str | os.PathLike, *, _have_lock: bool = False) -> list[str]:
    """Finish or remove what killed attnscope processes left in ``folder``; the names handled.

    A staging folder whose process is gone (its lock is free) and that carries attnscope's record is
    replayed when it was committed against the folder as it still is (its result is then in place), and
    removed otherwise, file by file, each only with the hash its record gives; a live one, or one without
    attnscope's record (a warning names it), is left alone. attnscope's own temporary files older than this
    process are removed. Nothing else is touched.
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
                    staging = Path(entry.path)
                    found = _read_staging(staging)
                    if found is None:
                        warn(f"left {staging} alone: a folder named like attnscope's staging folders, without "
                             "the record attnscope writes into them; remove it if it is not yours")
                        continue
                    staged, commit = found
                    if commit is not None and _replayable(folder, staging, commit):
                        _apply(folder, staging, commit)  # decided, and the folder is still as it was: finish
                    elif not _discard(staging, commit, staged):
                        warn(f"left {staging} in place: it holds files that are not the ones attnscope staged "
                             "there; remove it if it is not yours")
                        continue
                handled.append(name)
            elif _TEMPORARY.match(name) and entry.is_file(follow_symlinks=False) \
                    and entry.stat(follow_symlinks=False).st_mtime < _STARTED:
                os.unlink(entry.path)
                handled.append(name)
        except FileNotFoundError:  # another process cleaned it first
            continue
        except OSError as exc:
            raise storage_error(entry.path, exc) from None
    return handled


def _killed_writes(folder: Path) -> bool:
    """True when ``folder`` holds a staging folder of a write that committed and then died (its lock is free)."""
    for name in os.listdir(folder):
        path = folder / name
        if name.startswith(STAGING_PREFIX) and (path / _COMMIT).is_file():
            with _locked(path, blocking=False) as free:
                if free:
                    return True
    return False


def check_result_set(folder: str | os.PathLike, kind: str | None = None) -> dict[str, Any]:
    """The manifest entries of ``folder`` ({kind: entry}; only ``kind`` when given), after checking that every
    listed file is there with the content the manifest says; FormatError naming the mixed files otherwise.
    Reading changes nothing (a move a killed writer left is finished by the next write, not here).

    A folder without a manifest (written by hand, or before manifests) passes with ``{}``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such result folder")
    results = _read_manifest(folder).get("results", {})
    if kind is not None:
        results = {kind: results[kind]} if kind in results else {}
    for k, entry in results.items():
        files = entry["files"]
        if not _entry_trusted(entry):
            raise FormatError(f"{folder / MANIFEST}: its {k} entry was edited (its list of files does not match its "
                              "hash); rerun the command that wrote it")
        missing = [n for n in sorted(files) if not (folder / n).is_file()]
        changed = [n for n in sorted(files) if n not in missing and _file_sha256(folder / n) != files[n].get("sha256")]
        if missing or changed:
            parts = []
            if changed:
                parts.append(f"{', '.join(changed)} {'differs' if len(changed) == 1 else 'differ'} from it")
            if missing:
                parts.append(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing")
            intact = len(files) - len(missing) - len(changed)
            how = ("a write into it was killed while moving its files: the next write into the folder finishes it, "
                   "or rerun the command that wrote it" if _killed_writes(folder) else "rerun the command that wrote it")
            raise FormatError(f"{folder} holds a mixed {k} result: {'; '.join(parts)} ({intact} of {len(files)} files "
                              f"match {MANIFEST}); {how}")
    return results


def check_member(path: str | os.PathLike) -> None:
    """Before reading ``path``: when its folder's manifest lists it, check that whole result (mixed: FormatError)."""
    path = Path(path)
    folder = path.parent
    if not (folder / MANIFEST).is_file():
        return
    for kind, entry in _read_manifest(folder).get("results", {}).items():
        if path.name in entry["files"] and not kind.startswith(FILE_KIND_PREFIX):
            check_result_set(folder, kind)
