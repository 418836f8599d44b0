"""User-facing errors.

Every error a user can cause (a bad path, a corrupt file, a config that makes no sense) is raised
as an :class:`AttnscopeError`. The CLI prints its message on one line and exits with code 2; the
Python API lets it propagate. Messages are single sentences that say what was wrong and, where
possible, what to do. Warnings the user sees are one line each too
(:func:`install_one_line_warnings`, used by the CLI and by pool workers).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

#: set (to anything but 0/false/no) to see tracebacks and raw Python warnings
DEBUG_ENV = "ATTNSCOPE_DEBUG"


class AttnscopeError(Exception):
    """Base class: a problem with the user's input, shown as one line (exit code 2)."""

    exit_code = 2


class InputError(AttnscopeError):
    """A path, argument or option that cannot be used (missing file, bad value)."""


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


def debug_enabled() -> bool:
    """``ATTNSCOPE_DEBUG=1`` (the CLI's ``--debug`` sets it): show tracebacks and raw warnings."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _show_warning_line(message: Any, category: type, filename: str, lineno: int, file: Any = None,
                       line: Any = None) -> None:
    """``attnscope: warning: <first line of the message>``: no file name, no source line."""
    text = (str(message).strip().splitlines() or [category.__name__])[0]
    print(f"attnscope: warning: {text}", file=sys.stderr if file is None else file)


def install_one_line_warnings() -> None:
    """Print every warning of this process as one readable line on stderr (unless debugging)."""
    if not debug_enabled():
        warnings.showwarning = _show_warning_line
