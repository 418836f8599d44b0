"""Long native calls that a signal must still stop: :func:`native_call`.

Python runs its signal handlers (Ctrl-C's KeyboardInterrupt, the CLI's SIGTERM -> "attnscope: terminated")
only between bytecodes, so a numba kernel that runs for hours (``dynamics lyapunov --steps 10**13``)
never sees SIGTERM or Ctrl-C: ``timeout``, a scheduler or the user could stop it only with SIGKILL.
Around such a call, :func:`native_call` gives SIGTERM and SIGINT their default action (the process ends at
once, as on SIGKILL: results are written atomically after the call, so nothing is half-written) and
restores the handlers afterwards.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["native_call"]


@contextmanager
def native_call() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGINT end the process at once (their default action)."""
    if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in before:
        signal.signal(sig, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
