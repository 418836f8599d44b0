"""``attnscope train --wandb`` (offline, no account) and ``--tensorboard`` for real, read back from their files.

Both runs go through the CLI in a child process (wandb starts its own service process), and the
scalars read back must equal metrics.jsonl: the losses and the per-layer geometry scores.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

TRAIN = ["train", "--n-layers", "2", "--n-heads", "4", "--d-model", "32", "--d-ff", "64", "--steps", "4",
         "--batch-size", "4", "--seq-len", "32", "--checkpoint-every", "4", "--score-every", "2", "--log-every", "2",
         "--eval-windows", "4", "--threads", "1", "--no-progress"]


def _train(tmp_path: Path, *flags: str) -> Path:
    run = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
           "WANDB_CONFIG_DIR": str(tmp_path / "wbconfig"), "WANDB_CACHE_DIR": str(tmp_path / "wbcache"),
           "HOME": str(tmp_path)}
    env.pop("WANDB_API_KEY", None)
    res = subprocess.run([sys.executable, "-m", "attnscope", *TRAIN, "--out", str(run), *flags], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return run


def _expected(run: Path) -> dict[str, dict[int, float]]:
    """metrics.jsonl as {tag: {step: value}}: the scalars and the layer-level scores."""
    out: dict[str, dict[int, float]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for k, v in rec.items():
            if isinstance(v, (int, float)) and k != "step":
                out.setdefault(k, {})[rec["step"]] = float(v)
        for r in rec.get("geometry", ()):
            if r["level"] == "layer":
                for score in ("symmetry", "directionality"):
                    out.setdefault(f"{score}/layer{r['layer']}", {})[rec["step"]] = float(r[score])
    return out


def _wandb_records(path: Path) -> list[bytes]:
    """Records of a W&B offline ``.wandb`` file (a LevelDB-style log: 32 KiB blocks, chunk headers
    crc32 / length / type with FULL=1, FIRST=2, MIDDLE=3, LAST=4), after its 7-byte ':W&B' header."""
    import zlib

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pos, pending, block = [], 7, b"", 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        assert zlib.crc32(bytes([kind]) + chunk) & 0xFFFFFFFF == crc
        pending += chunk
        if kind in (1, 4):
            records.append(pending)
            pending = b""
        pos += 7 + length
    return records


@pytest.mark.slow  # training in a child process plus the wandb service: ~20-30 s here
def test_wandb_offline_history_holds_losses_and_scores(tmp_path):
    pytest.importorskip("wandb", reason="the optional 'wandb' extra is not installed")
    from wandb.proto import wandb_internal_pb2 as pb

    run = _train(tmp_path, "--wandb", "attnscope-test")
    files = list(run.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1
    got: dict[str, dict[int, float]] = {}
    for raw in _wandb_records(files[0]):
        rec = pb.Record()
        rec.ParseFromString(raw)
        if rec.WhichOneof("record_type") != "history":
            continue
        items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
        step = int(items.pop("_step"))
        for k, v in items.items():
            if not k.startswith("_"):
                got.setdefault(k, {})[step] = float(v)
    want = _expected(run)
    assert {"loss", "symmetry/layer0", "directionality/layer1"} <= set(want)
    for tag, series in want.items():
        assert got.get(tag) == pytest.approx(series, rel=1e-6), tag


@pytest.mark.slow
def test_tensorboard_events_hold_losses_and_scores(tmp_path):
    pytest.importorskip("tensorboard", reason="the optional 'tensorboard' extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = _train(tmp_path, "--tensorboard")
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    want = _expected(run)
    assert {"loss", "eval_loss", "symmetry/layer0", "directionality/layer1"} <= set(want)
    assert set(acc.Tags()["scalars"]) == set(want)
    for tag, series in want.items():
        got = {e.step: e.value for e in acc.Scalars(tag)}
        assert got == pytest.approx(series, rel=1e-5), tag  # event files hold float32
