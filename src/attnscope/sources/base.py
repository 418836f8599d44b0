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
from abc import ABC, abstractmethod
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
