"""The weight-source interface: tensors by name, read lazily, plus the model's config.

A source knows files, not models: it can list tensor names, read one tensor (memory-mapped where
the format allows), and hand back the model's configuration as a plain dict (Hugging Face
``config.json`` style, with ``model_type``). Which tensors hold W_q and W_k is the business of
:mod:`attnscope.families`.

Adding a source is one small class: subclass :class:`WeightSource`, implement ``detect``,
``open`` (classmethods), ``config``, ``keys`` and ``get``, and append it to
``attnscope.sources.SOURCE_TYPES``.
"""

from __future__ import annotations

import numbers
import re
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any, Iterable

from attnscope.errors import FormatError

if TYPE_CHECKING:  # pragma: no cover
    import torch


def metadata_count(value: Any, what: str, label: str, minimum: int = 1) -> int:
    """A count read from a model file (head count, layers, width) as an int >= ``minimum``, or one FormatError.

    Accepts Python/numpy integers and integral floats; refuses bools, strings, lists, NaN and values
    below ``minimum``, naming the file (``label``) and the field (``what``).
    """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok and isinstance(value, numbers.Real) and not isinstance(value, bool):
        ok = float(value).is_integer()
    if not ok or int(value) < minimum:
        raise FormatError(f"{label}: {what} is {value!r}; expected an integer >= {minimum}")
    return int(value)


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a message quoting what a file claims (names, shapes)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def relative_name(name: Any, where: str, folder: str = "the model's folder") -> str:
    """``name`` if it is a relative path that stays inside the folder it is read from, else one FormatError.

    For every file name that a file names (a shard in a safetensors / torch index, an ONNX external
    data location, a path inside a package in the zoo registry): ``where`` says which file and entry
    named it. Refused: a non-string or empty name, an absolute path (``/x``, ``C:\\x``, ``\\\\server``),
    and any ``..`` component, so a model folder (a downloaded hub snapshot included) can never make
    attnscope read outside it, not even a valid file one folder up. Symlinks are not resolved: the
    hub cache's snapshot files are symlinks into its blobs folder.
    """
    if not isinstance(name, str) or not name.strip() or "\0" in name:
        raise FormatError(f"{where}: {name!r} is not a file name")
    parts = re.split(r"[\\/]+", name)
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).drive or PureWindowsPath(name).root or ".." in parts:
        raise FormatError(
            f"{where}: {name!r} is outside {folder} (only relative paths inside it are followed)"
        )
    return name


def path_inside(root: Path, name: Any, where: str, folder: str = "the model's folder") -> Path:
    """``root / name`` for a file named by a file in ``root`` (see :func:`relative_name`)."""
    return Path(root) / relative_name(name, where, folder)


class WeightSource(ABC):
    """Named tensors of one model, read one at a time."""

    #: human-readable identity (hub id, path), used as the ``model`` column of score records
    name: str

    @classmethod
    @abstractmethod
    def detect(cls, spec: str) -> bool:
        """True when ``spec`` (a path or id given by the user) is of this source's kind."""

    @classmethod
    @abstractmethod
    def open(cls, spec: str, **options: Any) -> "WeightSource":
        """Open ``spec``; raise an :class:`attnscope.errors.AttnscopeError` with one clear line on failure."""

    @property
    @abstractmethod
    def config(self) -> dict[str, Any]:
        """The model configuration (Hugging Face style; must hold ``model_type``)."""

    @abstractmethod
    def keys(self) -> list[str]:
        """All tensor names this source can read."""

    @abstractmethod
    def get(self, name: str) -> "torch.Tensor":
        """One tensor, on CPU, in its stored dtype (callers upcast). KeyError-free: raise FormatError."""

    def has(self, name: str) -> bool:
        return name in set(self.keys())

    def get_many(self, names: Iterable[str]) -> dict[str, "torch.Tensor"]:
        return {n: self.get(n) for n in names}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release file handles (optional)."""

    def __enter__(self) -> "WeightSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class DictSource(WeightSource):
    """An in-memory source: named tensors (or zero-argument getters that produce one on demand, so a
    live model is read one tensor at a time, never copied whole) and a config. Used by tests, live
    models (:mod:`attnscope.sources.memory`) and the trainer."""

    def __init__(self, tensors: dict[str, Any], config: dict[str, Any], name: str = "<memory>") -> None:
        self._tensors = dict(tensors)
        self._config = dict(config)
        self.name = name

    @classmethod
    def detect(cls, spec: str) -> bool:
        return False

    @classmethod
    def open(cls, spec: str, **options: Any) -> "DictSource":
        from attnscope.errors import InputError

        raise InputError(f"{spec}: an in-memory source is built from an object, not opened from a path")

    @classmethod
    def from_module(cls, module: Any, config: dict[str, Any], name: str = "<module>") -> "DictSource":
        """A source over a live torch module's parameters (no copy)."""
        return cls({k: v.detach() for k, v in module.state_dict().items()}, config, name)

    @property
    def config(self) -> dict[str, Any]:
        return self._config

    def keys(self) -> list[str]:
        return list(self._tensors)

    def get(self, name: str) -> "torch.Tensor":
        import torch

        try:
            t = self._tensors[name]
        except KeyError:
            raise FormatError(f"{self.name}: no tensor named {name!r}") from None
        if callable(t):  # a getter
            t = t()
        return t if isinstance(t, torch.Tensor) else torch.as_tensor(t)
