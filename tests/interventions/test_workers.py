"""Layer passes in forked workers (:mod:`attnscope.interventions.workers`): every task done once, progress in
the parent, a child's error raised as it was, a dead child named; intervene() with workers = without."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from attnscope.errors import InputError
from attnscope.interventions.workers import MAX_WORKERS, balance, run_layers, worker_count

linux_fork = pytest.mark.skipif(not (sys.platform.startswith("linux") and hasattr(os, "fork")),
                                reason="needs fork (Linux)")


def test_worker_count_forks_only_on_a_linux_cpu_with_a_few_threads(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    assert worker_count(2, 30) == 2 and worker_count(MAX_WORKERS, 30) == MAX_WORKERS
    assert worker_count(3, 2) == 2  # no more workers than layers
    assert worker_count(1, 30) == worker_count(MAX_WORKERS + 1, 30) == worker_count(2, 1) == 1
    assert worker_count(2, 30, "cuda") == 1
    monkeypatch.setattr(sys, "platform", "darwin")
    assert worker_count(2, 30) == 1


def test_balance_splits_every_task_once_into_near_equal_loads():
    cost = lambda layer: 30 - layer + 6  # noqa: E731 - a layer pass: its suffix and the loss
    groups = balance(range(30), 2, cost)
    assert sorted(t for g in groups for t in g) == list(range(30))
    loads = [sum(cost(t) for t in g) for g in groups]
    assert max(loads) - min(loads) <= max(cost(t) for t in range(30))
    assert balance([5], 3, cost) == [[5]]  # no empty groups


@linux_fork
def test_every_task_runs_once_in_a_child_and_the_parent_sees_each(tmp_path):
    done = []

    def work(task: int) -> None:  # in a child: what it leaves is a file
        (tmp_path / f"{task}.{os.getpid()}").write_text(str(task * task))

    run_layers(range(7), work, 2, on_done=done.append)
    files = sorted(tmp_path.iterdir())
    assert sorted(done) == list(range(7)) and len(files) == 7
    pids = {f.suffix for f in files}
    assert len(pids) == 2 and f".{os.getpid()}" not in pids  # two children, not this process
    assert sorted(int(f.read_text()) for f in files) == [t * t for t in range(7)]


@linux_fork
def test_a_childs_error_is_raised_in_the_parent_as_it_was(tmp_path):
    def work(task: int) -> None:
        if task == 4:
            raise InputError("layer 4 is not for you", params="heads")

    with pytest.raises(InputError, match="layer 4 is not for you") as info:
        run_layers(range(6), work, 3)
    assert info.value.params == ("heads",)  # its details too, not only its text


@linux_fork
def test_a_child_that_dies_is_named_with_the_layers_it_left(tmp_path):
    def work(task: int) -> None:
        if task == 3:
            os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(RuntimeError, match=r"SIGKILL.*before layers .*3"):
        run_layers(range(6), work, 2)


@linux_fork
@pytest.mark.parametrize("workers", [1, 2])
def test_a_tasks_progress_reaches_the_parent_from_a_worker_and_from_here(workers, monkeypatch):
    from attnscope.interventions import workers as w

    monkeypatch.setattr(w, "REPORT_EVERY_S", 0.0)  # every report sent (a worker's are throttled)
    seen: list[tuple[int, float]] = []

    def work(task: int) -> None:
        for k in range(1, 4):
            w.report(k / 3)

    run_layers(range(4), work, workers, on_report=lambda t, f: seen.append((t, f)))
    for task in range(4):
        mine = [f for t, f in seen if t == task]
        assert mine == [1 / 3, 2 / 3, 1.0]  # in order, each task's own
    w.report(0.5)  # outside run_layers: nothing, no error


def test_one_worker_runs_here_in_order():
    seen = []
    run_layers([3, 1, 2], lambda t: seen.append(("work", t)), 1, on_done=lambda t: seen.append(("done", t)))
    assert seen == [("work", 3), ("done", 3), ("work", 1), ("done", 1), ("work", 2), ("done", 2)]


needs_gguf = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)",
)


@linux_fork
@needs_gguf
@pytest.mark.parametrize("precision", ["full", "bf16-delta"])
def test_intervene_with_workers_is_intervene_without(tmp_path, precision):
    sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
    from _tiny_gguf import tiny_llama_model, write_llama_gguf_model

    from attnscope.interventions import intervene

    path = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=3, d=32, n_heads=4, n_kv=2))
    opts = dict(interventions="sym,anti,ablate", windows=3, length=40, random_windows=2, random_length=10,
                precision=precision, exact="all")
    runs = [intervene(str(path), workers=1, **opts),
            intervene(str(path), workers=2, **opts),  # no store: the workers' own, temporary
            intervene(str(path), workers=3, store=tmp_path / "store", **opts)]
    one = runs[0].table
    key = ["layer", "head", "intervention", "measure"]
    tkey = ["layer", "head", "intervention", "window", "position", "token"]
    for res in runs[1:]:
        assert res.table[key].equals(one[key])
        np.testing.assert_allclose(res.table["delta"], one["delta"], rtol=1e-5, atol=1e-7)
        assert res.token_effects[tkey].equals(runs[0].token_effects[tkey])  # the per-token changes come back too
        np.testing.assert_allclose(res.token_effects["delta_loss"], runs[0].token_effects["delta_loss"], rtol=1e-5, atol=1e-7)
    tasks = sorted(p.name for p in (tmp_path / "store").rglob("*.parquet"))
    assert len(tasks) == 7 and sum(n.startswith("tokens") for n in tasks) == 3  # each layer and its per-token table
    assert "screen.parquet" in tasks  # and the screen, kept for a resumed run
    with pytest.raises(InputError, match="workers must be at least 1"):
        intervene(str(path), workers=0, **opts)
    with pytest.raises(InputError, match="needs Linux and the model on the CPU"):
        intervene(str(path), workers=2, device="meta", **opts)


@linux_fork
def test_workers_end_when_their_parent_is_killed(tmp_path):
    """A kill -9 of the parent runs no ``finally``: the children must still end (nothing left running)."""
    import subprocess
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import os, time\n"
        "from attnscope.interventions.workers import run_layers\n"
        f"def work(t):\n    open(r'{tmp_path}' + f'/pid.{{os.getpid()}}', 'w').close(); time.sleep(60)\n"
        "run_layers(range(4), work, 2)\n")
    proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
    deadline = time.time() + 60
    while len(list(tmp_path.glob("pid.*"))) < 2 and time.time() < deadline:
        time.sleep(0.1)
    pids = [int(p.suffix[1:]) for p in tmp_path.glob("pid.*")]
    assert len(pids) == 2
    proc.kill()
    proc.wait()
    deadline = time.time() + 20
    alive = pids
    while alive and time.time() < deadline:
        time.sleep(0.1)
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]]
    assert not alive
