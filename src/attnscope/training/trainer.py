"""The training loop: :func:`train` runs (or resumes) one run, nanoGPT-style, and returns its summary.

AdamW, warmup then linear/cosine decay (:func:`.config.lr_at`), gradient accumulation, clipping,
optional bf16 autocast and torch.compile, DDP under ``torchrun`` (:mod:`.distributed`). Geometry scores, evaluations and
the training loss go to metrics.jsonl (:mod:`.runlog`); checkpoints are written atomically
(:mod:`.checkpoints`). Resuming restores weights, optimizer moments, the data sampler's and the
dropout RNG's states and the running totals, so a resumed run reaches the same weights as an
uninterrupted one.

On CUDA a step does not wait for the GPU: batches are drawn and masked on the host and copied from
pinned memory without blocking (the masked positions travel as indices, so no step asks the device
for a count), AdamW is fused, and the training loss is summed on the device and read at log steps.
A non-finite loss never reaches the weights, on any device, through one mechanism (:class:`Guard`):
the fused AdamW skips the update of a step whose loss is not finite (its ``found_inf`` input), and a
device-side record of the first such step stops the run when it is read: every step on CPU (where
reading is free), at log and checkpoint steps on CUDA. Nothing is saved after that step, so the last
checkpoint stays good.

The pieces used to live here; ``TrainConfig``, ``lr_at``, ``list_checkpoints`` and
``geometry_records`` are still importable from this module.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from attnscope.errors import ConfigError, FormatError, InputError, check_type, warn
from attnscope.progress import phase, progress, quiet
from attnscope.tables import atomic_write_json
from attnscope.threads import set_threads

from .checkpoints import (
    clean_leftovers,
    disk_errors,
    list_checkpoints,
    load_checkpoint,
    write_checkpoint,
)
from .config import TrainConfig, check_same_pattern, check_same_run, lr_at
from .data import heldout_windows, open_corpus, sample_windows, tokenize_split
from .distributed import Dist, check_device, gather_rng, init_distributed, mean_across
from .model import Transformer, init_weights
from .objectives import IGNORE, lm_loss, make_batch, model_loss, window_length
from .runlog import RunLog, check_out_dir, check_run_files, geometry_offset_records, geometry_records, read_run_json, run_lock

__all__ = ["TrainConfig", "train", "lr_at", "list_checkpoints", "geometry_records"]


@dataclass
class Totals:
    """Running sums a run carries across checkpoints (saved in trainer_state.pt as "accumulators")."""

    loss_sum: float = 0.0  # training loss summed since the last logged step
    loss_n: int = 0  # updates in that sum
    tokens: int = 0  # tokens trained on, all ranks
    train_seconds: float = 0.0
    geometry_seconds: float = 0.0

    def state(self) -> dict[str, torch.Tensor]:
        return {f.name: torch.tensor(float(getattr(self, f.name)), dtype=torch.float64) for f in fields(self)}

    @classmethod
    def from_state(cls, saved: dict[str, float]) -> "Totals":
        return cls(**{f.name: (int if f.type == "int" else float)(saved[f.name]) for f in fields(cls)})


@dataclass
class Batches:
    """Training batches: every rank draws the same global batch from one generator and keeps its slice."""

    ids: Any  # the tokenized training split
    cfg: TrainConfig
    window: int  # tokens drawn per example
    mask_id: int | None
    vocab: int  # the tokenizer's ids (random replacement tokens are drawn from these)
    dist: Dist
    gen: torch.Generator

    def next(self) -> "Batch":
        b, r = self.cfg.batch_size, self.dist.rank
        w = sample_windows(self.ids, b * self.dist.world, self.window, self.gen)
        inputs, labels = make_batch(self.cfg.objective, w, self.mask_id, self.vocab, self.gen, self.cfg.mask_prob)
        return Batch.on(inputs[r * b : (r + 1) * b], labels[r * b : (r + 1) * b], torch.device(self.cfg.device))

    def probe(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed batch (its own generator, on the host) for the loss at step 0 and the --compile probe."""
        gen = torch.Generator().manual_seed(self.cfg.seed + 2)
        w = sample_windows(self.ids, self.cfg.batch_size, self.window, gen)
        return make_batch(self.cfg.objective, w, self.mask_id, self.vocab, gen, self.cfg.mask_prob)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device``: on CUDA through pinned memory without blocking the host."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass
