"""``attnscope train`` under hostile input and faults: one line and exit 2, nothing partial left behind.

Bad values (YAML and flags), devices that do not exist, unwritable --out, a diverging loss, torn or
corrupt run files on --resume, leftovers of a killed checkpoint write, and a full disk (simulated, and
real on a tiny tmpfs where the machine lets us mount one).
"""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch

from attnscope.errors import AttnscopeError
from attnscope.training.checkpoints import list_checkpoints

TINY = ["--n-layers", "1", "--n-heads", "2", "--d-model", "16", "--d-ff", "32", "--batch-size", "2", "--seq-len",
        "16", "--eval-windows", "2", "--threads", "1", "--no-progress", "--warmup", "0"]


def one_line_exit_2(result, *needles: str) -> str:
    code, _, err = result
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], err
    return lines[0]


def assert_whole(run_dir: Path) -> None:
    """No partial result: every metrics line parses, every checkpoint is complete and finite, no temporaries."""
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            json.loads(line)
    for p in (run_dir / "checkpoints").glob("*") if (run_dir / "checkpoints").is_dir() else ():
        assert not p.name.startswith("."), f"temporary left behind: {p}"
    for _, ckpt in list_checkpoints(run_dir):
        from safetensors.torch import load_file

        assert (ckpt / "trainer_state.pt").is_file()
        assert all(torch.isfinite(t).all() for t in load_file(str(ckpt / "model.safetensors")).values())
    for p in run_dir.glob(".*.tmp"):
        raise AssertionError(f"temporary left behind: {p}")


def train_cli(cli_inproc, out: Path, *args: str):
    return cli_inproc("train", *TINY, "--out", str(out), *args)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--steps", "five"], "--steps must be an integer, not 'five'"),
        (["--steps", "-3"], "--steps must be positive"),
        (["--batch-size", "0"], "--batch-size must be positive"),
        (["--checkpoint-every", "0"], "--checkpoint-every must be positive"),
        (["--eval-every", "-1"], "--eval-every must be positive"),
        (["--keep-checkpoints", "0"], "--keep-checkpoints must be positive"),
        (["--warmup", "-1"], "--warmup must not be negative"),
        (["--lr", "inf"], "--lr must be a finite number"),
        (["--lr", "0"], "--lr must be positive"),
        (["--clip", "nan"], "--clip must be a finite number"),
        (["--weight-decay", "nan"], "--weight-decay must be a finite number"),
        (["--mask-prob", "nan"], "--mask-prob must be a finite number"),
        (["--dropout", "inf"], "--dropout must be a finite number"),
        (["--lr", "fast"], "--lr must be a number, not 'fast'"),
        (["--device", "gpu"], "--device 'gpu' is not a name torch accepts"),
        (["--device", "cuda:7"], "cuda:7"),
    ],
)
def test_bad_values_on_the_command_line(tmp_path, cli_inproc, args, needle):
    if args[-1] == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    one_line_exit_2(train_cli(cli_inproc, tmp_path / "r", "--steps", "1", *args), needle)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "yaml, needle",
    [
        ("steps: five\n", "c.yaml: steps must be an integer, not 'five'"),
        ("lr: .inf\n", "c.yaml: lr must be a finite number"),
        ("clip: .nan\n", "c.yaml: clip must be a finite number"),
        ("grad_accum: [1, 2]\n", "grad_accum must be an integer"),
        ("objective: 3\n", "objective must be a string"),
        ("resume: maybe\n", "resume must be true or false"),
        ("steps: 2.5\n", "c.yaml: steps must be an integer, not 2.5"),
    ],
)
def test_bad_values_in_the_yaml_config(tmp_path, cli_inproc, yaml, needle):
    (tmp_path / "c.yaml").write_text(yaml)
    one_line_exit_2(train_cli(cli_inproc, tmp_path / "r", "--config", str(tmp_path / "c.yaml")), needle)
    assert not (tmp_path / "r").exists()


def test_numbers_written_as_text_in_yaml_are_read(tmp_path, cli_inproc):
    (tmp_path / "c.yaml").write_text("steps: '1'\nlr: 1e-3\n")  # YAML reads 1e-3 as a string
    code, _, err = train_cli(cli_inproc, tmp_path / "r", "--config", str(tmp_path / "c.yaml"))
    assert code == 0, err
    conf = json.loads((tmp_path / "r" / "run.json").read_text())
    assert conf["lr"] == 1e-3 and conf["steps"] == 1


def _unwritable(tmp_path: Path, kind: str) -> Path:
    if kind == "parent is a file":
        (tmp_path / "file").write_text("x")
        return tmp_path / "file" / "run"
    if kind == "out is a file":
        (tmp_path / "file").write_text("x")
        return tmp_path / "file"
    if kind == "read-only dir":
        if os.geteuid() == 0:
            pytest.skip("root can write into a read-only directory")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return ro / "run"
    return Path("/proc/attnscope-run")


