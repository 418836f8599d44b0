"""Hostile input to the interventions (issue 39, items 3 and 6): every bad value is one line, in the CLI and
from Python alike, and before the model loads; a worker killed outright is reported as what it is."""

from __future__ import annotations

import importlib.util
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ._helpers import assert_one_line_error, cli

sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
from _tiny_gguf import missing_gguf_runtime, tiny_llama_gguf  # noqa: E402

needs_gguf = pytest.mark.skipif(missing_gguf_runtime(), reason="needs transformers and the gguf extra (accelerate, gguf)")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return tiny_llama_gguf(tmp_path_factory.mktemp("hostile-interventions"))


@pytest.fixture
def no_load(monkeypatch):
    """Loading the model (either way: intervene's and the atlas's) fails the test: checks come first."""
    from attnscope.heads import maps
    from attnscope.interventions import subject as subject_mod

    def refuse(*_a, **_k):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(subject_mod, "_load", refuse)
    monkeypatch.setattr(maps, "open_model", refuse)


@pytest.mark.parametrize("heads, needle", [
    ([(0, 1.7)], "whole numbers"),  # was: silently head 1
    ([(0, "x")], "whole numbers"),  # was: a bare ValueError after the load
    ([(0, math.nan)], "whole numbers"),
    ([(True, 1)], "whole numbers"),  # a bool is no layer
    ([(0, np.True_)], "whole numbers"),
    ([(0, -1)], ">= 0"),
    ([(0, 1, 2)], "(layer, head) pairs"),
    ([], "empty"),
    ("0.²", "LAYER.HEAD"),
    (7, "list of (layer, head) pairs"),
])
def test_bad_heads_from_python_are_refused_before_the_model_loads(tiny_gguf, no_load, heads, needle):
    from attnscope.errors import InputError
    from attnscope.interventions import intervene

    with pytest.raises(InputError, match=r"heads") as info:
        intervene(str(tiny_gguf), heads=heads)
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert info.value.params == ("heads",)


@needs_gguf
def test_a_head_beyond_the_model_is_refused_from_its_config_before_the_load(tiny_gguf, no_load):
    from attnscope.errors import InputError
    from attnscope.interventions import intervene

    with pytest.raises(InputError, match=r"head 2\.0 is not in the model \(layers 0-1, each with head 0-3\)"):
        intervene(str(tiny_gguf), heads=[(2, 0)])
    with pytest.raises(InputError, match=r"head 0\.4 is not in the model"):
        intervene(str(tiny_gguf), heads=[(0, 4)])


def test_the_source_is_named_for_what_it_is(no_load):
    from attnscope.errors import ArgumentTypeError
    from attnscope.interventions import intervene

    with pytest.raises(ArgumentTypeError, match=r"^source must be a GGUF file.*not int 123$"):
        intervene(123)  # was: "a loaded int needs tokenizer=" (the wrong cause)
    with pytest.raises(ArgumentTypeError, match=r"source must be"):
        intervene(None)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_a_device_this_machine_lacks_is_one_line_naming_it(tiny_gguf, no_load):
    import torch

    from attnscope.errors import InputError
    from attnscope.interventions import intervene

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(InputError, match=r"device='cuda'.*no CUDA GPU"):  # was: torch's AssertionError
        intervene(str(tiny_gguf), device="cuda")
    with pytest.raises(InputError, match=r"device='gpu'"):
        intervene(str(tiny_gguf), device="gpu")


def test_top_needs_an_atlas_and_is_checked(tiny_gguf, no_load):
    from attnscope.errors import InputError
    from attnscope.interventions import intervene

    with pytest.raises(InputError, match=r"give atlas= too"):
        intervene(str(tiny_gguf), top="3:-directionality")
    with pytest.raises(InputError, match=r"not both"):
        intervene(str(tiny_gguf), top="3:sink_random", heads=[(0, 1)])


@pytest.mark.parametrize("heads", ["'²'.1", "².1", "0.١", "1-2", "0.1,", " "])
def test_cli_heads_that_are_no_numbers_are_one_line(tiny_gguf, tmp_path, heads):
    res = cli("atlas", tiny_gguf, "--out", tmp_path / "o", "--interventions", "sym", "--heads", heads, timeout=120)
    assert_one_line_error(res, "--heads")  # '²'.1 was an internal error (a ValueError from int('²'))
    assert not (tmp_path / "o").exists()


