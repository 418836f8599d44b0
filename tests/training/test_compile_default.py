"""torch.compile by default where it pays (CUDA, dense attention), off elsewhere; --compile / --no-compile
plumb through the CLI, YAML and a resume; a default compile that fails warns once and trains eagerly."""

from __future__ import annotations

import json

import pytest
import torch
import typer.main

from attnscope.errors import AttnscopeWarning, ConfigError
from attnscope.training import trainer
from attnscope.training.config import TrainConfig


@pytest.mark.parametrize("device, pattern, compile_, on", [
    ("cpu", None, None, False), ("cuda", None, None, True), ("cuda:1", None, None, True),
    ("cuda", "byte-sparse-8h", None, False), ("mps", None, None, False),
    ("cpu", None, True, True), ("cuda", None, False, False), ("cuda", "byte-sparse-8h", True, True),
])
def test_compile_choice(device, pattern, compile_, on):
    got, why = TrainConfig(device=device, attn_pattern=pattern, compile=compile_).compile_choice()
    assert got is on and "\n" not in why
    assert ("on" if on else "off") in why.split(":")[0].split("(")[0]


def _parsed(*args: str) -> dict:
    from attnscope.cli.train import config_options
    from attnscope.cli.train import train as train_command

    app = typer.Typer(add_completion=False)
    app.command()(train_command)
    ctx = typer.main.get_command(app).make_context("train", list(args))
    return config_options(ctx.params)


@pytest.mark.parametrize("args, want", [((), None), (("--compile",), True), (("--no-compile",), False)])
def test_compile_flags_reach_the_config(args, want):
    cfg = TrainConfig.from_sources(None, **_parsed(*args))
    assert cfg.compile is want


def test_compile_from_a_yaml_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("compile: false\n")
    assert TrainConfig.from_sources(str(path)).compile is False
    path.write_text("compile: sometimes\n")
    with pytest.raises(ConfigError, match="compile must be true or false"):
        TrainConfig.from_sources(str(path))


class _Wrapped(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *a, **k):
        return self.inner(*a, **k)


def _probe_and_model():
    cfg = TrainConfig(device="cpu", steps=1, batch_size=2, seq_len=8, n_layers=1, d_model=16, n_heads=2, d_ff=32)
    from dataclasses import replace

    model = trainer.Transformer(replace(cfg.model_config(), vocab_size=64))
    x = torch.randint(0, 64, (2, 8))
    y = torch.full((2, 8), -100)
    y[:, 3] = 5
    return cfg, model, trainer.Batch.on(x, y, torch.device("cpu"))


def test_the_default_choice_decides_whether_torch_compile_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "compile", lambda m, *a, **k: calls.append(m) or _Wrapped(m))
    cfg, model, probe = _probe_and_model()
    assert trainer.compiled(model, cfg, probe) is model and not calls  # CPU default: off
    monkeypatch.setattr(TrainConfig, "compile_choice", lambda self: (True, "on: the CUDA default"))
    fast = trainer.compiled(model, cfg, probe)
    assert isinstance(fast, _Wrapped) and calls == [model]


@pytest.mark.parametrize("pattern, eager_first", [(None, 0), ("byte-sparse-8h", 1)])
def test_a_sparse_model_runs_one_eager_pass_before_it_is_compiled(monkeypatch, pattern, eager_first):
    """The eager pass keeps the attention's FlexAttention plans, so the compiled model traces without breaks."""
    from dataclasses import replace

    events = []
    monkeypatch.setattr(torch, "compile", lambda m, *a, **k: events.append("compile") or _Wrapped(m))
    cfg = TrainConfig(device="cpu", steps=1, batch_size=2, seq_len=16, n_layers=1, d_model=16, n_heads=8,
                      d_ff=32, attn_pattern=pattern, compile=True)
    model = trainer.Transformer(replace(cfg.model_config(), vocab_size=64))
    model.register_forward_hook(lambda *a: events.append("forward"))
    x, y = torch.randint(0, 64, (2, 16)), torch.full((2, 16), -100)
    y[:, 3] = 5
    trainer.compiled(model, cfg, trainer.Batch.on(x, y, torch.device("cpu")))
    assert events == ["forward"] * eager_first + ["compile", "forward"]
    assert all(p.grad is None for p in model.parameters())  # the passes leave no gradient behind


