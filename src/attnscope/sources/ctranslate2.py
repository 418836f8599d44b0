"""CTranslate2 model directories (faster-whisper, OpenNMT): a small reader for ``model.bin``.

``model.bin`` layout (little endian), binary versions 4-6:

    uint32 version; string spec_name; uint32 spec_revision       (string = uint16 length incl. NUL, bytes)
    uint32 n_variables, then per variable:
        string name; uint8 rank; uint32 dims[rank]; uint8 dtype; uint32 n_bytes; bytes data
    uint32 n_aliases, then per alias: string alias; string target

dtype ids: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16. Quantised weights
(int8/int16) come with a companion ``<name>_scale`` (per output row for int8); the float weight is
``w / scale``. The header is parsed once (data offsets only); tensor bytes are read on demand.

The config is ``config.json`` (tokens, alignment heads; no shapes) merged with what the file says:
``model_type = "ct2:<spec name>"`` and, for the stacks present, HF-style head counts and dims
(``encoder_attention_heads``, ``decoder_attention_heads``, ``encoder_layers``, ``decoder_layers``,
``d_model``) read from the ``<stack>/num_heads`` scalars and the weight shapes.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from attnscope.errors import FormatError, InputError

from .base import WeightSource, metadata_count

if TYPE_CHECKING:  # pragma: no cover
    import torch

SUPPORTED_VERSIONS = (4, 5, 6)
#: CTranslate2 DataType ids -> numpy dtype (bfloat16 is read as uint16 and widened)
DTYPES: dict[int, str] = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}


@dataclass(frozen=True)
class CT2Variable:
    """Where one variable lives in ``model.bin``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int
    n_bytes: int


def _read_exact(fh: BinaryIO, n: int, path: Path) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise FormatError(f"{path}: truncated CTranslate2 model.bin (header ends early)")
    return data


def _u(fh: BinaryIO, fmt: str, path: Path) -> int:
    return struct.unpack("<" + fmt, _read_exact(fh, struct.calcsize(fmt), path))[0]


def _string(fh: BinaryIO, path: Path) -> str:
    n = _u(fh, "H", path)
    raw = _read_exact(fh, n, path)
    try:
        return raw.rstrip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{path}: corrupt CTranslate2 model.bin (bad variable name)") from None


