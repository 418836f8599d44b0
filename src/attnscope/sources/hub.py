"""Models on the Hugging Face hub: resolved once per run, then read from the hub cache or by byte range.

A run resolves the repository with one metadata request (``/api/models/{repo}/revision/{rev}``: the
commit sha and the file list) and records the sha under ``refs/`` of the standard hub cache
(``HF_HUB_CACHE`` / ``HF_HOME``). After that, files are local paths: a file already in the cache's
snapshot costs no request; a missing one is downloaded with ``huggingface_hub`` (pinned to the sha).
Only config.json, the weights index and the shards holding the tensors read (a family reads q and k)
are fetched.

Big models (a sharded checkpoint of 1 GiB or more, or ``ranges=True`` / ``ATTNSCOPE_HUB_RANGES=1``)
are read by byte range instead: each safetensors header (its first 8 + N bytes) gives every
tensor's offsets, and only the q/k tensors are fetched with HTTP Range requests, one tensor at a
time, each cached as a small safetensors file under ``<attnscope cache>/hub-tensors/<repo>/<sha>/``.
A server that ignores ``Range`` gets the whole-file download instead.

Offline (``HF_HUB_OFFLINE=1``) or hub unreachable (refused, no DNS, timed out): the cached snapshot
of the revision is used without waiting; not cached: one :class:`OfflineError` line. Gated models
use ``HF_TOKEN`` (or ``huggingface-cli login``). No code from the hub is ever run.
Spec: ``org/name`` or ``name``, optionally ``@revision`` (``hub:`` prefix forces this source).
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator
from urllib.parse import quote, urlsplit

from attnscope.errors import AttnscopeError, FormatError, InputError, OfflineError
from attnscope.tables import atomic_write_bytes, atomic_write_text

from .download import cache_dir, get_range
from .hf import INDEX_FILES, SINGLE_FILES, ShardedSource, ShardedWeights, read_config, read_json
from .safetensors_header import check_header, check_header_length, open_safetensors, parse_header

if TYPE_CHECKING:  # pragma: no cover
    import torch

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?(@[\w./-]+)?$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
#: sharded checkpoints at least this big are read by byte range (q/k only) unless told otherwise
RANGES_MIN_BYTES = 1 << 30
#: seconds to wait for the hub's metadata answer (HF_HUB_ETAG_TIMEOUT overrides)
METADATA_TIMEOUT = 10.0


def parse_hub_id(spec: str) -> tuple[str, str | None]:
    """'org/name@rev' -> ('org/name', 'rev'); strips an optional 'hub:' prefix."""
    if spec.startswith("hub:"):
        spec = spec[4:]
    repo, _, rev = spec.partition("@")
    return repo, rev or None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def hub_endpoint() -> str:
    """The hub's base URL, read from ``HF_ENDPOINT`` at call time (huggingface_hub reads it at import)."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_cache() -> Path:
    """The hub cache, from ``HF_HUB_CACHE`` / ``HF_HOME`` at call time."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def _timeout() -> float:
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or METADATA_TIMEOUT)
    except ValueError:
        return METADATA_TIMEOUT


class HubRepo:
    """One hub repository pinned to a commit: file names -> local paths (downloaded when allowed)."""

    def __init__(self, repo_id: str, revision: str | None, token: str | None, sha: str, files: set[str],
                 online: bool) -> None:
        self.repo_id = repo_id
        self.revision = revision or "main"
        self.token = token
        self.sha = sha
        self.files = files
        self.files_known = True  # the hub's file list (False: only what the cached snapshot holds)
        self.online = online
        self.endpoint = hub_endpoint()
        self.cache = hub_cache()

    # -- resolving -------------------------------------------------------------------------------

    @staticmethod
    def storage(repo_id: str) -> Path:
        return hub_cache() / ("models--" + repo_id.replace("/", "--"))

    @classmethod
    def resolve(cls, repo_id: str, revision: str | None = None, token: str | None = None) -> "HubRepo":
        """One metadata round trip online; the cache alone offline or when the hub cannot be reached."""
        from huggingface_hub import get_token

        token = token or os.environ.get("HF_TOKEN") or get_token() or None
        rev = revision or "main"
        if _truthy(os.environ.get("HF_HUB_OFFLINE")):
            return cls._from_cache(repo_id, rev, token, why="downloads are off (offline: HF_HUB_OFFLINE=1)")
        snap = cls.storage(repo_id) / "snapshots" / rev
        if _SHA.match(rev) and all(
            any((snap / f).is_file() for f in names) for names in (("config.json",), INDEX_FILES + SINGLE_FILES)
        ):
            # a commit never changes: its cached snapshot needs no request; files missing from it
            # are still downloaded (online=True)
            repo = cls._from_cache(repo_id, rev, token, why="")
            repo.online, repo.files_known = True, False
            return repo
        from huggingface_hub import HfApi

        try:
            info = HfApi(endpoint=hub_endpoint(), token=token).model_info(
                repo_id, revision=revision, timeout=_timeout()
            )
        except Exception as exc:  # classified below: unreachable -> cache, else one line
            if _unreachable(exc):
                return cls._from_cache(repo_id, rev, token, why=f"the hub at {hub_endpoint()} cannot be reached")
            raise _hub_error(repo_id, "the repository", exc) from None
        sha = str(info.sha)
        files = {s.rfilename for s in (info.siblings or [])}
        ref = cls.storage(repo_id) / "refs" / rev
        if not _SHA.match(rev) and (not ref.is_file() or ref.read_text().strip() != sha):
            atomic_write_text(ref, sha)  # so that a later offline run finds this revision
        return cls(repo_id, revision, token, sha, files, online=True)

    @classmethod
    def _from_cache(cls, repo_id: str, rev: str, token: str | None, why: str) -> "HubRepo":
        root = cls.storage(repo_id)
        ref = root / "refs" / rev
        sha = rev if _SHA.match(rev) else (ref.read_text().strip() if ref.is_file() else "")
        snap = root / "snapshots" / sha if sha else None
        if snap is None or not (snap / "config.json").is_file():
            # a hub id is only tried for a name that is no local path: say so, a typo in a path looks like this
            raise OfflineError(f"{repo_id}: no local path of that name, and as a hub id not in the hub cache "
                               f"({hub_cache()}){' and ' + why if why else ''}")
        files = {p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file()}
        return cls(repo_id, None if rev == "main" else rev, token, sha, files, online=False)

    # -- files -----------------------------------------------------------------------------------

    def local(self, filename: str) -> Path | None:
        path = self.storage(self.repo_id) / "snapshots" / self.sha / filename
        return path if path.is_file() else None

    def fetch(self, filename: str) -> Path:
        """Local path of ``filename`` (cached: no request; else downloaded, pinned to the commit)."""
        path = self.local(filename)
        if path is not None:
            return path
        if self.online and self.files_known and filename not in self.files:
            raise InputError(f"{self.repo_id}: the hub repo has no {filename}")
        if not self.online:
            raise OfflineError(f"{self.repo_id}: {filename} is not in the hub cache and the hub cannot be used")
        from huggingface_hub import hf_hub_download

        try:
            with _quiet_client(), _no_bars(hf_hub_download) as quiet:
                return Path(hf_hub_download(
                    self.repo_id, filename, revision=self.sha, token=self.token, endpoint=self.endpoint,
                    cache_dir=self.cache, etag_timeout=_timeout(), **quiet,
                ))
        except Exception as exc:  # one line below
            raise _hub_error(self.repo_id, filename, exc) from None

    def url(self, filename: str) -> str:
        return f"{self.endpoint}/{self.repo_id}/resolve/{self.sha}/{quote(filename)}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@contextmanager
def _quiet_client() -> Iterator[None]:
    """huggingface_hub's own retry warnings stay off the console: the user gets our one line."""
    log = logging.getLogger("huggingface_hub")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


