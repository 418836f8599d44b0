"""Torch device strings a user gives (``--device``): parsed and checked against this machine, in one place.

Used by the trainer, the heads extraction and the CLI, before any work starts, so that ``cuda`` on a
machine without a GPU, ``cuda:7`` on a one-GPU machine, or ``gpu`` is one line, never a traceback
deep inside torch.
"""

from __future__ import annotations

from attnscope.errors import InputError, named


def check_device(device: str, option: str = "device") -> str:
    """``device`` if it parses and names a device this machine has (cpu, cuda[:N], mps); InputError otherwise."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise InputError(f"{named(option, repr(device))} is not a name torch accepts (e.g. cpu, cuda, cuda:1, mps)",
                         params=option) from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise InputError(f"{named(option, repr(device))}: this machine has no CUDA GPU (torch {torch.__version__})",
                             params=option)
        if dev.index is not None and dev.index >= n:
            raise InputError(f"{named(option, repr(device))}: only {n} CUDA GPU(s) here (cuda:0..cuda:{n - 1})",
                             params=option)
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{named(option, repr(device))}: MPS is not available on this machine", params=option)
    elif dev.type not in ("cpu", "cuda", "mps", "meta"):
        raise InputError(f"{named(option, repr(device))}: unsupported type {dev.type!r}; use cpu, cuda or mps",
                         params=option)
    return device
