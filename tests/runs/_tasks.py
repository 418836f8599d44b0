"""Top-level task functions for the runs tests (must be importable by worker processes)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def square(payload):
    x = payload["x"]
    if payload.get("fail"):
        raise ValueError(f"bad value {x}")
    return pd.DataFrame({"x": [x], "y": [x * x]})


def nap(payload):
    """Sleep ``payload["s"]`` seconds, then answer like :func:`square` (a task still running when the run stops)."""
    import os
    import time

    if payload.get("started"):  # tell the test this task is running
        Path(payload["started"], f"{payload['x']}-{os.getpid()}").touch()
    time.sleep(payload["s"])
    return pd.DataFrame({"x": [payload["x"]], "y": [0]})
