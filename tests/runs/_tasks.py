"""Top-level task functions for the runs tests (must be importable by worker processes)."""

from __future__ import annotations

import pandas as pd


def square(payload):
    x = payload["x"]
    if payload.get("fail"):
        raise ValueError(f"bad value {x}")
    return pd.DataFrame({"x": [x], "y": [x * x]})


def nap(payload):
    """Sleep ``payload["s"]`` seconds, then answer like :func:`square` (a task still running when the run stops)."""
    import time

    time.sleep(payload["s"])
    return pd.DataFrame({"x": [payload["x"]], "y": [0]})