@needs_gguf
@pytest.mark.parametrize("argv, needle", [
    (["--heads", "2.0"], "head 2.0 is not in the model"),
    (["--heads", "0.4"], "head 0.4 is not in the model"),
    (["--top", "3:nosuch"], "no column 'nosuch'"),
    (["--top", "3:-nosuch"], "no column 'nosuch'"),
    (["--top", "3:induction_text", "--probe", "random"], "no column 'induction_text'"),
])
def test_cli_heads_and_top_are_checked_before_the_atlas_runs(tiny_gguf, tmp_path, argv, needle, monkeypatch,
                                                             cli_inproc):
    from attnscope.atlas import build

    monkeypatch.setattr(build, "atlas", lambda *a, **k: (_ for _ in ()).throw(AssertionError("the atlas ran")))
    code, _, err = cli_inproc("atlas", str(tiny_gguf), "--out", str(tmp_path / "o"), "--interventions", "sym", *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.skipif(not (sys.platform.startswith("linux") and hasattr(os, "fork")), reason="forked workers: Linux")
def test_a_worker_killed_outright_is_named_with_how_to_go_on():
    from attnscope.cli._common import describe_error
    from attnscope.interventions.workers import WorkerLost, run_layers

    def work(task: int) -> None:
        if task == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does
        time.sleep(0.01)

    with pytest.raises(WorkerLost) as info:
        run_layers(range(6), work, 2)
    code, line = describe_error(info.value)
    assert "internal error" not in line and "a bug" not in line  # was: "internal error ... (a bug)"
    assert line.startswith("attnscope: error: an interventions worker was killed by SIGKILL (the out-of-memory")
    assert "layers 3, 5" in line and "run the same command again to go on" in line and code == 2
    assert "\n" not in line


# --------------------------------------------------------------------------- stopping: SIGTERM and Ctrl-C


def _stop_after(args: list[str], marker: str | tuple[str, ...], sig: int, tmp_path: Path,
                timeout: float = 240) -> tuple[float, int, str]:
    """Start ``attnscope ARGS`` (progress lines on), send ``sig`` once a stderr line holds ``marker`` (or one of them):
    (seconds from the signal to the process's end, exit code, stderr)."""
    import subprocess
    import threading

    env = {k: v for k, v in os.environ.items() if k not in ("ATTNSCOPE_QUIET", "ATTNSCOPE_DEBUG")}
    proc = subprocess.Popen([sys.executable, "-m", "attnscope", *args], stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path)
    seen, lines = threading.Event(), []

    def read() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            lines.append(line)
            if any(m in line for m in ((marker,) if isinstance(marker, str) else marker)):
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(timeout), "".join(lines)[-2000:]
        t0 = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    return took, code, "".join(lines)


@needs_gguf
def test_sigterm_once_the_model_is_loaded_ends_the_process_within_2_s(tiny_gguf, tmp_path):
    """Was: "attnscope: terminated", then seconds more (10-50 s for SmolLM2) of the interpreter's teardown."""
    took, code, err = _stop_after(["atlas", str(tiny_gguf), "--out", str(tmp_path / "o"), "--interventions", "sym",
                                   "--random-windows", "50"],
                                  # any phase after the load: a fast machine may finish the probes within the
                                  # 1 s before a phase prints its line
                                  ("probe:", "clusters and statistics", "figures and atlas.html"),
                                  signal.SIGTERM, tmp_path)
    assert code == 143 and err.rstrip().endswith("attnscope: terminated"), err[-2000:]
    assert took < 2.0, f"{took:.1f} s from SIGTERM to the end"
    assert not (tmp_path / "o" / "atlas.parquet").exists()


@pytest.mark.slow
@needs_gguf
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers: Linux")
@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_a_stop_during_the_layer_passes_with_workers_ends_everything_within_2_s(tiny_gguf, tmp_path, sig, code, word):
    args = ["atlas", str(tiny_gguf), "--out", str(tmp_path / "o"), "--windows", "2", "--length", "40",
            "--random-windows", "2", "--random-length", "10", "--n-boot", "50", "--interventions", "sym,anti,ablate",
            "--intervention-windows", "40", "--threads", "2"]
    took, got, err = _stop_after(args, "clean pass", sig, tmp_path)
    assert got == code and err.rstrip().endswith(f"attnscope: {word}"), err[-2000:]
    assert took < 2.0, f"{took:.1f} s from the signal to the end"
    time.sleep(0.5)
    import subprocess

    left = subprocess.run(["pgrep", "-f", str(tmp_path / "o")], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left running: {left}"  # the workers ended with their parent
