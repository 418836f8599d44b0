"""The training loop: configuration, checkpoints, resume, evaluation and geometry logging.

Owns :class:`TrainConfig` (one dataclass for every option of ``attnscope train``; YAML-loadable),
:func:`train` (AdamW, warmup then linear/cosine decay, gradient accumulation, clipping, optional bf16
autocast, DDP under ``torchrun``), the run directory layout and the checkpoint format:

    RUN_DIR/run.json                         the resolved configuration
    RUN_DIR/metrics.jsonl                    one JSON object per logged step (step, loss, lr, ...;
                                             ``geometry``: score records at step 0 and every K steps;
                                             eval_* keys at evaluation steps)
    RUN_DIR/summary.json                     final numbers and the geometry-logging overhead
    RUN_DIR/checkpoints/step-<N>/            model.safetensors + config.json (+ tokenizer.json)
                                             + trainer_state.pt (optimizer, RNG states as tensors)

A checkpoint directory is built under a temporary name and renamed into place, so a crash never
leaves a half-written ``step-<N>``. Resuming restores weights, optimizer moments, the data sampler's
and the dropout RNG's states and the logging accumulators, so a resumed run reaches the same weights
as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from attnscope.errors import ConfigError, FormatError, InputError

from .model import INITS, PRESETS

SCHEDULES = ("linear", "cosine", "constant")
MODEL_OVERRIDES = (
    "n_layers", "n_heads", "n_kv_heads", "d_model", "d_ff", "max_seq_len", "vocab_size",
    "dropout", "pos", "norm", "attn_pattern",
)
#: options that may differ between a run and its --resume (everything else must match)
RESUME_FREE = ("resume", "progress", "steps", "out", "wandb", "tensorboard", "config", "threads")
STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass
class TrainConfig:
    """Every option of a training run (CLI flags, YAML keys and Python keywords share these names)."""

    preset: str = "bert-mini"
    objective: str = "mlm"  # mlm | clm (clm makes the model causal)
    init: str = "default"  # default | symmetric | symmetric-paper
    tie_qk: bool = False  # keep W_q = W_k throughout training
    data: str = "builtin"
    tokenizer: str = "bytes"  # bytes | tokenizer.json | HF dir | wordpiece:N | bpe:N (trained on the corpus)
    steps: int = 1000
    batch_size: int = 16
    grad_accum: int = 1
    seq_len: int = 128
    lr: float = 5e-4
    weight_decay: float = 0.01
    warmup: int = 100
    schedule: str = "linear"
    clip: float = 1.0
    bf16: bool = False
    seed: int = 0
    mask_prob: float = 0.15
    score_every: int = 100
    checkpoint_every: int = 500
    eval_every: int | None = None  # default: checkpoint_every
    eval_windows: int = 64
    log_every: int = 10
    keep_checkpoints: int | None = None  # keep only the last N (None: all)
    out: str = "runs/run"
    resume: bool = False
    progress: bool = True
    device: str = "cpu"
    threads: int | None = None  # torch CPU threads (None: torch's default); 1 is best on a busy machine
    wandb: str | None = None  # a W&B project name
    tensorboard: bool = False
    # model overrides (None: the preset's value)
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    d_model: int | None = None
    d_ff: int | None = None
    max_seq_len: int | None = None
    vocab_size: int | None = None
    dropout: float | None = None
    pos: str | None = None
    norm: str | None = None
    attn_pattern: str | None = None

    def validate(self) -> "TrainConfig":
        from .objectives import check_objective

        if self.preset not in PRESETS:
            raise ConfigError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        check_objective(self.objective)
        if self.init not in INITS:
            raise ConfigError(f"unknown init {self.init!r}; choose one of {', '.join(INITS)}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        for name in ("steps", "batch_size", "grad_accum", "seq_len", "score_every", "checkpoint_every", "log_every",
                     "eval_windows"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)!r}")
        if self.lr <= 0 or self.warmup < 0 or self.clip < 0:
            raise ConfigError("lr must be positive; warmup and clip must not be negative")
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"mask_prob must be in (0, 1), not {self.mask_prob}")
        return self

    @classmethod
    def from_sources(cls, yaml_path: str | None = None, **options: Any) -> "TrainConfig":
        """Defaults < YAML file < explicit options (``None`` options count as not given)."""
        values: dict[str, Any] = {}
        if yaml_path:
            values.update(load_yaml(yaml_path))
        values.update({k: v for k, v in options.items() if v is not None})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"unknown training option(s): {', '.join(unknown)}")
        return cls(**values).validate()

    def model_config(self):
        """The ModelConfig this run trains (preset + overrides; causal iff clm; vocab set later)."""
        from .model import preset_config

        over = {k: getattr(self, k) for k in MODEL_OVERRIDES}
        over["causal"] = self.objective == "clm"
        over["tie_qk"] = self.tie_qk
        cfg = preset_config(self.preset, **over)
        if self.seq_len > cfg.max_seq_len:
            raise ConfigError(f"seq_len {self.seq_len} exceeds the model's max_seq_len {cfg.max_seq_len}")
        return cfg


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """The options of a YAML (or TOML / JSON) run config, keys with dashes as underscores."""
    from attnscope.tables import read_mapping

    data = read_mapping(path, "config file")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for update number ``step`` (1-based): linear warmup, then linear/cosine decay to 0."""
    if cfg.warmup and step <= cfg.warmup:
        return cfg.lr * step / cfg.warmup
    if cfg.schedule == "constant":
        return cfg.lr
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    frac = min(max(frac, 0.0), 1.0)
    if cfg.schedule == "linear":
        return cfg.lr * (1.0 - frac)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * frac))


