"""Every command runs for a user who may not use HOME, XDG or the cache folders (a service account, ``sudo -u``).

Once every command, even ``zoo list``, died with a 23-line PermissionError traceback from matplotlib's
config-folder check before its options were parsed. Here each command group runs in a process that may
not search its HOME (a folder of mode 000; as root the process first drops the capabilities that let root
read anything), and once more with every cache variable (MPLCONFIGDIR, NUMBA_CACHE_DIR, XDG_CACHE_HOME,
HF_HOME, TORCH_HOME, ATTNSCOPE_CACHE) pointing into such a folder: it works, with at most one warning and
never a traceback.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._helpers import cli

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux permissions and prctl")

CACHE_VARS = ("MPLCONFIGDIR", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HF_HOME", "TORCH_HOME",
              "ATTNSCOPE_CACHE")


def _drop_root_powers() -> None:
    """In the child before exec: as root, drop every capability from the bounding set, so that after exec
    root has none and a mode-000 folder is as closed to it as to any user (PR_CAPBSET_DROP = 24)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # fails past the last capability: ignored


@pytest.fixture(params=["home", "caches"])
def locked_out(request, tmp_path):
    """(environment, folder) of a process that cannot use its HOME ("home") or any cache folder ("caches")."""
    closed = tmp_path / "closed"
    closed.mkdir()
    env = {v: "" for v in CACHE_VARS}
    if request.param == "home":
        env["HOME"] = str(closed)
    else:
        env.update({v: str(closed / v.lower()) for v in CACHE_VARS})
    closed.chmod(0)
    probe = subprocess.run([sys.executable, "-c", f"import os; os.listdir({str(closed)!r})"], capture_output=True,
                           preexec_fn=_drop_root_powers)
    if probe.returncode == 0:
        closed.chmod(0o700)
        pytest.skip("this process can read a folder of mode 000 even without capabilities")
    yield {k: v for k, v in env.items() if v}, [v for v in CACHE_VARS if not env[v]], tmp_path
    closed.chmod(0o700)


def _run(locked_out, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    env, unset, _ = locked_out
    full = {k: v for k, v in os.environ.items() if k not in unset and k != "ATTNSCOPE_DEBUG"}
    full.update({"ATTNSCOPE_QUIET": "1", "OMP_NUM_THREADS": "1", **env})
    return subprocess.run([sys.executable, "-m", "attnscope", *map(str, args)], capture_output=True, text=True,
                          env=full, timeout=timeout, preexec_fn=_drop_root_powers)


def _ran(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "PermissionError" not in res.stderr, res.stderr[-3000:]
    warnings = [ln for ln in res.stderr.splitlines() if "warning" in ln.lower()]
    assert len(warnings) <= 1, warnings


GROUPS = ("geometry", "zoo", "heads", "atlas", "train", "compare", "dynamics", "emergence", "report")


def test_the_cheapest_command_runs_without_home_or_caches(locked_out):
    res = _run(locked_out, "zoo", "list")
    _ran(res)
    assert res.stdout.strip()  # the table, not an error


@pytest.mark.slow
@pytest.mark.parametrize("group", GROUPS)
def test_every_command_group_runs_without_home_or_caches(locked_out, group, tiny_gguf_model):
    tmp = locked_out[2]
    out = tmp / "out"
    _ran(_run(locked_out, group, "--help"))
    run = tmp / "run"
    real = {
        "geometry": ("geometry", "--demo"),
        "zoo": ("zoo", "list"),
        "heads": ("heads", tiny_gguf_model, "--windows", "1", "--length", "16", "--out", out / "h.csv"),
        "atlas": ("atlas", tiny_gguf_model, "--out", out, "--windows", "2", "--length", "48", "--random-windows", "2",
                  "--random-length", "12", "--n-boot", "20"),
        "train": ("train", "--steps", "2", "--out", run),
        "compare": ("compare", run, "--out", out),
        "dynamics": ("dynamics", "lyapunov", "--steps", "50", "--transient", "1", "--out", out / "l.csv"),
        "emergence": ("emergence", run, "--out", out),
        "report": ("report", tiny_gguf_model, "--out", out),
    }[group]
    if group in ("compare", "emergence"):
        _ran(cli("train", "--steps", "2", "--checkpoint-every", "1", "--out", run))
    _ran(_run(locked_out, *real))
    assert out.exists() or run.exists() or group in ("geometry", "zoo")


@pytest.fixture(scope="module")
def tiny_gguf_model(tmp_path_factory):
    """A tiny llama written as GGUF (with its tokenizer)."""
    import importlib.util

    if importlib.util.find_spec("accelerate") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("running a GGUF file needs the gguf extra (accelerate, gguf)")
    sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
    from _tiny_gguf import tiny_llama_model, write_llama_gguf_model

    root = tmp_path_factory.mktemp("gguf")
    return write_llama_gguf_model(root / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))