class Batch:
    """One micro-batch on the device, its labelled positions worked out on the host."""

    inputs: torch.Tensor  # [b, t]
    select: torch.Tensor | None  # int64 [n] labelled positions in the flattened b*t; None: all labelled
    targets: torch.Tensor  # [n] (or [b, t] when select is None)
    labelled: bool  # any position to predict (an mlm batch may have none: nan loss, zero gradient)

    @classmethod
    def on(cls, inputs: torch.Tensor, labels: torch.Tensor, device: torch.device) -> "Batch":
        """inputs, labels [b, t] on the host -> a Batch on ``device`` (pinned, non-blocking copies on CUDA)."""
        sel = labels != IGNORE  # [b, t]
        labelled = bool(sel.any())
        select = None if bool(sel.all()) else sel.flatten().nonzero().squeeze(1)  # [n]
        targets = labels if select is None else labels.flatten()[select]
        return cls(to_device(inputs, device), None if select is None else to_device(select, device),
                   to_device(targets, device), labelled)

    def loss(self, model) -> torch.Tensor:
        """:func:`.objectives.model_loss` of this batch, without asking the device anything."""
        return lm_loss(model(self.inputs) if self.select is None else model(self.inputs, select=self.select),
                       self.targets)


class Guard:
    """Device-side bookkeeping of the training loss: its sum since the last read, the first non-finite step.

    :meth:`record` runs every step and never synchronises; it returns the step's flag, which the fused
    AdamW takes as ``found_inf`` (that update is skipped). :meth:`read` (one small transfer) stops the
    run if a non-finite loss was recorded and returns the loss sum; the trainer calls it every step
    where ``every_step`` (CPU, or an optimizer that cannot skip) and at log / checkpoint steps otherwise.
    """

    def __init__(self, device: torch.device, can_skip: bool) -> None:
        self.every_step = device.type != "cuda" or not can_skip
        acc = torch.float32 if device.type == "mps" else torch.float64
        self.sum = torch.zeros((), dtype=acc, device=device)
        self.first = torch.zeros((), dtype=acc, device=device)  # first non-finite step (0: none)
        self.value = torch.zeros((), dtype=acc, device=device)  # its loss

    def record(self, step: int, loss: torch.Tensor, counted: bool) -> torch.Tensor:
        """Note update ``step``'s loss (a 0-dim tensor); ``counted``: add it to the sum. -> float flag, 1 if non-finite."""
        bad = ~torch.isfinite(loss)
        new = bad & (self.first == 0)
        self.first = torch.where(new, step, self.first)
        self.value = torch.where(new, loss.to(self.value.dtype), self.value)
        if counted:
            self.sum += loss.to(self.sum.dtype)
        return bad.float()

    def read(self, run_dir: Path) -> float:
        """The loss sum since the last read (then reset); the one-line stop if a loss was not finite."""
        first, value, total = torch.stack([self.first, self.value, self.sum]).tolist()
        if first:
            raise _diverged(int(first), value, run_dir)
        self.sum.zero_()
        return total


def check_bf16(cfg: TrainConfig) -> None:
    """ConfigError (one line) for --bf16 on a CUDA device without bf16 support."""
    dev = torch.device(cfg.device)
    if cfg.bf16 and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"bf16=True asked for, but {torch.cuda.get_device_name(dev)} has no bf16 support; "
                          "run without it", params="bf16")


