"""What a run writes besides checkpoints: the run directory check, run.json, metrics.jsonl, W&B / TensorBoard.

    RUN_DIR/run.json        the resolved configuration
    RUN_DIR/metrics.jsonl   one JSON object per logged step (step, loss, lr, ...; ``geometry``: score
                            records at step 0 and every K steps; eval_* keys at evaluation steps)
    RUN_DIR/summary.json    final numbers and the geometry-logging overhead

:class:`RunLog` appends to metrics.jsonl (a failed append is cut back, so the file never ends in half a
line we wrote) and mirrors scalars to W&B / TensorBoard when asked; :meth:`RunLog.rewind` is what a
resume does to it: keep the lines up to the checkpoint, drop a torn last line (a crash mid-write).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attnscope.errors import FormatError, InputError
from attnscope.tables import check_writable

from .checkpoints import disk_errors
from .config import TrainConfig


#: the bookkeeping directory a seed grid (:mod:`attnscope.training.grid`) keeps in its --out
GRID_STORE = ".grid"


def holds_run(path: Path) -> bool:
    """Whether ``path`` is (the start of) a training run directory."""
    return (path / "run.json").is_file() or (path / "metrics.jsonl").is_file()


def check_out_dir(out: str | os.PathLike) -> None:
    """One line unless a run directory can be created and written at ``out`` (checked before any work);
    a seed grid's directory is not one (``compare DIR/*`` would then fail)."""
    check_writable(out, "out", directory=True)
    if (Path(out) / GRID_STORE).is_dir():
        raise InputError(f"{out} holds a seed grid; train into a new out (or rerun the grid with seeds)",
                         params=("out", "seeds"))


#: what a run writes into its directory; in a directory that holds no run yet (no checkpoint, no metrics.jsonl
#: beside attnscope's run.json) none of them may be there: they would be the user's (a run.json of a run killed
#: before its first logged step is recognised by its content)
RUN_FILES = ("run.json", "summary.json", "metrics.jsonl", "tokenizer.json", "checkpoints", "tensorboard")


