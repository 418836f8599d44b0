"""CPU threads: one rule (attnscope.threads), one call (set_threads), --threads on every computing command."""

from __future__ import annotations

import os

import pytest
import torch

from attnscope import threads as th
from attnscope.errors import InputError


@pytest.fixture
def clean(monkeypatch):
    """No thread setting from the environment or an earlier call; torch's and the env's numbers restored after."""
    monkeypatch.delenv(th.ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))  # restored after the test
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(th, "_chosen", [])
    before = torch.get_num_threads()
    yield monkeypatch
    torch.set_num_threads(before)
    while th._blas_limit:
        th._blas_limit.pop().restore_original_limits()


@pytest.mark.parametrize("cpus, load, expected", [(16, 0.3, 16), (16, 12.4, 4), (16, 40.0, 1), (2, 1.4, 1),
                                                  (2, 0.0, 2), (8, 2.5, 6)])
def test_the_default_is_the_free_cpus_at_least_one(clean, cpus, load, expected):
    clean.setattr(th.os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    clean.setattr(th.os, "getloadavg", lambda: (load, load, load))
    assert th.default_threads() == expected
    assert th.resolve_threads() == expected


def test_the_order_is_argument_then_earlier_call_then_env_then_omp_then_rule(clean):
    clean.setattr(th, "default_threads", lambda: 7)
    assert th.resolve_threads() == 7
    clean.setenv("OMP_NUM_THREADS", "3")
    assert th.resolve_threads() == 3
    clean.setenv(th.ENV, "5")
    assert th.resolve_threads() == 5 and th.resolve_threads(2) == 2
    th.set_threads(2)
    assert th.resolve_threads() == 2 and th.set_threads() == 2  # a later default call keeps the user's choice
    clean.setattr(th, "_chosen", [])
    clean.setenv(th.ENV, "auto")
    assert th.resolve_threads() == int(os.environ["OMP_NUM_THREADS"])


@pytest.mark.parametrize("value, needle", [(0, "threads must be at least 1, not 0"), (-2, "at least 1"),
                                           (2.5, "whole number"), (True, "whole number"), ("2", "whole number")])
def test_bad_numbers_are_one_line(clean, value, needle):
    with pytest.raises(InputError, match=needle):
        th.set_threads(value)


def test_a_bad_environment_value_is_one_line(clean):
    clean.setenv(th.ENV, "many")
    with pytest.raises(InputError, match="ATTNSCOPE_THREADS='many' is not a whole number"):
        th.resolve_threads()
    clean.setenv(th.ENV, "0")
    with pytest.raises(InputError, match="ATTNSCOPE_THREADS must be at least 1"):
        th.resolve_threads()


def test_set_threads_sets_torch_blas_and_the_environment(clean):
    from threadpoolctl import threadpool_info

    assert th.set_threads(1) == 1
    assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    assert blas and all(p["num_threads"] == 1 for p in blas)
    with th.threads(2) as n:
        assert n == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1


def test_every_computing_command_takes_threads(clean, cli_inproc):
    from typer.main import get_command

    from attnscope.cli import app

    root = get_command(app)
    for path in (["geometry", "score"], ["heads", "measure"], ["atlas"], ["report"], ["train"], ["emergence"],
                 ["dynamics", "trajectory"], ["dynamics", "lyapunov"], ["dynamics", "bifurcation"],
                 ["dynamics", "phase"], ["dynamics", "finite"]):
        cmd = root
        for name in path:
            cmd = cmd.commands[name]
        assert any("--threads" in p.opts for p in cmd.params), path
    code, _, err = cli_inproc("geometry", "--demo", "--threads", "0")
    assert code == 2 and err.strip() == "attnscope: error: --threads must be at least 1, not 0"


def test_geometry_runs_with_the_threads_asked_for(clean, cli_inproc, minilm_dir):
    code, _, err = cli_inproc("geometry", str(minilm_dir), "--level", "layer", "--threads", "1", "--json")
    assert code == 0, err
    assert torch.get_num_threads() == 1


def test_numba_imported_later_starts_with_the_number_set():
    import subprocess
    import sys

    code = ("import attnscope; attnscope.set_threads(1); import numba; print(numba.get_num_threads()); "
            "attnscope.set_threads(2); print(numba.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_NUM_THREADS", th.ENV)}
    env["PYTHONPATH"] = str(__import__("pathlib").Path(th.__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1"]  # numba's pool was started with 1 thread: a later 2 is capped there