def compiled(model: torch.nn.Module, cfg: TrainConfig, probe: Batch) -> torch.nn.Module:
    """``model`` itself, or torch.compile(model) when :meth:`TrainConfig.compile_choice` says so, compiled now on
    ``probe`` (forward and backward, RNG states kept) so that a failure shows before training starts: one
    line and exit with ``--compile``; one warning and the eager model when compiling was only the default."""
    on, _ = cfg.compile_choice()
    if not on:
        return model
    asked = cfg.compile is True
    if not hasattr(torch, "compile"):
        if not asked:
            return model
        raise ConfigError(f"compile=True needs torch.compile, which torch {torch.__version__} lacks", params="compile")
    dev = torch.device(cfg.device)
    try:
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []), _autocast(cfg):
            if cfg.attn_pattern is not None:  # one eager step first: the attention keeps its FlexAttention
                probe.loss(model).backward()  # plan, so the compiled model traces without graph breaks
            fast = torch.compile(model)
            probe.loss(fast).backward()
    except Exception as exc:  # dynamo / inductor raise many types (no C++ compiler, unsupported op, ...)
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        if not asked:
            warn(f"torch.compile (on by default on CUDA) failed ({type(exc).__name__}: {first}); training goes on "
                 "without it (--no-compile skips the attempt)", params="compile")
            return model
        raise ConfigError(f"compile=True failed ({type(exc).__name__}: {first}); run without it",
                          params="compile") from None
    finally:
        model.zero_grad(set_to_none=True)
    return fast


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run (or resume) one training run; returns the summary (also written to RUN_DIR/summary.json).

    The run holds RUN_DIR/.lock while it trains: a second run into the same directory at once is
    refused with one line.
    """
    check_type(cfg, TrainConfig, "cfg", "a TrainConfig (e.g. TrainConfig(steps=5, out='runs/a'))")
    cfg.validate()
    check_device(cfg.device)
    check_bf16(cfg)
    check_out_dir(cfg.out)  # all before any work
    check_run_files(cfg.out)  # a file of yours by a name the run writes: refused
    with run_lock(Path(cfg.out), main=int(os.environ.get("RANK", "0") or 0) == 0):
        return _train(cfg)


@dataclass
class _Run:
    """What one run carries through its loop: built by :func:`_open_run`, advanced by :func:`_train_step`."""

    cfg: TrainConfig
    dist: Dist
    run_dir: Path
    mcfg: Any  # the model's ModelConfig
    tokenizer: Any
    eval_batches: list
    bytes_per_token: float
    model: Transformer
    opt: torch.optim.AdamW
    batches: Batches
    log: RunLog
    ddp_model: Any  # the model, wrapped for DDP when world > 1
    run_model: Any  # what computes the loss: ddp_model, compiled with --compile
    guard: Guard
    step: int = 0  # updates done
    totals: Totals = field(default_factory=Totals)

    @property
    def name(self) -> str:
        return self.run_dir.name

    def evaluate(self) -> dict[str, float]:
        return evaluate(self.model, self.eval_batches, self.cfg, self.bytes_per_token)


def _train(cfg: TrainConfig) -> dict[str, Any]:
    set_threads(cfg.threads)  # None: what the user set before, ATTNSCOPE_THREADS or the default rule
    run = _open_run(cfg)
    run.model.train()
    try:
        if run.step == 0 and run.dist.main:  # before any update
            with phase(f"train {run.name}: step 0 (held-out loss and geometry of the untrained model)",
                       enabled=cfg.progress and not quiet()):
                _log_start(run)
        with progress(cfg.steps, cfg.out, enabled=cfg.progress and run.dist.main, start=run.step, transient=False,
                      fields={"loss": "-"}) as bar:
            while run.step < cfg.steps:
                _train_step(run, bar)
    finally:
        run.log.close()
    return _finish(run)


def _prepare_data(cfg: TrainConfig, mcfg, run_dir: Path, dist: Dist) -> tuple:
    """(tokenizer, mask_id, window, train_ids, eval_batches, bytes_per_token); every input check of the data."""
    corpus = open_corpus(cfg.data)
    if dist.main:
        with disk_errors(run_dir):
            run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = _prepare_tokenizer(cfg, corpus, run_dir)
    mask_id = _fit_vocab(cfg, tokenizer, mcfg)
    window = window_length(cfg.objective, cfg.seq_len)
    train_ids = tokenize_split(corpus, tokenizer, "train")
    if len(train_ids) < window + 1:
        raise InputError(f"corpus {corpus.name!r} is too small: {len(train_ids)} training tokens for windows of {window}")
    eval_batches, bytes_per_token = _eval_set(cfg, corpus, tokenizer, window, mask_id)
    if cfg.warmup >= cfg.steps and dist.main and not cfg.resume:  # said once, after every input check
        warn(f"warmup={cfg.warmup} is not below steps={cfg.steps}: the learning rate never reaches "
             f"lr={cfg.lr:g} (set warmup below steps)", params=("warmup", "steps", "lr"))
    return tokenizer, mask_id, window, train_ids, eval_batches, bytes_per_token


def _open_run(cfg: TrainConfig) -> _Run:
    """Data, model, optimizer and batches of a run, resumed from its last checkpoint with --resume; writes
    run.json; wraps the model for DDP and --compile."""
    dist = init_distributed(cfg.device)
    run_dir = Path(cfg.out)
    existing = _checkpoints_to_resume(cfg, run_dir, dist)
    mcfg = cfg.model_config()  # config errors before any data is read
    with phase(f"train {run_dir.name}: reading and tokenising the data", enabled=dist.main and cfg.progress and not quiet()):
        tokenizer, mask_id, window, train_ids, eval_batches, bytes_per_token = _prepare_data(cfg, mcfg, run_dir, dist)

    torch.manual_seed(cfg.seed)  # the model, identical on every rank
    model = Transformer(mcfg)
    init_weights(model, cfg.init, generator=torch.Generator().manual_seed(cfg.seed))
    model.to(cfg.device)
    opt = _optimizer(model, cfg)
    batches = Batches(train_ids, cfg, window, mask_id, tokenizer.vocab_size, dist,
                      torch.Generator().manual_seed(cfg.seed + 1))
    torch.manual_seed(cfg.seed + 1000 * (dist.rank + 1))  # the dropout stream, per rank

    log = RunLog(cfg, run_dir, dist.main)
    step, totals = _resume(cfg, existing, model, opt, batches, dist, log) if cfg.resume else (0, Totals())
    if dist.main:
        with disk_errors(run_dir / "run.json"):
            atomic_write_json(run_dir / "run.json", {**asdict(cfg), "model": mcfg.to_dict(), "world_size": dist.world})
    ddp_model: Any = model
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp_model = DistributedDataParallel(model)
    on, why = cfg.compile_choice()
    left = step < cfg.steps  # a resume with nothing left to train compiles nothing (minutes for a large model)
    shown = left and dist.main and cfg.progress and not quiet()  # ATTNSCOPE_QUIET=1: silent, as --no-progress
    if shown and (on or cfg.device.startswith("cuda")):  # one line: compiled or not, and why
        from attnscope.progress import stderr_console

        stderr_console().print(why, highlight=False)
    # compiling takes from seconds to minutes: shown as it runs, from its first second
    with phase(f"train {run_dir.name}: compiling the model on one batch", enabled=shown and on):
        run_model = compiled(ddp_model, cfg, Batch.on(*batches.probe(), torch.device(cfg.device))) if left else ddp_model
    guard = Guard(torch.device(cfg.device), can_skip=_fused(opt))
    return _Run(cfg, dist, run_dir, mcfg, tokenizer, eval_batches, bytes_per_token, model, opt, batches, log,
                ddp_model, run_model, guard, step, totals)


def _resume(cfg: TrainConfig, existing: list[tuple[int, Path]], model: Transformer, opt: torch.optim.AdamW,
            batches: Batches, dist: Dist, log: RunLog) -> tuple[int, Totals]:
    """(step, totals) of the newest resumable checkpoint, loaded into the model, optimizer and sampler;
    metrics.jsonl rewound to it ((0, fresh totals) and rewound to nothing if there is none)."""
    existing = _resumable(existing, log)
    step, totals = 0, Totals()
    if existing:
        step, ckpt = existing[-1]
        if step > cfg.steps:
            raise InputError(f"{Path(cfg.out)} has already trained up to step {step}; steps={cfg.steps} would go back "
                             f"(give steps above {step} to continue it)", params="steps")
        saved = load_checkpoint(ckpt, model, opt, batches.gen, dist.rank, dist.world)
        _fuse(opt, model)  # a checkpoint's optimizer settings replace ours: keep the fused kernel
        try:
            totals = Totals.from_state(saved)
        except KeyError as exc:
            raise FormatError(f"checkpoint {ckpt} is corrupt (no running total {exc}); delete it to resume "
                              "from the previous one") from None
    log.rewind(step if existing else -1)
    return step, totals


def _log_start(run: _Run) -> None:
    """The step-0 record: the probe batch's loss, scores and an evaluation of the untrained model."""
    inputs, labels = run.batches.probe()  # an mlm probe may select no position: no loss (null), not NaN
    probe_loss = _loss(run.model, inputs, labels, run.cfg) if bool((labels != IGNORE).any()) else None
    rec = {"step": 0, "loss": probe_loss, "lr": 0.0}
    run.totals.geometry_seconds += _log_geometry(rec, run.model, run.mcfg, run.name, run.cfg.offsets(),
                                                    run.cfg.score_spectra)
    run.log.log({**rec, **run.evaluate(), "train_seconds": 0.0,
                 "geometry_seconds": round(run.totals.geometry_seconds, 4)})


