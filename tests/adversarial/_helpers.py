"""Shared helpers for the adversarial tests: run the CLI, check the one-line contract, tiny full disks.

Task functions here are top level so that spawned pool workers can import them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
FAKES = Path(__file__).resolve().parents[1] / "zoo"  # tests/zoo/_fakes.py: tiny GGUF / CT2 writers


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m attnscope ARGS`` in a subprocess (inherits PYTHONPATH), bounded in time."""
    full_env = {k: v for k, v in os.environ.items() if k != "ATTNSCOPE_DEBUG"}
    full_env.update({"ATTNSCOPE_QUIET": "1", **(env or {})})
    return subprocess.run([sys.executable, "-m", "attnscope", *map(str, args)], check=False, capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


def assert_one_line_error(res: subprocess.CompletedProcess, *needles: str, code: int = 2) -> str:
    """Exit ``code``, exactly one stderr line ``attnscope: error: ...`` holding every needle, no traceback."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == code, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    errors = [ln for ln in lines if ln.startswith("attnscope: error:") or ln.startswith("attnscope: internal error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    for n in needles:
        assert n.lower() in errors[0].lower(), (n, errors[0])
    return errors[0]


def files_under(path: Path) -> list[Path]:
    """Every file below ``path`` (hidden temporaries included)."""
    return sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).exists() else []


def no_temporaries(path: Path) -> bool:
    return not [p for p in files_under(path) if p.name.endswith(".tmp") or ".attnscope-probe-" in p.name]


@contextlib.contextmanager
def tiny_filesystem(path: Path, size_kb: int = 64, readonly: bool = False) -> Iterator[Path]:
    """Mount a tmpfs of ``size_kb`` at ``path`` (optionally read-only); unmounted afterwards.

    Skips the calling test (with the reason) where the machine does not allow mounting.
    """
    import pytest

    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size_kb}k" + (",ro" if readonly else "")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs here ({(res.stderr or 'mount failed').strip().splitlines()[0]})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_up(path: Path) -> None:
    """Write ``path/filler`` until the filesystem is full (ENOSPC)."""
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:  # ENOSPC: full
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------ hostile files


def write_gguf(path: Path, head_count, kind: str = "uint32", block_count=1) -> Path:
    """A minimal llama GGUF whose attention.head_count is ``head_count`` stored as ``kind``."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", block_count) if isinstance(block_count, int) else w.add_string(
        "llama.block_count", str(block_count))
    w.add_uint32("llama.embedding_length", 8)
    getattr(w, f"add_{kind}")("llama.attention.head_count", head_count)
    w.add_tensor("blk.0.attn_q.weight", np.ones((8, 8), dtype=np.float32))
    w.add_tensor("blk.0.attn_k.weight", np.ones((8, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_ct2_dir(path: Path, config=None, num_heads: int = 2) -> Path:
    """A minimal one-layer CTranslate2 encoder dir; ``config`` is written as config.json verbatim (JSON)."""
    import json

    if str(FAKES) not in sys.path:
        sys.path.insert(0, str(FAKES))
    from _fakes import write_ct2

    variables = {
        "encoder/num_heads": np.array(num_heads, dtype=np.int16),
        "encoder/layer_0/self_attention/linear_0/weight": np.ones((24, 8), dtype=np.float32),
    }
    write_ct2(path, "TransformerEncoderSpec", variables)
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    return path


# ------------------------------------------------------------------------------------ task functions


def square(payload: dict) -> pd.DataFrame:
    return pd.DataFrame({"x": [payload["x"]], "y": [payload["x"] ** 2], "k": [payload.get("k", 1)]})


def big(payload: dict) -> pd.DataFrame:
    """A table too large for a tiny full filesystem."""
    import numpy as np

    return pd.DataFrame({"x": np.random.default_rng(0).normal(size=50_000)})


def warns(payload: dict) -> pd.DataFrame:
    """A task that warns with a two-line message."""
    import warnings

    warnings.warn(f"task {payload['x']} is odd\nsecond line", UserWarning)
    return pd.DataFrame({"x": [payload["x"]]})


def sleepy(payload: dict) -> pd.DataFrame:
    """Record this worker's pid, then work for a long time (the kill test kills the parent meanwhile)."""
    Path(payload["pids"], f"{os.getpid()}").write_text("")
    time.sleep(payload.get("seconds", 60))
    return pd.DataFrame({"x": [payload["x"]]})


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state
