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
import os
import re
import stat
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any, Iterable

from attnscope.errors import FormatError, InputError

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


#: suffixes of single-file models: a missing path ending in one is "no such file", never a hub id or a directory
MODEL_FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".onnx")
_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
_DENIED = "permission denied (the user running attnscope cannot read it)"


def readable_file(path: str | os.PathLike, label: str, missing: str = "no such file") -> Path:
    """``path`` if it is a regular file this process may read (symlinks followed), else one line naming ``label``:
    InputError "no such file" (or ``missing``), "permission denied"; FormatError "not a regular file (a FIFO)"
    for a FIFO, a device, a socket. Never opens anything but a regular file, so a FIFO cannot block."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{label}: {missing}") from None
    except PermissionError:
        raise InputError(f"{label}: {_DENIED}") from None
    except OSError as exc:  # a symlink loop, a name too long
        raise InputError(f"{label}: {exc.strerror or type(exc).__name__}") from None
    for test, kind in _NOT_REGULAR:
        if test(mode):
            raise FormatError(f"{label}: not a regular file ({kind})")
    try:
        with open(path, "rb"):
            pass
    except PermissionError:
        raise InputError(f"{label}: {_DENIED}") from None
    except OSError as exc:
        raise FormatError(f"{label}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    return Path(path)


def check_local_path(spec: str) -> None:
    """Refuse, in one line, a local model path that cannot be read, before any source guesses what it is: a
    missing file named like a model file (``x.gguf``: "no such file"), a path or folder the user may not read
    ("permission denied"), a FIFO or device ("not a regular file"). Hub ids and missing folders pass (their
    source says what is wrong)."""
    path = Path(spec).expanduser()
    hub_like = spec.count("/") == 1 and not spec.startswith(("/", ".", "~"))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if path.suffix.lower() in MODEL_FILE_SUFFIXES and not hub_like:
            raise InputError(f"{spec}: no such file") from None
        return
    except PermissionError:
        raise InputError(f"{spec}: {_DENIED}") from None
    except OSError:
        return
    if stat.S_ISDIR(mode):
        try:
            with os.scandir(path):
                pass
        except PermissionError:
            raise InputError(f"{spec}: {_DENIED}") from None
        return
    readable_file(path, spec)


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
    models (:mod:`attnscope.sources.loaded`) and the trainer."""

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