def _train_step(run: _Run, bar) -> None:
    """One update, then what falls on its step: the logged record, the progress bar, a checkpoint."""
    cfg, t0 = run.cfg, time.perf_counter()
    nxt = run.step + 1
    scored = nxt % cfg.score_every == 0 or nxt == cfg.steps
    evaluated = nxt % (cfg.eval_every or cfg.checkpoint_every) == 0 or nxt == cfg.steps
    logged = nxt % cfg.log_every == 0 or scored or evaluated
    saved = nxt % cfg.checkpoint_every == 0 or nxt == cfg.steps
    lr = lr_at(nxt, cfg)
    _update(run, nxt, lr, read=logged or saved)
    run.totals.tokens += cfg.batch_size * cfg.seq_len * cfg.grad_accum * run.dist.world
    run.totals.train_seconds += time.perf_counter() - t0
    if run.dist.main and logged:
        _log_step(run, lr, scored, evaluated, bar)
    else:
        bar.update(completed=run.step)
    if saved:
        extra = {"tokenizer": run.tokenizer.name, "objective": cfg.objective, "init": cfg.init, "run": run.name}
        _save(run.run_dir, run.step, run.model, run.tokenizer, run.opt, run.batches.gen, run.totals, run.dist, cfg,
              extra)


def _accumulate(run: _Run) -> tuple[torch.Tensor, int]:
    """Forward and backward over the micro-batches of one update -> (the update's mean loss, a 0-dim tensor
    on the device; how many micro-batches had a labelled position)."""
    cfg = run.cfg
    step_loss, labelled = torch.zeros((), device=cfg.device), 0
    for micro in range(cfg.grad_accum):
        batch = run.batches.next()
        last = micro == cfg.grad_accum - 1
        with (nullcontext() if last or run.ddp_model is run.model else run.ddp_model.no_sync()), _autocast(cfg):
            loss = batch.loss(run.run_model) / cfg.grad_accum
            loss.backward()
        if batch.labelled:  # else: a nan loss with zero gradient, left out
            step_loss = step_loss + loss.detach().float()
            labelled += 1
    if 0 < labelled < cfg.grad_accum:
        step_loss = step_loss * (cfg.grad_accum / labelled)
    return step_loss, labelled


