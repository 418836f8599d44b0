"""User-facing errors.

Every error a user can cause (a bad path, a corrupt file, a config that makes no sense) is raised
as an :class:`AttnscopeError`. The CLI prints its message on one line and exits with code 2; the
Python API lets it propagate. Messages are single sentences that say what was wrong and, where
possible, what to do.

Messages speak Python: they name the parameter (``windows must be at least 1, not 0``, ``add
resume=True``), and list those names in ``params``; the CLI prints the same message with each named
parameter replaced by its flag (``--windows``, ``--resume``), so one message serves both. A wrong type
is an :class:`ArgumentTypeError` (also a ``TypeError``) that says what the parameter accepts. Warnings the user sees are one line each too
(:func:`install_one_line_warnings`, used by the CLI and by pool workers).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Callable

#: set (to anything but 0/false/no) to see tracebacks and raw Python warnings
DEBUG_ENV = "ATTNSCOPE_DEBUG"


class AttnscopeError(Exception):
    """Base class: a problem with the user's input, shown as one line (exit code 2)."""

    exit_code = 2

    def __init__(self, message: str = "", *, params: str | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        #: the parameters (Python names) the message names; the CLI shows them as flags
        self.params: tuple[str, ...] = (params,) if isinstance(params, str) else tuple(params)


class InputError(AttnscopeError):
    """A path, argument or option that cannot be used (missing file, bad value)."""


class ArgumentTypeError(InputError, TypeError):
    """An argument of the wrong type (``k="two"``, a dict where a config goes); also a ``TypeError``."""


class ConfigError(AttnscopeError):
    """A configuration that makes no sense (e.g. d_model not divisible by n_heads)."""


class FormatError(AttnscopeError):
    """A file that exists but cannot be read: truncated, corrupt, wrong version or shape."""


class UnsupportedError(AttnscopeError):
    """Something valid but not supported (an unknown model family, a model without attention maps)."""


class OfflineError(AttnscopeError):
    """A resource that needs the network (a hub id) while offline or unreachable."""


class StorageError(AttnscopeError, OSError):
    """An output that cannot be written: a full disk, a read-only or missing directory, a file in the way.

    Also an :class:`OSError`, so code that caught the operating system's error keeps working.
    """


def check_type(value: Any, types: type | tuple[type, ...], param: str, accepts: str) -> Any:
    """``value`` if it is an instance of ``types`` (bools never count as numbers); otherwise an
    :class:`ArgumentTypeError` naming ``param`` and what it ``accepts`` (e.g. ``"an integer"``)."""
    wanted = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) and bool not in wanted or not isinstance(value, wanted):
        raise ArgumentTypeError(f"{param} must be {accepts}, not {type(value).__name__} {_short(value)}", params=param)
    return value


def excerpt(value: Any, limit: int = 80) -> str:
    """A short ``repr`` of ``value`` for an error line: at most ``limit`` characters, built without ever forming the
    whole repr (a value of nested shared lists, as YAML aliases make, would be gigabytes)."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 6, 6, 4, 6
    r.maxstring, r.maxother, r.maxlong = limit, limit, 40
    try:
        text = r.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named by its type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any) -> str:
    return excerpt(value, 40)


class AttnscopeWarning(UserWarning):
    """A warning whose message names Python parameters (``params``), shown as flags by the CLI."""

    def __init__(self, message: str = "", *, params: str | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.params: tuple[str, ...] = (params,) if isinstance(params, str) else tuple(params)


def warn(message: str, *, params: str | tuple[str, ...] = ()) -> None:
    """Warn as an :class:`AttnscopeWarning` pointing at the user's code: the first caller outside attnscope
    (a notebook cell, a script line), never a line inside the library."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(AttnscopeWarning(message, params=params), stacklevel=level + 1)


def named(param: str, value: Any) -> str:
    """``param=value`` for a Python parameter name, ``--flag value`` when ``param`` is already a flag."""
    return f"{param} {value}" if param.startswith("-") else f"{param}={value}"


def debug_enabled() -> bool:
    """``ATTNSCOPE_DEBUG=1`` (the CLI's ``--debug`` sets it): show tracebacks and raw warnings."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def install_one_line_warnings(wording: Callable[[str, tuple[str, ...]], str] | None = None) -> None:
    """Print every warning of this process as one readable line on stderr (unless debugging):
    ``attnscope: warning: <first line of the message>``, no file name, no source line. ``wording(text,
    params)`` rewords an :class:`AttnscopeWarning` (the CLI shows its parameters as flags)."""
    if debug_enabled():
        return

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        text = (str(message).strip().splitlines() or [category.__name__])[0]
        if wording is not None and isinstance(message, AttnscopeWarning):
            text = wording(text, message.params)
        stream = sys.stderr if file is None else file
        stream.write(f"attnscope: warning: {text}\n")  # one write: pool workers sharing stderr never splice lines
        stream.flush()

    warnings.showwarning = show
