"""Every long Python call shows its progress through attnscope.progress: in a (fake) notebook and in a log.

The notebook is faked here (the display is recorded); tests/examples/test_notebook.py runs a real kernel.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnscope import progress as prog


@pytest.fixture
def notebook(monkeypatch):
    """A fake Jupyter kernel: every display and in-place update, as the text the cell would show."""
    shown: list[str] = []

    class Handle:
        def update(self, obj, raw=False):
            shown.append(obj["text/plain"])

    def display(obj, raw=False, display_id=False):
        shown.append(obj["text/plain"])
        return Handle()

    IPython = pytest.importorskip("IPython", reason="IPython (the test extra's ipykernel brings it) holds the notebook display")
    import IPython.display

    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(prog, "in_jupyter", lambda: True)
    return shown


@pytest.fixture
def slow_clock(monkeypatch):
    """Each look at the progress clock is one second later (every job looks long enough to log)."""
    ticks = itertools.count(0.0, 1.0)
    monkeypatch.setattr(prog, "_clock", lambda: next(ticks))
    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)


def _tiny_checkpoint(tmp_path):
    from attnscope.training.model import ModelConfig, Transformer, save_model

    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2, n_heads=2, d_model=16, d_ff=32, vocab_size=256, max_seq_len=32, causal=True,
                      norm="pre", dropout=0.0)
    return save_model(Transformer(cfg), tmp_path / "ckpt", extra_config={"tokenizer": "bytes", "run": "tiny"})


def _tiny_train_config(tmp_path, **kw):
    from attnscope.training.trainer import TrainConfig

    return TrainConfig.from_sources(None, n_layers=1, n_heads=2, d_model=16, d_ff=32, batch_size=2, seq_len=16,
                                    eval_windows=2, steps=4, warmup=1, threads=1, out=str(tmp_path / "run"), **kw)


def test_train_shows_progress_in_a_notebook_by_default(tmp_path, notebook):
    from attnscope.training.trainer import train

    train(_tiny_train_config(tmp_path))
    assert notebook and notebook[-1].startswith(f"{tmp_path / 'run'}: 4/4 (100%)")
    assert "loss " in notebook[-1]
    assert not any(line.endswith("loss -") for line in notebook[-1:])  # the logged loss, not the placeholder


def test_train_writes_plain_lines_off_a_terminal(tmp_path, slow_clock, capsys):
    from attnscope.training.trainer import train

    train(_tiny_train_config(tmp_path, log_every=1))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(str(tmp_path / "run"))]
    assert lines and lines[-1].startswith(f"{tmp_path / 'run'}: 4/4 (100%)")
    assert "\r" not in err and "\x1b" not in err


def test_no_progress_means_none(tmp_path, notebook, capsys):
    from attnscope.training.trainer import train

    train(_tiny_train_config(tmp_path, progress=False))
    assert notebook == [] and capsys.readouterr().err == ""


def test_geometry_score_and_heads_extract_show_progress_in_a_notebook(tmp_path, notebook):
    from attnscope.geometry import score
    from attnscope.heads import extract

    ckpt = str(_tiny_checkpoint(tmp_path))
    score(ckpt, progress=True)
    assert notebook and "2/2 layers (100%)" in notebook[-1]
    notebook.clear()
    score(ckpt)  # progress is off by default for a quick score
    assert notebook == []
    extract(ckpt, windows=3, length=16, progress=True)
    assert notebook and notebook[-1].startswith("heads ") and "3/3 windows (100%)" in notebook[-1]


def test_sweeps_and_task_runs_show_progress(tmp_path, notebook):
    from attnscope import dynamics as dyn
    from attnscope.runs import Task, run_tasks

    cfg = dyn.load_preset("paper")
    dyn.bifurcation(cfg, np.linspace(1.2, 1.3, 4), mode="x0", transient=10, steps=20, lyap_steps=5, chunk=2,
                    progress=True)
    assert notebook and "2/2 chunks (100%)" in notebook[-1]
    notebook.clear()
    run_tasks(abs, [Task(f"t{i}", -i) for i in range(3)], tmp_path / "store", executor="inline", desc="square")
    assert notebook[-1].startswith("square: 3/3 tasks (100%)")


def test_each_run_of_a_grid_reports_its_steps_in_plain_lines(tmp_path, slow_clock, capsys):
    """Not only a line when a run ends: every run of an inline grid (the same in pool workers) logs its steps."""
    from attnscope.training.grid import run_grid

    base = _tiny_train_config(tmp_path, log_every=1)
    grid = run_grid(base, seeds=[0, 1], out=str(tmp_path / "grid"), executor="inline", progress=True)
    assert len(grid.summary.done) == 2
    err = capsys.readouterr().err
    for seed in (0, 1):
        run = str(tmp_path / "grid" / f"{base.objective}-{base.init}-seed{seed}")
        steps = [line for line in err.splitlines() if line.startswith(f"{run}: ")]
        assert any(line.startswith(f"{run}: 2/4 (50%)") for line in steps), err  # within the run, not only its end
        assert steps[-1].startswith(f"{run}: 4/4 (100%)") and "loss " in steps[-1]
    assert "\r" not in err and "\x1b" not in err


def test_the_grid_of_a_process_pool_asks_its_runs_for_progress(tmp_path, monkeypatch):
    import attnscope.training.grid as grid
    from attnscope.runs import RunSummary

    seen = []

    def fake_run_tasks(fn, tasks, store, **kw):
        seen.extend(t.payload["progress"] for t in tasks)
        return RunSummary()

    monkeypatch.setattr(grid, "run_tasks", fake_run_tasks)
    grid.run_grid(_tiny_train_config(tmp_path), seeds=[0, 1], out=str(tmp_path / "g"), executor="local", progress=True)
    assert seen == [True, True]


def test_atlas_cli_writes_progress_lines_into_a_pipe(tmp_path, slow_clock, cli_inproc):
    """``attnscope atlas SRC --out DIR 2>&1 | cat``: plain progress lines, not silence (stderr is no terminal here)."""
    import sys
    from pathlib import Path

    pytest.importorskip("gguf")
    sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
    from _tiny_gguf import tiny_llama_model, write_llama_gguf_model

    gguf = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))
    code, _, err = cli_inproc("atlas", gguf, "--out", tmp_path / "a", "--windows", "2", "--length", "48",
                              "--random-windows", "2", "--random-length", "12", "--n-boot", "50")
    assert code == 0, err
    lines = err.splitlines()
    assert any(line.startswith("text probe: ") and "windows" in line for line in lines), err
    assert any(line.startswith("random probe: ") for line in lines), err
    assert "\r" not in err and "\x1b[" not in err