def _update(run: _Run, nxt: int, lr: float, read: bool) -> None:
    """Update ``nxt``: gradients, the guard's record (a non-finite loss skips the update and stops the run
    when read), clipping, the optimizer step. ``read``: a log or checkpoint step, where the guard is read."""
    cfg, opt, guard, totals = run.cfg, run.opt, run.guard, run.totals
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    step_loss, labelled = _accumulate(run)
    step_loss = mean_across(step_loss, run.dist)
    counted = bool(labelled or run.dist.world > 1)
    skip = guard.record(nxt, step_loss, counted)
    if guard.every_step:
        totals.loss_sum += guard.read(run.run_dir)  # stops here, before the update
    if cfg.clip:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.clip)
    if _fused(opt):
        opt.found_inf = skip  # the fused kernel skips this update when the loss was not finite
    opt.step()
    run.step = nxt
    totals.loss_n += counted
    if not guard.every_step and read:
        totals.loss_sum += guard.read(run.run_dir)


def _log_step(run: _Run, lr: float, scored: bool, evaluated: bool, bar) -> None:
    """The record of a logged step: mean training loss since the last one, scores, evaluation, timings."""
    totals = run.totals
    loss = totals.loss_sum / totals.loss_n if totals.loss_n else None  # None: nothing labelled
    rec = {"step": run.step, "loss": loss, "lr": lr, "tokens": totals.tokens}
    totals.loss_sum, totals.loss_n = 0.0, 0
    if scored:
        totals.geometry_seconds += _log_geometry(rec, run.model, run.mcfg, run.name, run.cfg.offsets(),
                                                    run.cfg.score_spectra)
    if evaluated:
        rec.update(run.evaluate())
    rec.update(train_seconds=round(totals.train_seconds, 4), geometry_seconds=round(totals.geometry_seconds, 4))
    run.log.log(rec)
    bar.update(completed=run.step, loss="-" if loss is None else f"{loss:.4f}")