@pytest.mark.parametrize("kind", ["parent is a file", "out is a file", "read-only dir", "/proc"])
def test_unwritable_out_is_refused_before_any_work(tmp_path, cli_inproc, monkeypatch, kind):
    import attnscope.training.trainer as trainer

    out = _unwritable(tmp_path, kind)

    def no_work(*a, **k):
        raise AssertionError("the corpus was opened before --out was checked")

    monkeypatch.setattr(trainer, "open_corpus", no_work)
    before = out.read_text() if out.is_file() else None
    one_line_exit_2(train_cli(cli_inproc, out, "--steps", "1"), "--out", str(out))
    assert (out.read_text() if out.is_file() else None) == before and not out.is_dir()


def test_a_diverging_loss_stops_at_once_and_keeps_the_last_good_checkpoint(tmp_path, cli_inproc):
    run_dir = tmp_path / "r"
    line = one_line_exit_2(
        train_cli(cli_inproc, run_dir, "--lr", "1e30", "--warmup", "0", "--steps", "20", "--checkpoint-every", "1"),
        "stopped at step", "loss became",
    )
    step = int(line.split("stopped at step ")[1].split(":")[0])
    assert step < 20
    assert [s for s, _ in list_checkpoints(run_dir)] == list(range(1, step))  # nothing at or after the bad step
    assert not (run_dir / "summary.json").exists()
    assert all(math.isfinite(json.loads(x)["loss"]) for x in (run_dir / "metrics.jsonl").read_text().splitlines())
    assert_whole(run_dir)