# --------------------------------------------------------------------------- checkpoints


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, dir) of every complete checkpoint in a run directory, by step."""
    root = Path(run_dir) / "checkpoints"
    out = []
    if root.is_dir():
        for p in root.iterdir():
            m = STEP_DIR.match(p.name)
            if m and p.is_dir():
                out.append((int(m.group(1)), p))
    return sorted(out)


def write_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict[str, Any], extra: dict[str, Any]) -> Path:
    """Build ``checkpoints/step-<step>`` under a temporary name, fsync, then rename into place."""
    import torch

    from .model import save_model

    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        save_model(model, tmp, extra_config=extra)
        tokenizer.save(tmp)
        with open(tmp / "trainer_state.pt", "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():  # re-writing a step (a resumed run passing an old checkpoint): swap, then drop the old
        old = root / f".old-step-{step}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    return final


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_trainer_state(ckpt: Path) -> dict[str, Any]:
    import torch

    path = ckpt / "trainer_state.pt"
    if not path.is_file():
        raise FormatError(f"checkpoint {ckpt} is incomplete (no trainer_state.pt); delete it to resume from the previous one")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors of every kind: one line
        raise FormatError(
            f"checkpoint {ckpt} is corrupt ({type(exc).__name__}); delete it to resume from the previous one"
        ) from None


# --------------------------------------------------------------------------- geometry logging


def geometry_records(model, model_config, name: str) -> list[dict[str, Any]]:
    """Per-head and per-layer score records of the live weights.

    The same path as ``attnscope geometry CHECKPOINT``: the attnscope family spec reads q/k from the
    exported state dict and :func:`attnscope.geometry.score_factors` scores each layer (no table is
    built, which keeps logging cheap).
    """
    from attnscope.families import get_family
    from attnscope.geometry import score_factors
    from attnscope.geometry.score import RECORD_COLUMNS
    from attnscope.sources.base import DictSource

    from .model import export_state_dict, hf_config

    config = hf_config(model_config)
    source = DictSource(export_state_dict(model), config, name=name)
    family = get_family(config)
    out = []
    for factors in family.iter_factors(source):
        for rec in score_factors(factors):
            rec = {"model": name, "family": family.name, **rec}
            out.append({c: _jsonable(rec.get(c)) for c in RECORD_COLUMNS})
    return out


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


# --------------------------------------------------------------------------- distributed


@dataclass
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str) -> Dist:
    """DDP under torchrun (gloo on CPU, nccl on CUDA); a single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if str(device).startswith("cuda") else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size())


def _gather_rng(d: Dist):
    """Every rank's torch RNG state stacked [world, n] (ranks drop out differently)."""
    import torch

    mine = torch.get_rng_state()
    if d.world == 1:
        return mine[None]
    import torch.distributed as dist

    out = [None] * d.world
    dist.all_gather_object(out, mine)
    return torch.stack(out)


# --------------------------------------------------------------------------- the loop