def _finish(run: _Run) -> dict[str, Any]:
    """The run's summary (final held-out numbers, tokens/s, geometry overhead), written to summary.json."""
    totals = run.totals
    summary = {
        "run": run.name, "steps": run.step, "objective": run.cfg.objective, "init": run.cfg.init,
        "params": run.model.num_params(), "tokens": totals.tokens,
        "train_seconds": totals.train_seconds, "geometry_seconds": totals.geometry_seconds,
        "geometry_overhead": totals.geometry_seconds / max(totals.train_seconds, 1e-9),
        "tokens_per_second": totals.tokens / max(totals.train_seconds, 1e-9),
        "world_size": run.dist.world, "compiled": run.run_model is not run.ddp_model, **run.evaluate(),
    }
    if run.dist.main:
        with disk_errors(run.run_dir / "summary.json"):
            atomic_write_json(run.run_dir / "summary.json", summary)
    return summary


# --------------------------------------------------------------------------- the pieces of a run


def _resumable(existing: list[tuple[int, Path]], log: RunLog) -> list[tuple[int, Path]]:
    """The checkpoints a resume may start from: those whose metrics record survived (a crash can tear
    the very line logged at the last checkpoint; resuming from an earlier one re-logs it exactly)."""
    logged = log.logged_steps()
    if logged is None:  # no metrics file: nothing to lose
        return existing
    last = max(logged, default=-1)
    return [(s, p) for s, p in existing if s <= last]


def _checkpoints_to_resume(cfg: TrainConfig, run_dir: Path, dist: Dist) -> list[tuple[int, Path]]:
    """The run's checkpoints; an error if --out holds a run and --resume is missing, or holds another run."""
    if cfg.resume and dist.main:
        clean_leftovers(run_dir)  # a kill mid-checkpoint
    existing = list_checkpoints(run_dir)
    if not cfg.resume and (existing or (run_dir / "metrics.jsonl").exists()):
        raise InputError(f"{run_dir} already holds a run; add resume=True to continue it or choose a new out",
                         params=("resume", "out"))
    stored = read_run_json(run_dir) if cfg.resume else None
    if stored is not None:
        check_same_run(cfg, stored)
        check_same_pattern(cfg, stored)
    return existing


def _prepare_tokenizer(cfg: TrainConfig, corpus, run_dir: Path):
    """Load the tokenizer, or train one on the corpus (saved in RUN_DIR so a resume reuses it)."""
    from .tokenizers import load_tokenizer, parse_train_spec, train_tokenizer

    trained = parse_train_spec(cfg.tokenizer)
    if trained is None:
        return load_tokenizer(cfg.tokenizer)
    saved = run_dir / "tokenizer.json"
    if cfg.resume and saved.is_file():
        tok = load_tokenizer(saved)
    else:
        text = corpus.text("train")
        tok = train_tokenizer((text[i : i + 100_000] for i in range(0, len(text), 100_000)), *trained)
        with disk_errors(saved):
            tok.save(run_dir)
    tok.name = cfg.tokenizer
    return tok


def _fit_vocab(cfg: TrainConfig, tokenizer, mcfg) -> int | None:
    """Set the model's vocab_size from the tokenizer (bytes + mlm: one extra id serves as [MASK]); the mask id."""
    mask_id, needed = tokenizer.mask_id, tokenizer.vocab_size
    if cfg.objective == "mlm" and mask_id is None:
        mask_id, needed = tokenizer.vocab_size, tokenizer.vocab_size + 1
    if mcfg.vocab_size is None:
        mcfg.vocab_size = needed
    elif mcfg.vocab_size < needed:
        raise ConfigError(
            f"tokenizer {tokenizer.name!r} needs {needed} token ids but the model's vocab_size is {mcfg.vocab_size}"
        )
    return mask_id


def _eval_set(cfg: TrainConfig, corpus, tokenizer, window: int, mask_id: int | None):
    """Fixed held-out batches (fixed masks for mlm) and the valid split's bytes per token."""
    valid_ids = tokenize_split(corpus, tokenizer, "valid")
    bytes_per_token = len(corpus.split("valid")) / max(1, len(valid_ids))
    n_eval = min(cfg.eval_windows, len(valid_ids) // window)
    if n_eval <= 0:
        return [], bytes_per_token
    ev = heldout_windows(corpus, tokenizer, window, n_eval, "valid")
    gen = torch.Generator().manual_seed(cfg.seed + 7919)
    return [make_batch(cfg.objective, ev[i : i + cfg.batch_size], mask_id, tokenizer.vocab_size, gen, cfg.mask_prob)
            for i in range(0, n_eval, cfg.batch_size)], bytes_per_token


def _optimizer(model: Transformer, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases, LayerNorms)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = torch.device(cfg.device).type in FUSED_DEVICES
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8, fused=fused or None,
    )