@contextmanager
def _no_bars(download: Any) -> Iterator[dict[str, Any]]:
    """Keyword arguments that keep ``download``'s progress bars off: its ``tqdm_class`` where it takes one
    (huggingface_hub>=1.1); older clients have only a global switch, turned off here and back on after."""
    import inspect

    if "tqdm_class" in inspect.signature(download).parameters:
        yield {"tqdm_class": _silent_tqdm()}
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_on = not are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield {}
    finally:
        if was_on:
            enable_progress_bars()


def _silent_tqdm() -> type:
    """A tqdm that never draws (progress is attnscope.progress's business, per layer scored)."""
    from tqdm.auto import tqdm

    class Silent(tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Silent


def _unreachable(exc: BaseException) -> bool:
    """A network failure (refused, DNS, timeout, reset) rather than an answer from the hub."""
    from huggingface_hub import errors as hub_errors

    if isinstance(exc, hub_errors.HfHubHTTPError):
        return False
    names = {t.__name__ for t in type(exc).__mro__}
    return isinstance(exc, (OSError, ConnectionError, TimeoutError)) or bool(
        names & {"TransportError", "NetworkError", "TimeoutException", "ConnectError", "OfflineModeIsEnabled"}
    )


def _hub_error(repo_id: str, what: str, exc: BaseException) -> AttnscopeError:
    """A huggingface_hub / network exception as one user-facing line."""
    from huggingface_hub import errors as hub_errors

    status = getattr(getattr(exc, "response", None), "status_code", None) or getattr(exc, "code", None)
    headers = getattr(exc, "headers", None) or getattr(getattr(exc, "response", None), "headers", None) or {}
    if isinstance(exc, hub_errors.GatedRepoError) or headers.get("X-Error-Code") == "GatedRepo":
        return InputError(f"{repo_id} is gated: accept its licence on huggingface.co and set HF_TOKEN")
    if isinstance(exc, hub_errors.RevisionNotFoundError):
        return InputError(f"{repo_id}: the hub repo has no revision of that name")
    if isinstance(exc, hub_errors.EntryNotFoundError):
        return InputError(f"{repo_id}: the hub repo has no {what}")
    if isinstance(exc, hub_errors.RepositoryNotFoundError) or status in (401, 403, 404):
        return InputError(f"{repo_id}: no such local path, and no such hub repo (or it is private: set HF_TOKEN)")
    if _unreachable(exc) or type(exc).__name__ in {"RemoteProtocolError", "ReadError", "IncompleteRead"}:
        return OfflineError(f"{repo_id}: downloading {what} failed ({_first_line(exc)}); run again to resume")
    return InputError(f"{repo_id}: cannot fetch {what} from the hub ({type(exc).__name__}: {_first_line(exc)})")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


# --------------------------------------------------------------------------- byte-range reads


class RangeReader:
    """Safetensors tensors of a hub repo read by HTTP range, each cached as its own small file.

    ``keys``/``tensor`` mirror what :class:`~attnscope.sources.hf.ShardedWeights` needs. A file already
    whole in the hub cache is read from there; a server that refuses ranges makes the reader download
    whole files (``HubRepo.fetch``) from then on. ``bytes_read`` counts the bytes this reader received
    (headers, tensors, whole files it had to download); ``file_bytes`` the size of each safetensors
    file it read from (header + data section), so their ratio is what ranges saved.
    """

    def __init__(self, repo: HubRepo) -> None:
        self.repo = repo
        self.root = cache_dir() / "hub-tensors" / repo.repo_id.replace("/", "--") / repo.sha
        self.refused = False
        self._headers: dict[str, tuple[int, dict[str, Any]]] = {}
        self._where: dict[str, str] = {}
        self.bytes_read = 0
        self.file_bytes: dict[str, int] = {}

    def _get(self, filename: str, lo: int, hi: int) -> bytes | None:
        if not self.repo.online:
            raise OfflineError(f"{self.repo.repo_id}: {filename} is not in the caches and the hub cannot be used")
        import urllib.error

        url = self.repo.url(filename)
        where = self._where.get(filename)  # the CDN location the hub redirected to, reused within a run
        try:
            if where is not None:
                try:
                    data, _ = get_range(where, lo, hi)
                except urllib.error.HTTPError as exc:  # a signed CDN URL that expired: ask the hub again
                    if exc.code not in (403, 404, 410):
                        raise
                    where = None
            if where is None:
                data, final = get_range(url, lo, hi, self.repo.headers())
                if urlsplit(final).netloc != urlsplit(url).netloc:
                    self._where[filename] = final
        except AttnscopeError:
            raise
        except Exception as exc:  # urllib errors and cut connections: one line
            raise _hub_error(self.repo.repo_id, filename, exc) from None
        if data is None:
            self.refused = True
        else:
            self.bytes_read += len(data)
        return data

    def _whole(self, filename: str) -> Path | None:
        """The whole file when it is cached, or when ranges cannot be used (then downloaded)."""
        path = self.repo.local(filename)
        if path is None and self.refused:
            return self._download(filename)
        if path is not None:
            self.file_bytes[filename] = path.stat().st_size
        return path

    def _download(self, filename: str) -> Path:
        """The whole file (ranges refused), counted in ``bytes_read``."""
        path = self.repo.fetch(filename)
        self.bytes_read += path.stat().st_size
        self.file_bytes[filename] = path.stat().st_size
        return path

    def header(self, filename: str) -> tuple[int, dict[str, Any]]:
        """(start of the data section, the JSON header) of a remote safetensors file."""
        if filename in self._headers:
            return self._headers[filename]
        cached = self.root / (filename + ".header.json")
        label = f"{self.repo.repo_id}: {filename}"
        if cached.is_file():
            obj = read_json(cached, "a cached safetensors header")
            start, header = obj.get("start"), obj.get("header")
            if not isinstance(start, int) or not isinstance(header, dict):
                raise FormatError(f"{cached}: not a cached safetensors header (delete it to fetch it again)")
            return self._keep_header(filename, start, check_header(header, None, label))
        head = self._get(filename, 0, 8)
        if head is None:
            raise _RangesRefused
        (n,) = struct.unpack("<Q", head)
        check_header_length(n, None, label)
        raw = self._get(filename, 8, 8 + n)
        if raw is None:
            raise _RangesRefused
        header = check_header(parse_header(raw, label), None, label)
        atomic_write_text(cached, json.dumps({"start": 8 + n, "header": header}))
        return self._keep_header(filename, 8 + n, header)

    def _keep_header(self, filename: str, start: int, header: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Remember a file's header and its size (the data section ends at the largest tensor end)."""
        ends = [int(e["data_offsets"][1]) for k, e in header.items() if k != "__metadata__" and isinstance(e, dict)]
        self.file_bytes[filename] = start + max(ends, default=0)
        self._headers[filename] = (start, header)
        return self._headers[filename]

    def keys(self, filename: str) -> list[str]:
        path = self._whole(filename)
        if path is None:
            try:
                return [k for k in self.header(filename)[1] if k != "__metadata__"]
            except _RangesRefused:
                path = self._download(filename)
        with open_safetensors(path) as fh:
            return list(fh.keys())

    def tensor(self, filename: str, name: str) -> "torch.Tensor":
        from safetensors.torch import load

        cached = self.root / filename / (name + ".safetensors")
        if cached.is_file():
            return load(cached.read_bytes())[name]
        path = self._whole(filename)
        if path is None:
            try:
                start, header = self.header(filename)
                entry = header.get(name)
                if entry is None:
                    raise FormatError(f"{self.repo.repo_id}: {filename} does not hold {name!r}")
                lo, hi = (int(x) for x in entry["data_offsets"])
                data = self._get(filename, start + lo, start + hi)
                if data is None:
                    raise _RangesRefused
            except _RangesRefused:
                path = self._download(filename)
            else:
                blob = _one_tensor_file(name, entry["dtype"], entry["shape"], data)
                atomic_write_bytes(cached, blob)
                return load(blob)[name]
        with open_safetensors(path) as fh:
            return fh.get_tensor(name)


class _RangesRefused(Exception):
    """The server answered a Range request with the whole file."""


def _one_tensor_file(name: str, dtype: str, shape: list[int], data: bytes) -> bytes:
    """A valid safetensors file holding one tensor (header padded to 8 bytes, as the format asks)."""
    header = json.dumps({name: {"dtype": dtype, "shape": shape, "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data




# --------------------------------------------------------------------------- the source


def _want_ranges(option: bool | None, total_size: int | None) -> bool:
    if option is not None:
        return bool(option)
    env = os.environ.get("ATTNSCOPE_HUB_RANGES")
    if env:
        return _truthy(env)
    return total_size is not None and total_size >= RANGES_MIN_BYTES


class HubSource(ShardedSource):
    """A hub model id: resolved once, config and index first, then only the q/k bytes or shards read."""

    def __init__(self, repo: HubRepo, config: dict[str, Any], weights: ShardedWeights, ranges: bool) -> None:
        self.repo = repo
        self._config = config
        self._weights = weights
        self.ranges = ranges
        self.name = repo.repo_id

    @classmethod
    def detect(cls, spec: str) -> bool:
        if spec.startswith("hub:"):
            return True
        if os.path.exists(spec) or spec.startswith(("/", ".", "~")):
            return False
        return bool(_HUB_ID.match(spec))

    @classmethod
    def open(cls, spec: str, **options: Any) -> "HubSource":
        """Options: ``revision``, ``token``, ``ranges`` (True / False / None = by size)."""
        repo_id, revision = parse_hub_id(spec)
        repo = HubRepo.resolve(repo_id, options.get("revision") or revision, options.get("token"))
        config = read_config(repo.fetch("config.json"))
        names = repo.files
        layout = next((("index", f) for f in INDEX_FILES if f in names), None) or next(
            (("single", f) for f in SINGLE_FILES if f in names), None
        )
        if layout is None:
            where = "hub repo" if repo.online else "cached snapshot"
            raise InputError(f"{repo_id}: the {where} has no model.safetensors, safetensors index or pytorch_model.bin")
        total = None
        if layout[0] == "index":
            meta = read_json(repo.fetch(layout[1]), "the weights index").get("metadata") or {}
            total = int(meta["total_size"]) if str(meta.get("total_size", "")).isdigit() else None
        ranges = _want_ranges(options.get("ranges"), total)
        reader = RangeReader(repo) if ranges else None
        weights = ShardedWeights(repo_id, layout[0], layout[1], repo.fetch, reader=reader)
        return cls(repo, config, weights, ranges)

    def transfer(self) -> dict[str, int | None]:
        """What byte-range reading cost so far: ``bytes_read`` (received by this source: headers, q/k
        tensors, whole files where ranges were refused) and ``shard_bytes`` (the size of the weight files
        those bytes came from, i.e. what downloading them whole would cost). Both None without ranges or when
        no safetensors file was read by range (a ``pytorch_model.bin`` is downloaded whole)."""
        reader = self._weights._reader
        if not isinstance(reader, RangeReader) or not reader.file_bytes:  # no ranges, or no safetensors read
            return {"bytes_read": None, "shard_bytes": None}
        return {"bytes_read": reader.bytes_read, "shard_bytes": sum(reader.file_bytes.values())}

    @property
    def range_cache(self) -> Path | None:
        """Where this revision's tensors read by range are kept (None without ranges); a sweep over many
        revisions removes it once a revision is scored."""
        reader = self._weights._reader
        return reader.root if isinstance(reader, RangeReader) else None