class _Loggers:
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
                raise InputError("--wandb needs the optional 'wandb' package (pip install wandb)") from None
            self.wandb = wandb.init(project=cfg.wandb, config=asdict(cfg), dir=str(run_dir), resume="allow")
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise InputError("--tensorboard needs the optional 'tensorboard' package") from None
            self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def truncate_after(self, step: int) -> None:
        """Drop lines logged after ``step`` (a resumed run re-logs them)."""
        if not self.active or not self.path.is_file():
            return
        from attnscope.tables import atomic_write_text

        keep = [ln for ln in self.path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
        atomic_write_text(self.path, "".join(ln + "\n" for ln in keep))

    def log(self, rec: dict[str, Any]) -> None:
        if not self.active:
            return
        with open(self.path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
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


def _prepare_tokenizer(cfg: TrainConfig, corpus, run_dir: Path, resume: bool):
    """Load the tokenizer, or train one on the corpus (saved in RUN_DIR so a resume reuses it)."""
    from .tokenizers import load_tokenizer, parse_train_spec, train_tokenizer

    trained = parse_train_spec(cfg.tokenizer)
    if trained is None:
        return load_tokenizer(cfg.tokenizer)
    saved = run_dir / "tokenizer.json"
    if resume and saved.is_file():
        tok = load_tokenizer(saved)
    else:
        text = corpus.text("train")
        tok = train_tokenizer((text[i : i + 100_000] for i in range(0, len(text), 100_000)), *trained)
        tok.save(run_dir)
    tok.name = cfg.tokenizer
    return tok


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run (or resume) one training run; returns the summary (also written to RUN_DIR/summary.json)."""
    import numpy as np
    import torch

    from attnscope.tables import atomic_write_json

    from .data import heldout_windows, open_corpus, sample_windows, tokenize_split
    from .model import Transformer, import_state_dict, init_weights
    from .objectives import IGNORE, make_batch, model_loss, window_length

    cfg.validate()
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    dist_info = init_distributed(cfg.device)
    run_dir = Path(cfg.out)
    existing = list_checkpoints(run_dir)
    if not cfg.resume and (existing or (run_dir / "metrics.jsonl").exists()):
        raise InputError(f"{run_dir} already holds a run; add --resume to continue it or choose a new --out")
    if cfg.resume and (run_dir / "run.json").is_file():
        _check_same_run(cfg, json.loads((run_dir / "run.json").read_text()))
    mcfg = cfg.model_config()  # config errors before any data is read
    corpus = open_corpus(cfg.data)
    if dist_info.main:
        run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = _prepare_tokenizer(cfg, corpus, run_dir, cfg.resume)
    mask_id = tokenizer.mask_id
    needed = tokenizer.vocab_size
    if cfg.objective == "mlm" and mask_id is None:  # bytes: one extra id serves as [MASK]
        mask_id, needed = tokenizer.vocab_size, tokenizer.vocab_size + 1
    if mcfg.vocab_size is None:
        mcfg.vocab_size = needed
    elif mcfg.vocab_size < needed:
        raise ConfigError(
            f"tokenizer {tokenizer.name!r} needs {needed} token ids but the model's vocab_size is {mcfg.vocab_size}"
        )
    train_ids = tokenize_split(corpus, tokenizer, "train")
    wlen = window_length(cfg.objective, cfg.seq_len)
    if len(train_ids) < wlen + 1:
        raise InputError(f"corpus {corpus.name!r} is too small: {len(train_ids)} training tokens for windows of {wlen}")

    # eval set: fixed held-out windows and (mlm) fixed masks
    n_eval = min(cfg.eval_windows, len(tokenize_split(corpus, tokenizer, "valid")) // wlen)
    eval_batches: list[tuple[torch.Tensor, torch.Tensor]] = []
    bytes_per_token = len(corpus.split("valid")) / max(1, len(tokenize_split(corpus, tokenizer, "valid")))
    if n_eval > 0:
        ev = heldout_windows(corpus, tokenizer, wlen, n_eval, "valid")
        g_eval = torch.Generator().manual_seed(cfg.seed + 7919)
        for i in range(0, n_eval, cfg.batch_size):
            eval_batches.append(make_batch(cfg.objective, ev[i : i + cfg.batch_size], mask_id, tokenizer.vocab_size,
                                           g_eval, cfg.mask_prob))

    # model, identical on every rank
    torch.manual_seed(cfg.seed)
    model = Transformer(mcfg)
    init_weights(model, cfg.init, generator=torch.Generator().manual_seed(cfg.seed))
    model.to(cfg.device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8,
    )
    data_gen = torch.Generator().manual_seed(cfg.seed + 1)  # same on every rank: the global batch
    torch.manual_seed(cfg.seed + 1000 * (dist_info.rank + 1))  # dropout stream, per rank

    step = 0
    acc = {"loss_sum": 0.0, "loss_n": 0, "tokens": 0, "train_seconds": 0.0, "geometry_seconds": 0.0,
           "checkpoint_seconds": 0.0, "eval_seconds": 0.0}
    logger = _Loggers(cfg, run_dir, dist_info.main)
    if cfg.resume and existing:
        step, ckpt = existing[-1]
        state = read_trainer_state(ckpt)
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            import_state_dict(model, load_file(str(ckpt / "model.safetensors")))
            opt.load_state_dict(state["optimizer"])
            data_gen.set_state(state["rng_data"])
            rng = state["rng_torch"]
            torch.set_rng_state(rng[dist_info.rank] if rng.shape[0] == dist_info.world else rng[0])
        except (SafetensorError, OSError, KeyError, ValueError, RuntimeError) as exc:
            raise FormatError(
                f"checkpoint {ckpt} is corrupt ({type(exc).__name__}); delete it to resume from the previous one"
            ) from None
        acc.update({k: float(v) for k, v in state["accumulators"].items()})
        acc["loss_n"], acc["tokens"] = int(acc["loss_n"]), int(acc["tokens"])
        logger.truncate_after(step)
    elif cfg.resume and dist_info.main:
        logger.truncate_after(-1)
    if dist_info.main:
        atomic_write_json(run_dir / "run.json", {**asdict(cfg), "model": mcfg.to_dict(), "world_size": dist_info.world})

    ddp_model = model
    if dist_info.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp_model = DistributedDataParallel(model)
    name = run_dir.name
    extra = {"tokenizer": tokenizer.name, "objective": cfg.objective, "init": cfg.init, "run": name}

    def evaluate() -> dict[str, float]:
        if not eval_batches:
            return {}
        model.eval()
        nats, count = 0.0, 0
        with torch.no_grad(), _autocast(cfg):
            for inputs, labels in eval_batches:
                n = int((labels != IGNORE).sum())
                nats += float(model_loss(model, inputs.to(cfg.device), labels.to(cfg.device))) * n
                count += n
        model.train()
        loss = nats / max(count, 1)
        bpt = loss / math.log(2)
        return {"eval_loss": loss, "eval_ppl": math.exp(min(loss, 50.0)), "eval_bits_per_token": bpt,
                "eval_bits_per_byte": bpt / bytes_per_token}

    def log_geometry(rec: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        rec["geometry"] = geometry_records(model, mcfg, name)
        acc["geometry_seconds"] += time.perf_counter() - t0

    def checkpoint() -> None:
        t0 = time.perf_counter()
        rng_all = _gather_rng(dist_info)
        if dist_info.main:
            state = {
                "step": step,
                "optimizer": opt.state_dict(),
                "rng_data": data_gen.get_state(),
                "rng_torch": rng_all,
                "accumulators": {k: torch.tensor(float(v), dtype=torch.float64) for k, v in acc.items()},
            }
            write_checkpoint(run_dir, step, model, tokenizer, state, {**extra, "step": step})
            if cfg.keep_checkpoints:
                for _, old in list_checkpoints(run_dir)[: -cfg.keep_checkpoints]:
                    shutil.rmtree(old, ignore_errors=True)
        acc["checkpoint_seconds"] += time.perf_counter() - t0

    model.train()
    if step == 0 and dist_info.main:  # step 0: before any update
        rec: dict[str, Any] = {"step": 0}
        with torch.no_grad(), _autocast(cfg):
            model.eval()
            probe_gen = torch.Generator().manual_seed(cfg.seed + 2)
            w = sample_windows(train_ids, cfg.batch_size, wlen, probe_gen)
            inputs, labels = make_batch(cfg.objective, w, mask_id, tokenizer.vocab_size, probe_gen, cfg.mask_prob)
            rec["loss"] = float(model_loss(model, inputs.to(cfg.device), labels.to(cfg.device)))
            model.train()
        rec["lr"] = 0.0
        log_geometry(rec)
        rec.update(evaluate())
        logger.log(rec)

    from attnscope.progress import progress as progress_bar

    bar_cm = progress_bar(cfg.steps, cfg.out, enabled=cfg.progress and dist_info.main, start=step,
                          transient=False, fields={"loss": "-"})
    bar = bar_cm.__enter__()
    delay = float(os.environ.get("ATTNSCOPE_STEP_DELAY", "0") or 0)  # test/debug knob: slow each step down
    b, r = cfg.batch_size, dist_info.rank
    try:
        while step < cfg.steps:
            t0 = time.perf_counter()
            lr = lr_at(step + 1, cfg)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            for micro in range(cfg.grad_accum):
                w = sample_windows(train_ids, b * dist_info.world, wlen, data_gen)
                inputs, labels = make_batch(cfg.objective, w, mask_id, tokenizer.vocab_size, data_gen, cfg.mask_prob)
                inputs, labels = inputs[r * b : (r + 1) * b].to(cfg.device), labels[r * b : (r + 1) * b].to(cfg.device)
                sync = micro == cfg.grad_accum - 1 or dist_info.world == 1
                ctx = ddp_model.no_sync() if not sync else _nullcontext()
                with ctx, _autocast(cfg):
                    loss = model_loss(ddp_model, inputs, labels) / cfg.grad_accum
                    loss.backward()
                step_loss += float(loss.detach())
            if cfg.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            step += 1
            if dist_info.world > 1:
                step_loss = _mean_across(step_loss)
            acc["loss_sum"] += step_loss
            acc["loss_n"] += 1
            acc["tokens"] += b * cfg.seq_len * cfg.grad_accum * dist_info.world
            acc["train_seconds"] += time.perf_counter() - t0
            if delay:
                time.sleep(delay)

            scored = step % cfg.score_every == 0 or step == cfg.steps
            evald = step % (cfg.eval_every or cfg.checkpoint_every) == 0 or step == cfg.steps
            if dist_info.main and (step % cfg.log_every == 0 or scored or evald):
                rec = {"step": step, "loss": acc["loss_sum"] / max(acc["loss_n"], 1), "lr": lr,
                       "tokens": int(acc["tokens"])}
                acc["loss_sum"], acc["loss_n"] = 0.0, 0
                if scored:
                    log_geometry(rec)
                if evald:
                    t1 = time.perf_counter()
                    rec.update(evaluate())
                    acc["eval_seconds"] += time.perf_counter() - t1
                rec.update({k: round(acc[k], 4) for k in ("train_seconds", "geometry_seconds")})
                logger.log(rec)
                bar.update(completed=step, loss=f"{rec['loss']:.4f}")
            else:
                bar.update(completed=step)
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                checkpoint()
    finally:
        bar_cm.__exit__(None, None, None)
        logger.close()

    summary = {
        "run": name, "steps": step, "objective": cfg.objective, "init": cfg.init,
        "params": model.num_params(), "tokens": int(acc["tokens"]),
        "train_seconds": acc["train_seconds"], "geometry_seconds": acc["geometry_seconds"],
        "geometry_overhead": acc["geometry_seconds"] / max(acc["train_seconds"], 1e-9),
        "tokens_per_second": acc["tokens"] / max(acc["train_seconds"], 1e-9),
        "world_size": dist_info.world, **evaluate(),
    }
    if dist_info.main:
        atomic_write_json(run_dir / "summary.json", summary)
    return summary


def _check_same_run(cfg: TrainConfig, stored: dict[str, Any]) -> None:
    diff = [k for k in asdict(cfg) if k not in RESUME_FREE and k in stored and stored[k] != getattr(cfg, k)]
    if diff:
        k = diff[0]
        raise ConfigError(f"--resume with different settings: {k} was {stored[k]!r}, now {getattr(cfg, k)!r}")


def _mean_across(x: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t) / dist.get_world_size()


def _autocast(cfg: TrainConfig):
    import torch

    if not cfg.bf16:
        return _nullcontext()
    return torch.autocast(device_type="cuda" if str(cfg.device).startswith("cuda") else "cpu", dtype=torch.bfloat16)


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
