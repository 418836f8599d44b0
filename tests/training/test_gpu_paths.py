"""The CUDA paths of the trainer, exercised on CPU: the device-side loss guard at the GPU's cadence,
the fused-AdamW skip, host-computed batches, the --bf16 and --compile refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import attnscope.training.trainer as trainer
from attnscope.errors import ConfigError
from attnscope.training.checkpoints import list_checkpoints
from attnscope.training.config import TrainConfig
from attnscope.training.model import Transformer, preset_config
from attnscope.training.objectives import make_batch, model_loss

from .test_adversarial import assert_whole, one_line_exit_2, train_cli


def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(preset_config("bert-mini", n_layers=1, d_model=32, n_heads=2, d_ff=64, vocab_size=50))


@pytest.mark.parametrize("objective, p", [("mlm", 0.3), ("clm", 0.15), ("mlm", 1e-6)])
def test_batch_loss_is_model_loss(objective, p):
    """Masked positions as host-computed indices give the loss of the boolean-mask route (or its nan)."""
    model = tiny().eval()
    gen = torch.Generator().manual_seed(3)
    w = torch.randint(0, 49, (3, 9), generator=gen)
    inputs, labels = make_batch(objective, w, 49, 49, gen, p)
    batch = trainer.Batch.on(inputs, labels, torch.device("cpu"))
    want = model_loss(model, inputs, labels)
    got = batch.loss(model)
    assert batch.labelled == bool((labels != -100).any())
    if batch.labelled:
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)
    else:
        assert got.isnan() and want.isnan()


def test_a_non_finite_step_is_skipped_by_the_fused_adamw():
    model = tiny()
    cfg = TrainConfig(device="cpu")
    opt = trainer._optimizer(model, cfg)
    guard = trainer.Guard(torch.device("cpu"), can_skip=trainer._fused(opt))
    assert trainer._fused(opt)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.found_inf = guard.record(1, torch.tensor(0.5), True)  # a finite step: updated
    opt.step()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    steps_before = [s["step"].item() for s in opt.state.values()]
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    opt.found_inf = guard.record(2, torch.tensor(float("nan")), True)  # non-finite: no update at all
    opt.step()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert [s["step"].item() for s in opt.state.values()] == steps_before
    with pytest.raises(ConfigError, match="stopped at step 2: the training loss became nan"):
        guard.read(Path("no-run"))


def test_the_sum_is_read_and_reset():
    guard = trainer.Guard(torch.device("cpu"), can_skip=True)
    for i, x in enumerate([1.0, 2.0, 4.0], 1):
        guard.record(i, torch.tensor(x), counted=x != 2.0)
    assert guard.read(Path("no-run")) == 5.0
    assert guard.read(Path("no-run")) == 0.0


def _first_bad(err: str) -> int:
    return int(err.split("stopped at step ")[1].split(":")[0])


def test_the_gpu_cadence_stops_at_the_first_bad_step_with_good_checkpoints(tmp_path, cli_inproc, monkeypatch):
    """Read only at log / checkpoint steps (as on CUDA): same stop step as the per-step check, the steps in
    between never touched the weights, every checkpoint is finite and before the bad step."""
    args = ("--lr", "1e30", "--warmup", "0", "--steps", "40", "--checkpoint-every", "3", "--log-every", "7")
    per_step = one_line_exit_2(train_cli(cli_inproc, tmp_path / "cpu", *args), "stopped at step", "loss became")
    held = {}
    real = trainer.Guard.__init__

    def gpu_cadence(self, device, can_skip):
        real(self, device, can_skip)
        self.every_step = False
        held["guard"] = self

    monkeypatch.setattr(trainer.Guard, "__init__", gpu_cadence)
    delayed = one_line_exit_2(train_cli(cli_inproc, tmp_path / "gpu", *args), "stopped at step", "loss became")
    assert held["guard"].every_step is False
    bad = _first_bad(per_step)
    assert _first_bad(delayed) == bad < 40
    run_dir = tmp_path / "gpu"
    assert [s for s, _ in list_checkpoints(run_dir)] == [s for s in range(3, bad, 3)]
    assert all(math.isfinite(json.loads(x)["loss"]) for x in (run_dir / "metrics.jsonl").read_text().splitlines())
    assert_whole(run_dir)


def test_bf16_without_gpu_support_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Tesla V100")
    with pytest.raises(ConfigError, match="Tesla V100 has no bf16 support"):
        trainer.check_bf16(TrainConfig(device="cuda", bf16=True))
    trainer.check_bf16(TrainConfig(device="cuda", bf16=False))  # no bf16 asked: fine
    trainer.check_bf16(TrainConfig(device="cpu", bf16=True))  # CPU autocast: fine


def test_compile_failure_is_one_line(tmp_path, cli_inproc, monkeypatch):
    def broken(model, *a, **k):
        def run(*args, **kwargs):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\ntraceback lines")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    line = one_line_exit_2(train_cli(cli_inproc, tmp_path / "r", "--steps", "2", "--compile"),
                           "--compile failed", "No working C++ compiler", "run without it")
    assert "traceback" not in line
    assert not list_checkpoints(tmp_path / "r")


def test_resume_of_an_unfused_optimizer_state_runs_fused(monkeypatch):
    model = tiny()
    with monkeypatch.context() as m:  # as checkpoints were written before the trainer fused AdamW
        m.setattr(trainer, "FUSED_DEVICES", ())
        old = trainer._optimizer(model, TrainConfig(device="cpu"))
    assert not trainer._fused(old)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    old.step()
    opt = trainer._optimizer(model, TrainConfig(device="cpu"))
    opt.load_state_dict(old.state_dict())
    trainer._fuse(opt, model)
    assert trainer._fused(opt)
    opt.found_inf = torch.zeros(())
    opt.step()
    assert all(s["step"].item() == 2 for s in opt.state.values())


@pytest.mark.slow
def test_compile_trains_like_eager(tmp_path):
    """--compile on CPU (needs a C++ compiler; skipped when torch.compile cannot build here)."""
    common = dict(steps=3, batch_size=2, seq_len=16, n_layers=1, d_model=32, n_heads=2, d_ff=64, dropout=0.0,
                  progress=False, log_every=1, checkpoint_every=3, eval_windows=2)
    eager = trainer.train(TrainConfig(out=str(tmp_path / "e"), **common))
    try:
        fast = trainer.train(TrainConfig(out=str(tmp_path / "c"), compile=True, **common))
    except ConfigError as exc:  # pragma: no cover - a machine without a compiler
        pytest.skip(str(exc))
    assert fast["eval_loss"] == pytest.approx(eager["eval_loss"], rel=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", [None, "byte-sparse-8h"])
def test_cuda_bf16_training_learns_and_resumes(tmp_path, pattern):
    """On a GPU: bf16 autocast, fused AdamW, device-side losses (and FlexAttention for a pattern) train a
    tiny decoder; resuming from its middle checkpoint reaches the same end (GPU kernels may reduce in another
    order, so to a tolerance, not bit for bit; dropout is off because the GPU's dropout RNG is not saved)."""
    import shutil

    from attnscope.training.trainer import train

    opts = dict(n_layers=2, n_heads=8, d_model=64, d_ff=128, batch_size=8, seq_len=128, objective="clm",
                device="cuda", bf16=True, attn_pattern=pattern, dropout=0.0, steps=40, lr=3e-3, warmup=5,
                log_every=5, score_every=20, checkpoint_every=20, eval_windows=8, progress=False)
    whole = train(TrainConfig.from_sources(None, **opts, out=str(tmp_path / "whole")))
    losses = [json.loads(line)["loss"] for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] - 1.0
    assert math.isfinite(whole["eval_loss"])
    assert whole["compiled"] is (pattern is None)  # the CUDA default: compiled with dense attention
    shutil.copytree(tmp_path / "whole", tmp_path / "again")
    shutil.rmtree(tmp_path / "again" / "checkpoints" / "step-40")
    (tmp_path / "again" / "summary.json").unlink()
    again = train(TrainConfig.from_sources(None, **opts, out=str(tmp_path / "again"), resume=True))
    assert again["eval_loss"] == pytest.approx(whole["eval_loss"], rel=0.02)