def _our_run_json(path: Path) -> bool:
    """Whether ``path`` is a plain file holding a run.json attnscope wrote (its configuration's keys)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        stored = json.loads(path.read_bytes()[: 1 << 20])
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(stored, dict) and {"objective", "steps", "seed", "model"} <= stored.keys()


def check_run_files(out: str | os.PathLike) -> None:
    """Refuse, before any work, a run into a directory that holds none yet but holds a file of the user's by a
    name the run writes (run.json, summary.json, ...: whatever its permissions or kind), or a run.json /
    summary.json that is a link or no plain file: one line naming them."""
    out = Path(out).expanduser()
    if not out.is_dir():
        return
    names = [n for n in ("run.json", "summary.json") if (out / n).is_symlink()
             or (os.path.lexists(out / n) and not (out / n).is_file())]
    from .checkpoints import list_checkpoints

    ours = _our_run_json(out / "run.json")  # a run writes run.json before its first metrics line
    is_run = (out / "checkpoints").is_dir() and bool(list_checkpoints(out)) or \
        (ours and (out / "metrics.jsonl").is_file() and not (out / "metrics.jsonl").is_symlink())
    if not is_run:  # (a resume would rewrite a metrics.jsonl of yours: it keeps only a run's records)
        names += [n for n in RUN_FILES if os.path.lexists(out / n) and n not in names and not (n == "run.json" and ours)]
    if names:
        shown = ", ".join(names)
        raise InputError(f"{out}: {shown} {'exists' if len(names) == 1 else 'exist'} and {'is' if len(names) == 1 else 'are'} "
                         "not a run's; attnscope never replaces a file it did not write: move "
                         f"{'it' if len(names) == 1 else 'them'} away or choose another out", params="out")


def read_run_json(run_dir: Path) -> dict[str, Any] | None:
    """The stored configuration of a run (None if there is none); FormatError if it is corrupt."""
    path = run_dir / "run.json"
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        stored = exc
    if not isinstance(stored, dict):
        raise FormatError(f"{path} is corrupt ({type(stored).__name__}); restore it, or delete it to resume "
                          "without checking the settings")
    return stored


def geometry_records(model, model_config, name: str, spectra: bool = False) -> list[dict[str, Any]]:
    """Per-head and per-layer score records of the live weights, computed where they are (GPU or CPU).

    The numbers of ``attnscope geometry`` on a checkpoint of the same weights (the attnscope family:
    q_proj / k_proj rows ``(h e)``, one ``encoder`` or ``decoder`` stack) from the torch kernel
    :func:`attnscope.geometry.torch_kernels.qk_scores`: no weight is exported or copied to the host,
    only the [layers, heads + 1, 5] scores are. ``spectra``: also the spectral columns
    (:data:`attnscope.geometry.spectra.SPECTRA_COLUMNS`), computed on the host (:func:`_spectra_columns`).
    """
    import torch

    from attnscope.geometry.scoring import RECORD_COLUMNS
    from attnscope.geometry.torch_kernels import qk_scores

    h, g, e, d = model_config.n_heads, model_config.n_kv_heads, model_config.d_head, model_config.d_model
    with torch.no_grad():
        layers = []
        for block in model.blocks:
            wq, wk = block.attn.q_weight()[0], block.attn.k_proj.weight  # [h e, d], [g e, d]
            layers.append((wq.detach().view(h, e, d).transpose(1, 2), wk.detach().view(g, e, d).transpose(1, 2)))
        scores = qk_scores(layers).tolist()  # [L, h + 1, 5], the one transfer
    base = {"model": name, "family": "attnscope", "stack": "decoder" if model_config.causal else "encoder",
            "n_heads": h, "n_kv_heads": g, "d_model": d, "d_head": e}
    extra = _spectra_columns(layers) if spectra else None
    columns = [*RECORD_COLUMNS, *(extra[0][0] if extra else ())]
    out = []
    for layer, rows in enumerate(scores):
        for head, (sym, dirs, frob, n_r, n_c) in enumerate(rows):
            level = {"level": "head", "head": head, "kv_head": head // (h // g)} if head < h else \
                {"level": "layer", "head": None, "kv_head": None}
            rec = {**base, **level, "layer": layer, "symmetry": sym, "directionality": dirs, "frobenius_norm": frob,
                   "n_outlier_rows": None if math.isnan(n_r) else int(n_r),
                   "n_outlier_cols": None if math.isnan(n_c) else int(n_c)}
            if extra:
                rec.update(extra[layer][head])
            out.append({c: _jsonable(rec.get(c)) for c in columns})
    return out


def _spectra_columns(layers: list) -> list[list[dict[str, float]]]:
    """Per layer, per head (then the layer form): {spectral column: value} of the host copies of the factors
    (the numbers of ``attnscope geometry --spectra`` on a checkpoint of the same weights); NaN where a head's
    (or, for the layer form, any head's) q or k is not finite, as the scores."""
    import numpy as np

    from attnscope.geometry.spectra import head_spectra, layer_spectra

    out = []
    for q, k in layers:
        q = q.float().cpu().numpy()  # [h, d, e]
        k = k.float().cpu().numpy()  # [g, d, e]
        h, g = q.shape[0], k.shape[0]
        bad_k = ~np.isfinite(k).reshape(g, -1).all(1)
        bad = ~np.isfinite(q).reshape(h, -1).all(1) | np.repeat(bad_k, h // g)  # [h]
        q = np.where(bad[:, None, None], np.float32(0), np.nan_to_num(q))
        k = np.where(bad_k[:, None, None], np.float32(0), np.nan_to_num(k))
        heads, lay = head_spectra(q, k).columns(), layer_spectra(q, k).columns()
        rows = [{c: float("nan") if bad[i] else float(v[i]) for c, v in heads.items()} for i in range(h)]
        rows.append({c: float("nan") if bad.any() else float(v[0]) for c, v in lay.items()})
        out.append(rows)
    return out


def geometry_offset_records(model, model_config, name: str, offsets: list[int]) -> list[dict[str, Any]]:
    """Score records (with ``offset``) of the live weights' rotary forms at ``offsets``: the numbers of
    ``attnscope geometry --offsets`` on a checkpoint of the same weights (same factors, same kernels, on the host)."""
    import numpy as np

    from attnscope.families.base import AttentionFactors, StackInfo
    from attnscope.families.rope import rotary_layout
    from attnscope.geometry.scoring import RECORD_COLUMNS, score_factors

    h, g, e, d = model_config.n_heads, model_config.n_kv_heads, model_config.d_head, model_config.d_model
    stack = "decoder" if model_config.causal else "encoder"
    info = StackInfo(stack, len(model.blocks), h, g, d, e)
    config = {"model_type": "attnscope", "pos": model_config.pos}
    base = {"model": name, "family": "attnscope"}
    out = []
    for layer, block in enumerate(model.blocks):
        wq = block.attn.q_weight()[0].detach().float().cpu().numpy()  # [h e, d]
        wk = block.attn.k_proj.weight.detach().float().cpu().numpy()  # [g e, d]
        factors = AttentionFactors(stack, layer, np.ascontiguousarray(wq.reshape(h, e, d).transpose(0, 2, 1)),
                                   np.ascontiguousarray(wk.reshape(g, e, d).transpose(0, 2, 1)))  # fmt: skip
        for rec in score_factors(factors, offsets=offsets, layout=rotary_layout(config, info, layer)):
            rec = {**base, **rec}
            out.append({c: _jsonable(rec.get(c)) for c in [*RECORD_COLUMNS, "offset"]})
    return out


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


#: the file a training run holds locked in its run directory
LOCK_NAME = ".lock"


@contextlib.contextmanager
def run_lock(run_dir: Path, main: bool = True) -> Iterator[None]:
    """Hold RUN_DIR/.lock while training, so a second run into the same directory at once is refused.

    A run directory created here is removed again if the run fails before writing anything into it.
    Only the main process of a torchrun job locks (its other ranks share the run).
    """
    if not main:
        yield
        return
    from attnscope.runs.store import StoreLock

    created = not run_dir.exists()
    with disk_errors(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / LOCK_NAME
    try:
        with StoreLock(lock):
            yield
    except BaseException:
        if created and [p.name for p in run_dir.iterdir()] == [LOCK_NAME]:
            lock.unlink(missing_ok=True)
            run_dir.rmdir()
        raise


class RunLog:
    """metrics.jsonl (always, main rank) plus W&B / TensorBoard when asked (imported lazily)."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, active: bool) -> None:
        self.active = active
        self.path = run_dir / "metrics.jsonl"
        self.wandb = self.tb = None
        if not active:
            return
        if cfg.wandb:
            try:
                import wandb
            except ImportError:
                raise InputError("wandb=True needs the optional 'wandb' package (pip install wandb)", params="wandb") from None
            self.wandb = wandb.init(project=cfg.wandb, config=asdict(cfg), dir=str(run_dir), resume="allow")
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise InputError("tensorboard=True needs the optional 'tensorboard' package", params="tensorboard") from None
            self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def logged_steps(self) -> set[int] | None:
        """The steps with an intact record in metrics.jsonl (None when there is no such file)."""
        if not self.path.is_file():
            return None
        steps = set()
        for raw in self.path.read_bytes().split(b"\n"):
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("step"), int):
                steps.add(rec["step"])
        return steps

    def rewind(self, step: int) -> None:
        """Keep the records up to ``step`` (a resumed run re-logs the rest).

        A torn last line (a crash or a full disk mid-write) is dropped; any other line that is not a
        record is a FormatError naming it.
        """
        if not self.active or not self.path.is_file():
            return
        from attnscope.tables import atomic_write_text

        lines = self.path.read_bytes().split(b"\n")
        keep = []
        for i, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                rec_step = rec["step"] if isinstance(rec, dict) else None
            except (ValueError, KeyError):
                rec_step = None
            if not isinstance(rec_step, int):
                if all(not rest.strip() for rest in lines[i:]):  # the last line: torn by a crash
                    break
                raise FormatError(f"{self.path} line {i} is not a metrics record; fix or delete that line to resume")
            if rec_step <= step:
                keep.append(raw.decode("utf-8", "replace") + "\n")
        with disk_errors(self.path):
            atomic_write_text(self.path, "".join(keep))

    def log(self, rec: dict[str, Any]) -> None:
        """Append one record (and mirror its scalars to W&B / TensorBoard)."""
        if not self.active:
            return
        line = (json.dumps(rec) + "\n").encode()
        with disk_errors(self.path), open(self.path, "ab", buffering=0) as fh:
            size = fh.seek(0, os.SEEK_END)
            try:
                done = 0
                while done < len(line):
                    done += fh.write(line[done:])
            except OSError:
                os.ftruncate(fh.fileno(), size)  # never leave half a line behind
                raise
        scalars = {k: v for k, v in rec.items() if isinstance(v, (int, float)) and k != "step"}
        for r in rec.get("geometry", ()):  # the layer scores go to W&B and TensorBoard alike
            if r.get("level") == "layer":
                scalars[f"symmetry/layer{r['layer']}"] = r["symmetry"]
                scalars[f"directionality/layer{r['layer']}"] = r["directionality"]
        if self.wandb is not None:
            self.wandb.log(scalars, step=rec["step"])
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k, v, rec["step"])

    def close(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()
        if self.tb is not None:
            self.tb.close()
