"""The trainer end to end on tiny models: logged geometry, checkpoints, kill + resume, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.errors import ConfigError, FormatError, InputError
from attnscope.training.compare import load_run
from attnscope.training.trainer import TrainConfig, list_checkpoints, lr_at, train

TINY = dict(n_layers=2, n_heads=4, d_model=32, d_ff=64, batch_size=4, seq_len=32, eval_windows=8, progress=False,
            threads=1)


def run(tmp_path: Path, name: str = "run", **kw) -> tuple[Path, dict]:
    opts = {**TINY, "out": str(tmp_path / name), **kw}
    cfg = TrainConfig.from_sources(None, **opts)
    return Path(cfg.out), train(cfg)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess (used where a process must be killed)."""
    return subprocess.run([sys.executable, "-m", "attnscope", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, **kw)


@pytest.mark.parametrize("objective, stack", [("mlm", "encoder"), ("clm", "decoder")])
def test_symmetric_init_scores_one_and_zero_at_step_zero(tmp_path, objective, stack):
    run_dir, _ = run(tmp_path, objective=objective, init="symmetric", steps=2, score_every=2)
    first = metrics(run_dir)[0]
    assert first["step"] == 0 and np.isfinite(first["loss"])
    g = pd.DataFrame(first["geometry"])
    assert set(g.level) == {"head", "layer"} and set(g["stack"]) == {stack}
    assert len(g) == 2 * 4 + 2
    np.testing.assert_allclose(g.symmetry, 1.0, atol=1e-5)
    np.testing.assert_allclose(g.directionality, 0.0, atol=1e-5)


def test_default_init_is_not_symmetric_and_loss_falls(tmp_path):
    run_dir, summary = run(tmp_path, objective="clm", steps=30, lr=3e-3, warmup=5, score_every=15, log_every=5)
    m = metrics(run_dir)
    g0 = pd.DataFrame(m[0]["geometry"])
    assert abs(g0[g0.level == "head"].symmetry).max() < 0.5
    assert [r["step"] for r in m] == [0, 5, 10, 15, 20, 25, 30]
    assert [("geometry" in r) for r in m] == [True, False, False, True, False, False, True]
    assert m[-1]["loss"] < m[1]["loss"] - 0.5
    assert summary["eval_loss"] < m[0]["loss"]
    assert summary["eval_bits_per_byte"] == pytest.approx(summary["eval_loss"] / np.log(2))  # bytes tokenizer


CUDA = pytest.mark.gpu


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_checkpoint_scores_equal_logged_scores(tmp_path, device):
    """The live-weight scores (torch, on the model's device) equal attnscope geometry on the checkpoint."""
    from attnscope.geometry import score

    run_dir, _ = run(tmp_path, objective="mlm", steps=6, score_every=3, checkpoint_every=3, n_kv_heads=2,
                     device=device)
    assert [s for s, _ in list_checkpoints(run_dir)] == [3, 6]
    for step, ckpt in list_checkpoints(run_dir):
        assert {p.name for p in ckpt.iterdir()} >= {"model.safetensors", "config.json", "trainer_state.pt"}
        logged = pd.DataFrame(next(r for r in metrics(run_dir) if r["step"] == step)["geometry"])
        fresh = score(str(ckpt))
        cols = ["stack", "level", "layer", "symmetry", "directionality", "frobenius_norm", "n_outlier_rows"]
        # logged: the torch kernel on the live weights; fresh: the numpy kernel on the file (float32
        # products in another order, so equal to float tolerance, not bit for bit)
        pd.testing.assert_frame_equal(
            logged[cols].reset_index(drop=True), fresh[cols].reset_index(drop=True), check_dtype=False,
            rtol=1e-5, atol=1e-5,
        )


def test_load_model_on_a_checkpoint(tmp_path):
    from attnscope.training.model import load_model

    run_dir, _ = run(tmp_path, objective="clm", steps=2, checkpoint_every=2)
    model, cfg = load_model(run_dir / "checkpoints" / "step-2")
    assert cfg.causal and cfg.vocab_size == 256 and not model.training
    conf = json.loads((run_dir / "checkpoints" / "step-2" / "config.json").read_text())
    assert conf["model_type"] == "attnscope" and conf["tokenizer"] == "bytes" and conf["step"] == 2


def _params(ckpt: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(ckpt / "model.safetensors"))


#: the CLI with a hook that holds the run (sleeps) once step 4 is logged, so the test can kill it there
HOLD_AT_STEP_4 = """
import sys, time
from pathlib import Path
from attnscope.cli import main
from attnscope.training.runlog import RunLog

held, log = Path(sys.argv[1]), RunLog.log

def log_then_hold(self, rec):
    log(self, rec)
    if rec["step"] == 4:
        held.touch()
        time.sleep(600)

RunLog.log = log_then_hold
sys.argv = ["attnscope", *sys.argv[2:]]
main()
"""


def test_resume_after_sigkill_reaches_the_same_weights(tmp_path, cli_inproc):
    """SIGKILL the CLI after its first checkpoint, resume, compare with an uninterrupted run."""
    args = ["train", "--objective", "mlm", "--n-layers", "2", "--n-heads", "4", "--d-model", "32", "--d-ff", "64",
            "--steps", "8", "--batch-size", "4", "--seq-len", "32", "--checkpoint-every", "3", "--score-every", "4",
            "--log-every", "2", "--warmup", "3", "--seed", "7", "--no-progress", "--grad-accum", "2",
            "--eval-windows", "8", "--threads", "1"]
    full = tmp_path / "full"
    code, _, err = cli_inproc(*args, "--out", str(full))
    assert code == 0, err

    killed = tmp_path / "killed"
    held = tmp_path / "held"  # the hook writes it, then holds the run at step 4 (after checkpoint 3)
    proc = subprocess.Popen([sys.executable, "-c", HOLD_AT_STEP_4, str(held), *args, "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while not held.exists():
            assert proc.poll() is None, "run ended before it could be killed"
            assert time.time() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [s for s, _ in list_checkpoints(killed)] == [3]
    assert [r["step"] for r in metrics(killed)][-1] == 4  # logged after the checkpoint: resume drops it
    code, _, err = cli_inproc(*args, "--out", str(killed), "--resume")
    assert code == 0, err
    a, b = _params(full / "checkpoints" / "step-8"), _params(killed / "checkpoints" / "step-8")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0)
    ma, mb = metrics(full), metrics(killed)
    assert [r["step"] for r in ma] == [r["step"] for r in mb]
    for ra, rb in zip(ma, mb):
        assert ra["loss"] == pytest.approx(rb["loss"], abs=1e-6)
    assert load_run(killed).notes == []  # the resumed metrics pass compare's checks: no duplicate, finished


def test_a_crash_mid_checkpoint_leaves_the_last_good_one(tmp_path, monkeypatch):
    run_dir, _ = run(tmp_path, steps=2, checkpoint_every=2)
    good = _params(run_dir / "checkpoints" / "step-2")

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        run(tmp_path, steps=4, checkpoint_every=2, resume=True)
    assert [s for s, _ in list_checkpoints(run_dir)] == [2]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-2"]  # no temporary left behind
    after = _params(run_dir / "checkpoints" / "step-2")
    for k in good:
        assert torch.equal(good[k], after[k])


def test_corrupt_checkpoint_on_resume_is_one_line(tmp_path, cli_inproc):
    run_dir, _ = run(tmp_path, steps=2, checkpoint_every=2)
    (run_dir / "checkpoints" / "step-2" / "trainer_state.pt").write_bytes(b"garbage")
    with pytest.raises(FormatError, match="step-2 is corrupt"):
        run(tmp_path, steps=4, checkpoint_every=2, resume=True)
    code, _, err = cli_inproc("train", "--out", str(run_dir), "--resume", "--steps", "4", "--n-layers", "2",
                              "--n-heads", "4", "--d-model", "32", "--d-ff", "64", "--batch-size", "4",
                              "--seq-len", "32", "--eval-windows", "8", "--checkpoint-every", "2", "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "corrupt" in err


def test_non_finite_weights_in_a_checkpoint_are_corruption_not_a_learning_rate_problem(tmp_path):
    """Bytes overwritten inside model.safetensors (a valid header, NaN weights) were resumed from, and the run
    then stopped with 'the training loss became nan ... try a lower --lr', calling that checkpoint the last good."""
    from safetensors.torch import load_file, save_file

    run_dir, _ = run(tmp_path, steps=2, checkpoint_every=2)
    path = run_dir / "checkpoints" / "step-2" / "model.safetensors"
    weights = load_file(str(path))
    name = sorted(weights)[-1]
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, str(path))
    with pytest.raises(FormatError, match=f"step-2 is corrupt \\({name} holds non-finite values\\)"):
        run(tmp_path, steps=4, checkpoint_every=2, resume=True)


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--preset", "bert-huge"], "--preset 'bert-huge' is unknown"),
        (["--objective", "prefix-lm"], "--objective 'prefix-lm' is unknown"),
        (["--init", "orthogonal"], "--init 'orthogonal' is unknown"),
        (["--d-model", "30", "--n-heads", "4"], "not divisible"),
        (["--data", "/nonexistent/corpus.txt"], "no such file"),
        (["--preset", "byte-12l", "--tokenizer", "MINILM", "--n-layers", "1"], "vocab_size is 256"),
        (["--seq-len", "4096"], "max_seq_len"),
        (["--objective", "clm", "--attn-pattern", "nonsense"], "unknown sparse pattern"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, minilm_dir, cli_inproc, args, msg):
    args = [str(minilm_dir) if a == "MINILM" else a for a in args]
    code, _, err = cli_inproc("train", "--steps", "1", "--out", str(tmp_path / "r"), "--no-progress", *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], err
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_empty_corpus_and_existing_run(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(InputError, match="empty"):
        run(tmp_path, data=str(tmp_path / "empty.txt"), steps=1)
    (tmp_path / "small.txt").write_text("tiny")
    with pytest.raises(InputError, match="too small"):
        run(tmp_path, data=str(tmp_path / "small.txt"), steps=1)
    run(tmp_path, name="done", steps=1)
    with pytest.raises(InputError, match="already holds a run"):
        run(tmp_path, name="done", steps=1)
    with pytest.raises(ConfigError, match="different settings: seed"):
        run(tmp_path, name="done", steps=2, resume=True, seed=99)


def test_yaml_config_and_flag_precedence(tmp_path, cli_inproc):
    (tmp_path / "c.yaml").write_text(
        "objective: clm\nn-layers: 1\nn_heads: 2\nd_model: 32\nd_ff: 64\nsteps: 3\nbatch_size: 2\nseq_len: 16\n"
        "tokenizer: bytes\nscore_every: 3\nlr: 0.001\neval_windows: 4\n"
    )
    code, out, err = cli_inproc("train", "--config", str(tmp_path / "c.yaml"), "--steps", "2",
                                "--out", str(tmp_path / "y"), "--no-progress", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["steps"] == 2 and summary["objective"] == "clm"
    conf = json.loads((tmp_path / "y" / "run.json").read_text())
    assert conf["model"]["n_layers"] == 1 and conf["model"]["vocab_size"] == 256 and conf["lr"] == 0.001
    (tmp_path / "bad.yaml").write_text("stepz: 3\n")
    code, _, err = cli_inproc("train", "--config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "z"))
    assert code == 2 and "unknown training option(s): stepz" in err


def test_trained_wordpiece_tokenizer_and_mlm_mask_id(tmp_path):
    run_dir, summary = run(tmp_path, tokenizer="wordpiece:300", objective="mlm", steps=2, checkpoint_every=2)
    assert (run_dir / "tokenizer.json").is_file()
    assert (run_dir / "checkpoints" / "step-2" / "tokenizer.json").is_file()
    conf = json.loads((run_dir / "run.json").read_text())
    assert conf["model"]["vocab_size"] <= 300


def test_bytes_mlm_gets_an_extra_mask_id(tmp_path):
    run_dir, _ = run(tmp_path, objective="mlm", steps=1)
    assert json.loads((run_dir / "run.json").read_text())["model"]["vocab_size"] == 257


def test_lr_schedule():
    cfg = TrainConfig(steps=100, warmup=10, lr=1.0, schedule="linear")
    assert [lr_at(s, cfg) for s in (1, 10, 55, 100)] == pytest.approx([0.1, 1.0, 0.5, 0.0])
    cfg.schedule = "cosine"
    assert [lr_at(s, cfg) for s in (10, 55, 100)] == pytest.approx([1.0, 0.5, 0.0])
    cfg.schedule = "constant"
    assert lr_at(90, cfg) == 1.0


def test_bf16_and_tie_qk_run(tmp_path):
    run_dir, _ = run(tmp_path, objective="clm", steps=3, bf16=True, tie_qk=True, score_every=3, lr=1e-2, warmup=0)
    last = pd.DataFrame(metrics(run_dir)[-1]["geometry"])
    np.testing.assert_allclose(last.symmetry, 1.0, atol=1e-5)  # tied for all of training


def test_sparse_pattern_training_run(tmp_path):
    run_dir, summary = run(tmp_path, objective="clm", n_heads=8, d_model=64, attn_pattern="byte-sparse-8h", steps=2,
                           score_every=2)
    assert np.isfinite(summary["eval_loss"])
    assert json.loads((run_dir / "run.json").read_text())["model"]["attn_pattern"] == "byte-sparse-8h"


def test_optional_loggers_missing_is_one_line(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def hide(name, *a, **k):
        if name in ("wandb", "torch.utils.tensorboard"):
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", hide)
    with pytest.raises(InputError, match="optional 'wandb' package"):
        run(tmp_path, name="w", steps=1, wandb="proj")
    with pytest.raises(InputError, match="optional 'tensorboard' package"):
        run(tmp_path, name="t", steps=1, tensorboard=True)


def test_geometry_cli_on_a_checkpoint_gives_the_logged_scores(tmp_path, cli_inproc):
    run_dir, _ = run(tmp_path, objective="clm", steps=2, score_every=2, checkpoint_every=2)
    code, out, err = cli_inproc("geometry", str(run_dir / "checkpoints" / "step-2"), "--json")
    assert code == 0, err
    fresh = pd.DataFrame(json.loads(out))
    logged = pd.DataFrame(metrics(run_dir)[-1]["geometry"])
    cols = ["stack", "level", "layer", "head", "symmetry", "directionality", "frobenius_norm", "n_outlier_cols"]
    pd.testing.assert_frame_equal(logged[cols], fresh[cols], check_dtype=False, atol=1e-9)
    assert set(fresh["model"]) == set(logged["model"]) == {run_dir.name}  # one name: the run's (they join)
    assert set(fresh["source"]) == {str(run_dir / "checkpoints" / "step-2")}


def test_resume_refuses_a_pattern_file_edited_since_the_run_started(tmp_path):
    """attn_pattern is a path: run.json records the heads the run trained with, and a resume whose file now says
    otherwise is one line (it once trained on with the new pattern without a word); the file restored, it resumes."""
    pattern = tmp_path / "p.yaml"
    pattern.write_text("all: {window: 4}\n")
    kw = dict(objective="clm", n_layers=1, seq_len=16, eval_windows=1, attn_pattern=str(pattern), checkpoint_every=1,
              score_every=100)
    run_dir, _ = run(tmp_path, steps=1, **kw)
    assert json.loads((run_dir / "run.json").read_text())["model"]["attn_pattern_heads"] == [{"window": 4}] * 4
    pattern.write_text("all: {window: 2, stride: 8}\n")
    with pytest.raises(ConfigError, match="attn_pattern .*p.yaml' changed since the run started") as err:
        run(tmp_path, steps=2, resume=True, **kw)
    assert "\n" not in str(err.value)
    assert [rec["step"] for rec in metrics(run_dir)] == [0, 1]  # nothing trained, nothing written
    pattern.write_text("all:\n  window: 4\n")  # the same heads, written differently: resumes
    _, summary = run(tmp_path, steps=2, resume=True, **kw)
    assert summary["steps"] == 2


def test_a_checkpoint_of_a_pattern_file_run_loads_without_the_file(tmp_path):
    """config.json records the pattern's heads (attn_pattern_heads): the checkpoint loads and attends as it trained
    after the pattern file is gone or edited (before: the file had to stay at its path, else a one-line refusal)."""
    from attnscope.training.model import load_model

    pattern = tmp_path / "p.yaml"
    pattern.write_text("all: {window: 3, stride: 8}\n")
    kw = dict(objective="clm", n_layers=1, seq_len=16, eval_windows=1, attn_pattern=str(pattern), checkpoint_every=1,
              score_every=100)
    run_dir, _ = run(tmp_path, steps=1, **kw)
    ckpt = run_dir / "checkpoints" / "step-1"
    assert json.loads((ckpt / "config.json").read_text())["attn_pattern_heads"] == [{"window": 3, "stride": 8}] * 4
    x = torch.randint(0, 64, (1, 16))
    model, _ = load_model(ckpt)
    with torch.no_grad():
        want = model(x)
    pattern.write_text("all: {window: 1}\n")  # edited: the checkpoint keeps what it trained with
    model, config = load_model(ckpt)
    assert config.pattern().heads[0].window == 3
    with torch.no_grad():
        torch.testing.assert_close(model(x), want)
    pattern.unlink()  # gone
    model, _ = load_model(ckpt)
    with torch.no_grad():
        torch.testing.assert_close(model(x), want)
    dense = model.blocks[0].attn  # a model given another pattern by hand attends with that one
    dense.pattern = "local:16"
    assert dense._read_pattern().heads[0].window == 16
