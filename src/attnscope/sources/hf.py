"""Hugging Face model directories on local disk: config.json plus weights, read one tensor at a time.

Layouts understood (the first found wins):

* ``model.safetensors.index.json`` + shards (the index's ``weight_map`` says which shard holds a name),
* ``model.safetensors`` (or any single ``*.safetensors`` file),
* ``pytorch_model.bin.index.json`` + ``.bin`` shards,
* ``pytorch_model.bin`` (legacy; ``torch.load(weights_only=True, mmap=True)``, never arbitrary code).

Safetensors files are opened per read and memory-mapped, so peak memory stays near the tensors in
use, whatever the model size; each header is checked against its file first
(:mod:`attnscope.sources.safetensors_header`). :class:`ShardedWeights` holds the one mechanism (index -> file ->
tensor) and takes a ``resolve(filename) -> Path`` function, which is all that differs between a local
directory and the hub (:mod:`attnscope.sources.hub`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from attnscope.errors import FormatError, InputError

from .base import WeightSource, path_inside, readable_file, relative_name
from .safetensors_header import open_safetensors

if TYPE_CHECKING:  # pragma: no cover
    import torch

INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path``, or one clear FormatError."""
    readable_file(path, str(path))  # a FIFO named config.json would block the read
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # nested past Python's limit
        raise FormatError(f"{path}: cannot read {what}: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise FormatError(f"{path}: {what} is not a JSON object")
    return obj


def read_config(path: Path) -> dict[str, Any]:
    """config.json as a dict that names its ``model_type``, its sizes checked (:func:`check_config_sizes`)."""
    cfg = read_json(path, "config.json")
    if "model_type" not in cfg:
        raise FormatError(f"{path}: config.json has no model_type, so the architecture is unknown")
    check_config_sizes(cfg, str(path))
    return cfg


#: the largest size a config may give (a vocabulary, a width, a count of layers or positions): torch indexes
#: embeddings and shapes with it, and no model has a dimension past int32
MAX_CONFIG_SIZE = 2**31 - 1
_SIZE_KEY = re.compile(r"^(num_|n_).+|.+_(size|dim|layers|heads)$|^(d_model|d_ff|d_kv|head_dim)$")


def check_config_sizes(config: Mapping[str, Any], label: str, where: str = "") -> None:
    """Refuse a size in ``config`` (``vocab_size``, ``hidden_size``, ``num_*``, ``n_*``, ``*_size``, ``*_dim``,
    ``*_layers``, ``*_heads``, also in nested ``*_config`` mappings) that is a number but not a whole one from
    0 to :data:`MAX_CONFIG_SIZE`: one FormatError naming the field, before transformers builds a model of it
    (``vocab_size: 1e12`` once gave its "look at the above report" with no report)."""
    for key, value in config.items():
        if isinstance(value, Mapping) and isinstance(key, str) and key.endswith("_config"):
            check_config_sizes(value, label, f"{where}{key}.")
            continue
        if not isinstance(key, str) or not _SIZE_KEY.match(key) or isinstance(value, bool) \
                or not isinstance(value, (int, float)):
            continue
        whole = isinstance(value, int) or (math.isfinite(value) and float(value).is_integer())
        if not whole or value > MAX_CONFIG_SIZE:
            raise FormatError(f"{label}: {where}{key} is {value!r}; a size is a whole number of at most "
                              f"{MAX_CONFIG_SIZE:,} (this config.json does not describe a model that can be built)")


class ShardedWeights:
    """Tensor names -> files (single file or index + shards), read lazily.

    layout is "index" (``weight_map`` from an index file) or "single" (one weights file).
    ``resolve(filename)`` returns the local path of a file named in the layout (downloading it
    first for the hub) or raises an AttnscopeError. ``reader``, when given, reads safetensors files
    instead of opening local paths (the hub's byte-range reader): ``reader.keys(filename)`` and
    ``reader.tensor(filename, name)``.
    """

    def __init__(
        self, label: str, layout: str, filename: str, resolve: Callable[[str], Path], reader: Any = None
    ) -> None:
        self.label = label
        self._resolve = resolve
        self._reader = reader
        self._bin_cache: dict[str, dict[str, Any]] = {}
        self._st_keys: dict[str, list[str]] = {}
        if layout == "index":
            index = read_json(resolve(filename), "the weights index")
            wmap = index.get("weight_map")
            if not isinstance(wmap, dict) or not wmap:
                raise FormatError(f"{label}: {filename} has no weight_map")
            self.weight_map: dict[str, str] = {
                str(k): relative_name(v, f"{label}: {filename} entry {str(k)!r}") for k, v in wmap.items()
            }
        elif layout == "single":
            self.weight_map = {name: filename for name in self._file_keys(filename)}
        else:  # pragma: no cover - internal misuse
            raise ValueError(layout)

    # -- files -----------------------------------------------------------------------------------

    def _path(self, filename: str) -> Path:
        path = self._resolve(filename)
        if not os.path.lexists(path):
            raise FormatError(f"{self.label}: weights file {filename} is named in the index but missing")
        return readable_file(path, f"{self.label}: weights file {filename}")

    def _file_keys(self, filename: str) -> list[str]:
        if filename.endswith(".safetensors"):
            if self._reader is not None:
                return self._reader.keys(filename)
            if filename not in self._st_keys:
                with self._safe_open(filename) as fh:
                    self._st_keys[filename] = list(fh.keys())
            return self._st_keys[filename]
        return list(self._load_bin(filename))

    def _safe_open(self, filename: str) -> Any:
        return open_safetensors(self._path(filename))  # the header checked against the file first

    def _load_bin(self, filename: str) -> dict[str, Any]:
        """A legacy torch file, loaded with weights_only=True (memory-mapped when it is a zip file)."""
        if filename not in self._bin_cache:
            import pickle
            import zipfile

            import torch

            path = self._path(filename)
            try:
                try:
                    sd = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
                except RuntimeError as exc:  # pre-zip legacy format cannot be memory-mapped
                    if zipfile.is_zipfile(path) or "mmap" not in str(exc):
                        raise
                    sd = torch.load(path, map_location="cpu", weights_only=True)
            except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
                raise FormatError(f"{path}: cannot load torch weights safely ({_short(exc)})") from None
            if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
                sd = sd["state_dict"]
            if not isinstance(sd, dict):
                raise FormatError(f"{path}: not a state dict")
            self._bin_cache.clear()  # keep at most one legacy shard mapped
            self._bin_cache[filename] = sd
        return self._bin_cache[filename]

    # -- tensors ---------------------------------------------------------------------------------

    def keys(self) -> list[str]:
        return list(self.weight_map)

    def get(self, name: str) -> "torch.Tensor":
        filename = self.weight_map.get(name)
        if filename is None:
            raise FormatError(f"{self.label}: no tensor named {name!r}")
        if filename.endswith(".safetensors"):
            if self._reader is not None:
                return self._reader.tensor(filename, name)
            with self._safe_open(filename) as fh:
                try:
                    return fh.get_tensor(name)
                except Exception as exc:
                    raise FormatError(f"{self.label}: cannot read {name!r} from {filename} ({_short(exc)})") from None
        sd = self._load_bin(filename)
        if name not in sd:
            raise FormatError(f"{self.label}: {filename} does not hold {name!r} although the index says so")
        return sd[name]

    def close(self) -> None:
        self._bin_cache.clear()


def check_indexes(root: Path) -> None:
    """Check every weights index in ``root`` (see :func:`~attnscope.sources.base.relative_name`) before
    another loader (transformers, for ``heads``) follows its names: one FormatError naming the entry."""
    for filename in INDEX_FILES:
        if (root / filename).is_file():
            wmap = read_json(root / filename, "the weights index").get("weight_map")
            for k, v in (wmap.items() if isinstance(wmap, dict) else ()):
                relative_name(v, f"{root}: {filename} entry {str(k)!r}")


def _short(exc: BaseException) -> str:
    """One line of an exception message."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def find_layout(names: set[str]) -> tuple[str, str] | None:
    """(layout, filename) for the weight files present among ``names``, or None."""
    for fn in INDEX_FILES:
        if fn in names:
            return "index", fn
    for fn in SINGLE_FILES:
        if fn in names:
            return "single", fn
    singles = sorted(n for n in names if n.endswith(".safetensors"))
    if len(singles) == 1:
        return "single", singles[0]
    return None


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~")) or spec.endswith(("/", os.sep)) or spec.count("/") > 1


class ShardedSource(WeightSource):
    """A config plus :class:`ShardedWeights`: what a local directory and a hub repo have in common."""

    _config: dict[str, Any]
    _weights: ShardedWeights

    @property
    def config(self) -> dict[str, Any]:
        return self._config

    def keys(self) -> list[str]:
        return self._weights.keys()

    def has(self, name: str) -> bool:
        return name in self._weights.weight_map

    def get(self, name: str) -> "torch.Tensor":
        return self._weights.get(name)

    def close(self) -> None:
        self._weights.close()


class HFDirectorySource(ShardedSource):
    """A local Hugging Face model directory (config.json + safetensors or legacy .bin weights)."""

    def __init__(self, root: Path, config: dict[str, Any], weights: ShardedWeights, name: str | None = None):
        self.root = root
        self._config = config
        self._weights = weights
        self.name = name or str(root)

    @classmethod
    def detect(cls, spec: str) -> bool:
        path = Path(spec).expanduser()
        if path.is_dir():
            names = {p.name for p in path.iterdir()}
            if find_layout(names) is not None:
                return True
            # a directory that no other source claims: say what is missing (no config / no weights)
            return "config.json" not in names or not names & {"model.bin", "model.gguf"}
        if path.is_file():
            return path.name in INDEX_FILES + SINGLE_FILES or (
                path.suffix == ".safetensors" and (path.parent / "config.json").is_file()
            )
        return _looks_like_path(spec)  # a path that does not exist: this source says so

    @classmethod
    def open(cls, spec: str, **options: Any) -> "HFDirectorySource":
        path = Path(spec).expanduser()
        if not path.exists():
            raise InputError(f"{spec}: no such file or directory")
        if not path.is_dir() and not path.is_file():  # a device, a FIFO, a socket
            raise InputError(f"{spec}: not a regular file or a directory, so not a model")
        root = path if path.is_dir() else path.parent
        names = {p.name for p in root.iterdir()}
        if path.is_file():
            layout: tuple[str, str] | None = (
                ("index", path.name) if path.name in INDEX_FILES else ("single", path.name)
            )
        else:
            layout = find_layout(names)
        if "config.json" not in names:
            raise InputError(f"{root}: no config.json, so the model's architecture is unknown")
        if layout is None:
            raise InputError(
                f"{root}: no weights found (expected model.safetensors, a safetensors index, or pytorch_model.bin)"
            )
        config = read_config(root / "config.json")

        def resolve(filename: str) -> Path:
            return path_inside(root, filename, f"{root}: weights file")

        weights = ShardedWeights(str(root), layout[0], layout[1], resolve)
        return cls(root, config, weights, name=options.get("name"))