def test_a_failing_default_compile_warns_once_and_trains_eagerly(monkeypatch):
    def broken(model, *a, **k):
        def run(*args, **kwargs):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(TrainConfig, "compile_choice", lambda self: (True, "on: the CUDA default"))
    cfg, model, probe = _probe_and_model()
    with pytest.warns(AttnscopeWarning, match="on by default on CUDA.*No working C\\+\\+ compiler.*--no-compile"):
        assert trainer.compiled(model, cfg, probe) is model
    cfg.compile = True  # asked for: one line and stop, as before
    with pytest.raises(ConfigError, match="compile=True failed"):
        trainer.compiled(model, cfg, probe)


def test_resume_may_change_compile(tmp_path):
    common = dict(out=str(tmp_path / "r"), batch_size=2, seq_len=16, n_layers=1, d_model=16, n_heads=2, d_ff=32,
                  progress=False, checkpoint_every=2, eval_windows=1, warmup=0, score_every=100)
    first = trainer.train(TrainConfig(steps=2, **common))
    assert first["compiled"] is False
    assert json.loads((tmp_path / "r" / "run.json").read_text())["compile"] is None
    again = trainer.train(TrainConfig(steps=3, resume=True, compile=False, **common))
    assert again["steps"] == 3 and again["compiled"] is False


def test_a_resume_with_nothing_left_to_train_compiles_nothing(tmp_path, monkeypatch, capsys):
    """--resume --compile on a finished run: no compile (minutes on a large model), no word of compiling."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda m, *a, **k: calls.append(m) or m)
    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    common = dict(out=str(tmp_path / "r"), batch_size=2, seq_len=16, n_layers=1, d_model=16, n_heads=2, d_ff=32,
                  checkpoint_every=2, eval_windows=1, warmup=0, score_every=100, steps=2)
    trainer.train(TrainConfig(progress=False, **common))
    capsys.readouterr()
    summary = trainer.train(TrainConfig(resume=True, compile=True, **common))
    assert not calls and summary["steps"] == 2 and "compil" not in capsys.readouterr().err
    trainer.train(TrainConfig(resume=True, compile=True, **{**common, "steps": 3}))
    assert len(calls) == 1  # with a step left, it compiles


def test_compiling_shows_from_its_first_second(tmp_path, monkeypatch):
    """Compiling can take minutes before step 1: the run says whether it compiles and why, then that it is
    compiling, as it runs (a plain line off a terminal once it has run PHASE_LINE_S, one more as it ends)."""
    import io
    import sys
    import time

    import attnscope.progress as prog

    def slow(model, *a, **k):
        def run(*args, **kwargs):
            time.sleep(0.3)
            return model(*args, **kwargs)
        return run

    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    monkeypatch.setattr(torch, "compile", slow)
    monkeypatch.setattr(prog, "PHASE_LINE_S", 0.05)
    monkeypatch.setattr(prog, "LINE_AFTER_S", 0.1)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    common = dict(batch_size=2, seq_len=16, n_layers=1, d_model=16, n_heads=2, d_ff=32, steps=1,
                  checkpoint_every=1, eval_windows=1, warmup=0, score_every=100)
    trainer.train(TrainConfig(out=str(tmp_path / "c"), compile=True, **common))
    lines = err.getvalue().splitlines()
    at = lines.index("train c: compiling the model on one batch ...")
    assert lines[at - 1].startswith("torch.compile on")
    assert any(x.startswith("train c: compiling the model on one batch: ") for x in lines[at + 1:])
    err.truncate(0)
    err.seek(0)
    trainer.train(TrainConfig(out=str(tmp_path / "e"), compile=False, **common))
    assert "compil" not in err.getvalue()  # no compile on CPU: nothing said of it
    err.truncate(0)
    err.seek(0)
    monkeypatch.setenv("ATTNSCOPE_QUIET", "1")  # quiet: as with --no-progress, not a word of compiling
    trainer.train(TrainConfig(out=str(tmp_path / "q"), compile=True, **common))
    assert "compil" not in err.getvalue()