#: devices where the trainer uses the fused AdamW (one kernel for all parameters; it can skip an update)
FUSED_DEVICES = ("cuda", "cpu")


def _fused(opt: torch.optim.Optimizer) -> bool:
    return bool(opt.param_groups[0].get("fused"))


def _fuse(opt: torch.optim.Optimizer, model: Transformer) -> None:
    """After loading an optimizer state: fused again where we chose it (older checkpoints were not), with
    the step counters where the fused kernel wants them (float32 on the parameters' device)."""
    device = next(model.parameters()).device
    if device.type not in FUSED_DEVICES:
        return
    for group in opt.param_groups:
        group["fused"], group["foreach"] = True, None
    for state in opt.state.values():
        if "step" in state:
            state["step"] = torch.as_tensor(state["step"], dtype=torch.float32, device=device)


def _autocast(cfg: TrainConfig):
    if not cfg.bf16:
        return nullcontext()
    return torch.autocast(device_type="cuda" if str(cfg.device).startswith("cuda") else "cpu", dtype=torch.bfloat16)


@torch.no_grad()
def _loss(model: Transformer, inputs: torch.Tensor, labels: torch.Tensor, cfg: TrainConfig) -> float:
    """The loss of one batch in eval mode (no dropout)."""
    model.eval()
    with _autocast(cfg):
        loss = float(model_loss(model, inputs.to(cfg.device), labels.to(cfg.device)))
    model.train()
    return loss


def evaluate(model: Transformer, eval_batches: list, cfg: TrainConfig, bytes_per_token: float) -> dict[str, float]:
    """Held-out loss, perplexity and bits per token / byte over the fixed eval batches ({} without any)."""
    if not eval_batches:
        return {}
    nats, count = 0.0, 0
    for inputs, labels in eval_batches:
        n = int((labels != IGNORE).sum())
        if n:  # a batch without labelled positions has a nan loss and no weight
            nats += _loss(model, inputs, labels, cfg) * n
        count += n
    if not count:
        return {}
    loss = nats / count
    bpt = loss / math.log(2)
    return {"eval_loss": loss, "eval_ppl": math.exp(min(loss, 50.0)), "eval_bits_per_token": bpt,
            "eval_bits_per_byte": bpt / bytes_per_token}


def _log_geometry(rec: dict[str, Any], model: Transformer, mcfg, name: str, offsets: list[int] | None = None,
                  spectra: bool = False) -> float:
    """Add the live weights' score records to ``rec`` (with ``spectra``, their spectral columns; with ``offsets``,
    their rotary forms' records at those offsets as ``geometry_offsets``); returns the seconds it took."""
    t0 = time.perf_counter()
    rec["geometry"] = geometry_records(model, mcfg, name, spectra)
    if offsets:
        rec["geometry_offsets"] = geometry_offset_records(model, mcfg, name, offsets)
    return time.perf_counter() - t0


def _save(run_dir: Path, step: int, model: Transformer, tokenizer, opt, data_gen: torch.Generator, totals: Totals,
          dist: Dist, cfg: TrainConfig, extra: dict[str, Any]) -> None:
    """Checkpoint ``step`` (never non-finite weights) and drop checkpoints beyond --keep-checkpoints."""
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        raise _diverged(step, "non-finite weights", run_dir)
    rng_all = gather_rng(dist)  # a collective: every rank takes part
    if not dist.main:
        return
    state = {"step": step, "optimizer": opt.state_dict(), "rng_data": data_gen.get_state(), "rng_torch": rng_all,
             "accumulators": totals.state()}
    write_checkpoint(run_dir, step, model, tokenizer, state, {**extra, "step": step})
    if cfg.keep_checkpoints:
        for _, old in list_checkpoints(run_dir)[: -cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)


def _diverged(step: int, what: float | str, run_dir: Path) -> ConfigError:
    """The one-line error of a run whose loss or weights stopped being finite."""
    ckpts = list_checkpoints(run_dir)
    kept = f"the last good checkpoint is {ckpts[-1][1]}" if ckpts else "no checkpoint was written"
    what = f"the training loss became {what}" if isinstance(what, float) else f"the model has {what}"
    return ConfigError(f"stopped at step {step}: {what} ({kept}); try a lower lr", params="lr")
