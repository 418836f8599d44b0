"""Models on the Hugging Face hub, fetched file by file through ``huggingface_hub`` and its cache.

Only what scoring needs is downloaded: config.json, the weights index, and then, lazily, the shards
that hold the tensors actually read (a family spec reads q and k only). Files land in the standard
hub cache (``HF_HOME``), so a second run is offline-capable. Gated models use ``HF_TOKEN`` (or the
token stored by ``huggingface-cli login``). No code from the hub is ever run (no trust_remote_code).

Offline (``HF_HUB_OFFLINE=1`` or no network) and not cached: one :class:`OfflineError` line.
Spec: ``org/name`` or ``name``, optionally ``@revision`` (``hub:`` prefix forces this source).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from attnscope.errors import AttnscopeError, InputError, OfflineError

from .hf import INDEX_FILES, SINGLE_FILES, ShardedSource, ShardedWeights, read_config

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?(@[\w./-]+)?$")


def parse_hub_id(spec: str) -> tuple[str, str | None]:
    """'org/name@rev' -> ('org/name', 'rev'); strips an optional 'hub:' prefix."""
    if spec.startswith("hub:"):
        spec = spec[4:]
    repo, _, rev = spec.partition("@")
    return repo, rev or None


class HubFiles:
    """Resolve file names of one hub repo to local cached paths (downloading when allowed)."""

    def __init__(self, repo_id: str, revision: str | None = None, token: str | None = None) -> None:
        self.repo_id = repo_id
        self.revision = revision
        self.token = token or os.environ.get("HF_TOKEN") or None

    def fetch(self, filename: str) -> Path:
        """Local path of ``filename`` (from the cache, else downloaded); errors as one line."""
        from huggingface_hub import hf_hub_download

        try:
            return Path(
                hf_hub_download(self.repo_id, filename, revision=self.revision, token=self.token)
            )
        except Exception as exc:  # mapped to user errors below
            raise _hub_error(self.repo_id, filename, exc) from None

    def try_fetch(self, filename: str) -> Path | None:
        """Like :meth:`fetch`, but None when the repo has no such file."""
        try:
            return self.fetch(filename)
        except _MissingFile:
            return None


class _MissingFile(InputError):
    """The repo exists but has no such file."""


def _hub_error(repo_id: str, filename: str, exc: Exception) -> AttnscopeError:
    """A huggingface_hub exception as one user-facing line."""
    from huggingface_hub import errors as hub_errors

    def is_a(*names: str) -> bool:
        types = tuple(t for t in (getattr(hub_errors, n, None) for n in names) if isinstance(t, type))
        return bool(types) and isinstance(exc, types)

    if is_a("GatedRepoError"):
        return InputError(f"{repo_id} is gated: accept its licence on huggingface.co and set HF_TOKEN")
    if is_a("RepositoryNotFoundError", "RevisionNotFoundError"):
        return InputError(f"{repo_id}: no such local path, and no such hub repo (or it is private: set HF_TOKEN)")
    if is_a("RemoteEntryNotFoundError"):
        return _MissingFile(f"{repo_id}: the hub repo has no {filename}")
    if is_a("OfflineModeIsEnabled", "LocalEntryNotFoundError") or isinstance(exc, (OSError, ConnectionError)):
        return OfflineError(
            f"{repo_id}: no such local path, and hub file {filename} is not cached and cannot be "
            "downloaded while offline (HF_HUB_OFFLINE=1 or no network)"
        )
    return InputError(f"{repo_id}: cannot fetch {filename} from the hub ({type(exc).__name__})")


class HubSource(ShardedSource):
    """A hub model id: config and index first, then only the shards holding the tensors read."""

    def __init__(self, files: HubFiles, config: dict[str, Any], weights: ShardedWeights) -> None:
        self.files = files
        self._config = config
        self._weights = weights
        self.name = files.repo_id

    @classmethod
    def detect(cls, spec: str) -> bool:
        if spec.startswith("hub:"):
            return True
        if os.path.exists(spec) or spec.startswith(("/", ".", "~")):
            return False
        return bool(_HUB_ID.match(spec))

    @classmethod
    def open(cls, spec: str, **options: Any) -> "HubSource":
        repo_id, revision = parse_hub_id(spec)
        files = HubFiles(repo_id, revision=options.get("revision", revision), token=options.get("token"))
        config = read_config(files.fetch("config.json"))
        offline: OfflineError | None = None
        for layout, candidates in (("index", INDEX_FILES), ("single", SINGLE_FILES)):
            for filename in candidates:
                try:
                    found = files.try_fetch(filename)
                except OfflineError as exc:  # maybe only another layout is cached: keep looking
                    offline = offline or exc
                    continue
                if found is not None:
                    weights = ShardedWeights(repo_id, layout, filename, files.fetch)
                    return cls(files, config, weights)
        if offline is not None:
            raise offline
        raise InputError(f"{repo_id}: the hub repo has no model.safetensors, safetensors index or pytorch_model.bin")