def read_ct2_index(path: Path) -> tuple[int, str, int, dict[str, CT2Variable], dict[str, str]]:
    """Parse the header of a ``model.bin``: (version, spec name, revision, variables, aliases)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        version = _u(fh, "I", path)
        if version not in SUPPORTED_VERSIONS:
            raise FormatError(
                f"{path}: CTranslate2 binary version {version} is not supported (supported: "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))})"
            )
        spec = _string(fh, path)
        revision = _u(fh, "I", path)
        n_vars = _u(fh, "I", path)
        variables: dict[str, CT2Variable] = {}
        for _ in range(n_vars):
            name = _string(fh, path)
            rank = _u(fh, "B", path)
            shape = tuple(_u(fh, "I", path) for _ in range(rank))
            dtype_id = _u(fh, "B", path)
            if dtype_id not in DTYPES:
                raise FormatError(f"{path}: variable {name} has unknown CTranslate2 dtype id {dtype_id}")
            n_bytes = _u(fh, "I", path)
            offset = fh.tell()
            dtype = DTYPES[dtype_id]
            itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
            if n_bytes != int(np.prod(shape, dtype=np.int64)) * itemsize:
                raise FormatError(f"{path}: variable {name} has {n_bytes} bytes for shape {shape} {dtype}")
            if offset + n_bytes > size:
                raise FormatError(f"{path}: truncated CTranslate2 model.bin (variable {name} cut off)")
            fh.seek(n_bytes, os.SEEK_CUR)
            variables[name] = CT2Variable(name, shape, dtype, offset, n_bytes)
        aliases: dict[str, str] = {}
        if fh.tell() < size:
            for _ in range(_u(fh, "I", path)):
                alias = _string(fh, path)
                aliases[alias] = _string(fh, path)
    return version, spec, revision, variables, aliases


class CT2Source(WeightSource):
    """A CTranslate2 model directory (``model.bin`` + ``config.json``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "model.bin"
        self.name = str(directory)
        self.version, self.spec_name, self.revision, self._vars, self._aliases = read_ct2_index(self.path)
        self._config = self._build_config()

    @classmethod
    def detect(cls, spec: str) -> bool:
        p = Path(spec)
        if p.is_file() and p.name == "model.bin":
            p = p.parent
        return p.is_dir() and (p / "model.bin").is_file()

    @classmethod
    def open(cls, spec: str, **options: Any) -> "CT2Source":
        p = Path(spec)
        if p.is_file() and p.name == "model.bin":
            p = p.parent
        if not (p / "model.bin").is_file():
            raise InputError(f"{spec}: no CTranslate2 model.bin in this directory")
        return cls(p)

    @property
    def config(self) -> dict[str, Any]:
        return self._config

    def keys(self) -> list[str]:
        return [*self._vars, *self._aliases]

    def has(self, name: str) -> bool:
        return name in self._vars or name in self._aliases

    def raw(self, name: str) -> np.ndarray:
        """A variable as stored (int8 stays int8; bfloat16 becomes float32)."""
        var = self._vars.get(self._aliases.get(name, name))
        if var is None:
            raise FormatError(f"{self.name}: no variable named {name!r}")
        with open(self.path, "rb") as fh:
            fh.seek(var.offset)
            data = fh.read(var.n_bytes)
        if len(data) != var.n_bytes:
            raise FormatError(f"{self.name}: truncated model.bin (variable {name})")
        if var.dtype == "bfloat16":
            bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
            return bits.view(np.float32).reshape(var.shape)
        return np.frombuffer(data, dtype=np.dtype(var.dtype).newbyteorder("<")).reshape(var.shape)

    def get_numpy(self, name: str) -> np.ndarray:
        """A variable as float32, dequantised with its ``_scale`` companion when it is int8/int16."""
        arr = self.raw(name)
        if arr.dtype in (np.int8, np.int16) and self.has(f"{name}_scale"):
            scale = self.raw(f"{name}_scale").astype(np.float32)
            if scale.ndim == 1 and arr.ndim >= 1 and scale.shape[0] == arr.shape[0]:
                scale = scale.reshape(-1, *([1] * (arr.ndim - 1)))
            return (arr.astype(np.float32) / scale).astype(np.float32)
        return np.ascontiguousarray(arr, dtype=np.float32) if arr.dtype.kind == "f" else arr.copy()

    def get(self, name: str) -> "torch.Tensor":
        import torch

        return torch.from_numpy(np.array(self.get_numpy(name)))

    # -- config ---------------------------------------------------------------------------------
    def _scalar(self, name: str, minimum: int = 1) -> int | None:
        """A count stored as a one-element variable (``num_heads``), checked to be an int >= ``minimum``."""
        if not self.has(name):
            return None
        arr = np.asarray(self.raw(name)).reshape(-1)
        if arr.size != 1:
            raise FormatError(f"{self.path}: {name} should hold one number, it holds {arr.size}")
        return metadata_count(arr[0].item(), name, str(self.path), minimum)

    def _build_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {}
        cfg_path = self.directory / "config.json"
        if cfg_path.is_file():
            try:
                loaded = json.loads(cfg_path.read_text())
            except UnicodeDecodeError:
                raise FormatError(f"{cfg_path}: not a text file") from None
            except json.JSONDecodeError as exc:
                raise FormatError(f"{cfg_path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
            except RecursionError:
                raise FormatError(f"{cfg_path}: invalid JSON (nested deeper than Python reads)") from None
            if not isinstance(loaded, dict):
                raise FormatError(f"{cfg_path}: must hold a JSON object, not a {type(loaded).__name__}")
            cfg.update(loaded)
        cfg["model_type"] = f"ct2:{self.spec_name}"
        cfg["ct2_spec"] = self.spec_name
        cfg["ct2_binary_version"] = self.version
        layer_re = re.compile(r"^(encoder|decoder)/layer_(\d+)/")
        n_layers: dict[str, int] = {}
        for key in self._vars:
            m = layer_re.match(key)
            if m:
                n_layers[m.group(1)] = max(n_layers.get(m.group(1), 0), int(m.group(2)) + 1)
        root_heads = self._scalar("num_heads")
        for stack, n in n_layers.items():
            heads = self._scalar(f"{stack}/num_heads") or root_heads
            if heads is None:
                raise FormatError(f"{self.name}: model.bin does not state {stack}/num_heads")
            cfg[f"{stack}_layers"] = n
            cfg[f"{stack}_attention_heads"] = heads
            kv = self._scalar(f"{stack}/num_heads_kv", minimum=0)  # 0 = as many as query heads
            if kv is not None and kv > 0:
                if heads % kv:
                    raise FormatError(f"{self.path}: {stack} has {heads} query heads but {kv} key/value heads")
                cfg[f"{stack}_kv_heads"] = kv
            w = self._vars.get(f"{stack}/layer_0/self_attention/linear_0/weight")
            if w is not None and len(w.shape) == 2:
                cfg.setdefault("d_model", metadata_count(w.shape[1], f"{w.name} width", str(self.path)))
        if "d_model" in cfg:
            cfg["d_model"] = metadata_count(cfg["d_model"], "d_model", str(cfg_path))
        if not n_layers:
            raise FormatError(f"{self.name}: model.bin has no encoder/decoder layers")
        return cfg