def test_mlm_batches_without_a_masked_position_do_not_stop_or_poison_a_run(tmp_path, cli_inproc):
    """With 1 x 4 tokens and mask_prob 0.05, most batches select nothing: a nan loss with zero gradient."""
    run_dir = tmp_path / "r"
    code, _, err = train_cli(cli_inproc, run_dir, "--batch-size", "1", "--seq-len", "4", "--mask-prob", "0.05",
                             "--steps", "30", "--log-every", "1", "--checkpoint-every", "30", "--json")
    assert code == 0, err
    losses = [json.loads(x)["loss"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()[1:]]
    assert None in losses  # steps with nothing to predict log no loss ...
    assert all(x is None or math.isfinite(x) for x in losses)  # ... and never a nan or a made-up 0
    assert any(x is not None for x in losses)
    assert_whole(run_dir)


@pytest.fixture
def finished(tmp_path, cli_inproc) -> Path:
    """A 2-step run with a checkpoint at step 2, to resume to step 4."""
    run_dir = tmp_path / "r"
    code, _, err = train_cli(cli_inproc, run_dir, "--steps", "2", "--checkpoint-every", "2", "--log-every", "1")
    assert code == 0, err
    return run_dir


def resume(cli_inproc, run_dir: Path):
    return train_cli(cli_inproc, run_dir, "--steps", "4", "--checkpoint-every", "2", "--log-every", "1", "--resume")


def test_resume_drops_a_torn_last_metrics_line(finished, cli_inproc):
    with open(finished / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 3, "loss": 5.4')  # a crash (full disk) mid-write
    code, _, err = resume(cli_inproc, finished)
    assert code == 0, err
    assert [json.loads(x)["step"] for x in (finished / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2, 3, 4]
    assert_whole(finished)


def test_resume_explains_a_corrupt_metrics_line_in_one_line(finished, cli_inproc):
    lines = (finished / "metrics.jsonl").read_text().splitlines()
    lines[1] = "garbage"
    (finished / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    one_line_exit_2(resume(cli_inproc, finished), "metrics.jsonl line 2")
    assert (finished / "metrics.jsonl").read_text().splitlines()[1] == "garbage"  # left for the user to see


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_resume_with_a_corrupt_run_json_is_one_line(finished, cli_inproc, content):
    (finished / "run.json").write_text(content)
    one_line_exit_2(resume(cli_inproc, finished), "run.json is corrupt")
    assert [s for s, _ in list_checkpoints(finished)] == [2]


def test_resume_from_a_checkpoint_without_running_totals_is_one_line(finished, cli_inproc):
    path = finished / "checkpoints" / "step-2" / "trainer_state.pt"
    state = torch.load(path, weights_only=True)
    del state["accumulators"]["tokens"]
    torch.save(state, path)
    one_line_exit_2(resume(cli_inproc, finished), "step-2 is corrupt")


def test_resume_removes_leftovers_of_a_killed_checkpoint_write(finished, cli_inproc):
    tmp = finished / "checkpoints" / ".tmp-step-3-4242"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes(b"half")
    code, _, err = resume(cli_inproc, finished)
    assert code == 0, err
    assert not tmp.exists()
    assert [s for s, _ in list_checkpoints(finished)] == [2, 4]
    assert_whole(finished)


def test_resume_restores_a_checkpoint_killed_between_its_renames(finished, cli_inproc):
    ckpts = finished / "checkpoints"
    os.replace(ckpts / "step-2", ckpts / ".old-step-2-4242")  # killed after the first rename of a re-write
    code, _, err = resume(cli_inproc, finished)
    assert code == 0, err
    assert [s for s, _ in list_checkpoints(finished)] == [2, 4]
    assert_whole(finished)


def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_during_a_checkpoint_is_one_line(tmp_path, cli_inproc, monkeypatch):
    monkeypatch.setattr(torch, "save", _enospc)
    run_dir = tmp_path / "r"
    one_line_exit_2(train_cli(cli_inproc, run_dir, "--steps", "2", "--checkpoint-every", "2"),
                    str(run_dir / "checkpoints" / "step-2"), "no space left")
    assert list_checkpoints(run_dir) == [] and not (run_dir / "summary.json").exists()
    assert_whole(run_dir)


def test_a_full_disk_while_logging_leaves_no_half_line(tmp_path, cli_inproc, monkeypatch):
    import attnscope.training.runlog as runlog

    class HalfWriter:
        """A file whose second write puts half of its bytes down, then finds the disk full."""

        def __init__(self, path, mode, buffering=-1):
            self.fh = open(path, mode, buffering=buffering)
            self.calls = 0

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            if (run_dir / "metrics.jsonl").stat().st_size > 0:
                self.fh.write(data[: len(data) // 2])
                _enospc()
            return self.fh.write(data)

    run_dir = tmp_path / "r"
    monkeypatch.setattr(runlog, "open", HalfWriter, raising=False)
    one_line_exit_2(train_cli(cli_inproc, run_dir, "--steps", "2", "--log-every", "1"), "metrics.jsonl", "no space left")
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1  # step 0 only, and whole
    assert_whole(run_dir)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 192 kB tmpfs (needs root and a kernel that allows mounting; skipped otherwise)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mnt)], capture_output=True,
                              timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:
        pytest.skip("cannot mount a tiny tmpfs here (needs root and mount rights)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=20)


@pytest.mark.parametrize("size", [
    ("--d-model", "64", "--d-ff", "256"),  # the weights do not fit (safetensors: "... (os error 28)")
    ("--d-model", "32", "--d-ff", "64", "--n-layers", "1"),  # they do, the optimizer state does not (torch.save's
])                                                          # RuntimeError "unexpected pos", the OSError its context)
def test_a_real_full_disk_is_one_line_and_nothing_partial(tiny_fs, cli_inproc, size):
    run_dir = tiny_fs / "r"
    one_line_exit_2(train_cli(cli_inproc, run_dir, "--steps", "2", "--checkpoint-every", "1", *size),
                    "no space left", str(run_dir))
    assert_whole(run_dir)


def test_torn_record_at_the_last_checkpoint_is_relogged_on_resume(tmp_path, cli_inproc):
    run_dir = tmp_path / "r"
    assert train_cli(cli_inproc, run_dir, "--steps", "4", "--checkpoint-every", "2", "--warmup", "1")[0] == 0
    path = run_dir / "metrics.jsonl"
    path.write_bytes(path.read_bytes()[:-20])  # a crash tore the line logged at checkpoint 4
    code, _, err = train_cli(cli_inproc, run_dir, "--steps", "6", "--checkpoint-every", "2", "--warmup", "1",
                             "--resume")
    assert code == 0, err
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines()]
    assert steps == [0, 2, 4, 6]  # step 4 trained again from checkpoint 2 and logged, nothing lost


def test_resume_with_fewer_steps_than_done_is_refused(tmp_path, cli_inproc):
    run_dir = tmp_path / "r"
    assert train_cli(cli_inproc, run_dir, "--steps", "4", "--checkpoint-every", "2", "--warmup", "1")[0] == 0
    one_line_exit_2(train_cli(cli_inproc, run_dir, "--steps", "2", "--checkpoint-every", "2", "--warmup", "1",
                              "--resume"), "already trained up to step 4; --steps 2 would go back")


def test_integers_past_int64_in_a_config_file_are_one_line(tmp_path, cli_inproc):
    (tmp_path / "c.yaml").write_text("steps: 10000000000000000000000\n")
    one_line_exit_2(train_cli(cli_inproc, tmp_path / "r", "--config", str(tmp_path / "c.yaml")), "64 bits")
    assert not (tmp_path / "r").exists()


def test_warmup_not_below_steps_is_said(tmp_path, cli_inproc):
    code, _, err = train_cli(cli_inproc, tmp_path / "r", "--steps", "2", "--warmup", "5")
    assert code == 0 and "warning: --warmup 5 is not below --steps 2" in err and "(set --warmup below --steps)" in err


def test_the_library_call_holds_the_run_lock(tmp_path):
    from attnscope.runs.store import StoreLock
    from attnscope.training import TrainConfig, train

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    with StoreLock(run_dir / ".lock"):  # another run holds it
        with pytest.raises(AttnscopeError, match="in use"):
            train(TrainConfig(out=str(run_dir), steps=1, n_layers=1, n_heads=2, d_model=16, d_ff=32, batch_size=2,
                              seq_len=16, eval_windows=2, progress=False))
