"""The training loop: :func:`train` runs (or resumes) one run, nanoGPT-style, and returns its summary.

AdamW, warmup then linear/cosine decay (:func:`.config.lr_at`), gradient accumulation, clipping,
optional bf16 autocast, DDP under ``torchrun`` (:mod:`.distributed`). Geometry scores, evaluations and
the training loss go to metrics.jsonl (:mod:`.runlog`); checkpoints are written atomically
(:mod:`.checkpoints`). Resuming restores weights, optimizer moments, the data sampler's and the
dropout RNG's states and the running totals, so a resumed run reaches the same weights as an
uninterrupted one. A non-finite loss stops the run at once, before the update that would spoil the
weights, so the last checkpoint stays good.

The pieces used to live here; ``TrainConfig``, ``lr_at``, ``list_checkpoints`` and
``geometry_records`` are still importable from this module.
"""

from __future__ import annotations

import math
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from attnscope.errors import ConfigError, FormatError, InputError
from attnscope.progress import progress
from attnscope.tables import atomic_write_json

from .checkpoints import clean_leftovers, disk_errors, list_checkpoints, load_checkpoint, write_checkpoint
from .config import TrainConfig, check_same_run, lr_at
from .data import heldout_windows, open_corpus, sample_windows, tokenize_split
from .distributed import Dist, check_device, gather_rng, init_distributed, mean_across
from .model import Transformer, init_weights
from .objectives import IGNORE, make_batch, model_loss, window_length
from .runlog import RunLog, check_out_dir, geometry_records, read_run_json

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

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        b, r = self.cfg.batch_size, self.dist.rank
        w = sample_windows(self.ids, b * self.dist.world, self.window, self.gen)
        inputs, labels = make_batch(self.cfg.objective, w, self.mask_id, self.vocab, self.gen, self.cfg.mask_prob)
        return inputs[r * b : (r + 1) * b].to(self.cfg.device), labels[r * b : (r + 1) * b].to(self.cfg.device)

    def probe(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed batch (its own generator) for the loss at step 0."""
        gen = torch.Generator().manual_seed(self.cfg.seed + 2)
        w = sample_windows(self.ids, self.cfg.batch_size, self.window, gen)
        inputs, labels = make_batch(self.cfg.objective, w, self.mask_id, self.vocab, gen, self.cfg.mask_prob)
        return inputs.to(self.cfg.device), labels.to(self.cfg.device)


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run (or resume) one training run; returns the summary (also written to RUN_DIR/summary.json)."""
    cfg.validate()
    check_device(cfg.device)
    check_out_dir(cfg.out)  # all before any work
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    dist = init_distributed(cfg.device)
    run_dir = Path(cfg.out)
    existing = _checkpoints_to_resume(cfg, run_dir, dist)
    mcfg = cfg.model_config()  # config errors before any data is read
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

    torch.manual_seed(cfg.seed)  # the model, identical on every rank
    model = Transformer(mcfg)
    init_weights(model, cfg.init, generator=torch.Generator().manual_seed(cfg.seed))
    model.to(cfg.device)
    opt = _optimizer(model, cfg)
    batches = Batches(train_ids, cfg, window, mask_id, tokenizer.vocab_size, dist,
                      torch.Generator().manual_seed(cfg.seed + 1))
    torch.manual_seed(cfg.seed + 1000 * (dist.rank + 1))  # the dropout stream, per rank

    step, totals = 0, Totals()
    log = RunLog(cfg, run_dir, dist.main)
    if cfg.resume:
        if existing:
            step, ckpt = existing[-1]
            saved = load_checkpoint(ckpt, model, opt, batches.gen, dist.rank, dist.world)
            try:
                totals = Totals.from_state(saved)
            except KeyError as exc:
                raise FormatError(f"checkpoint {ckpt} is corrupt (no running total {exc}); delete it to resume "
                                  "from the previous one") from None
        log.rewind(step if existing else -1)
    if dist.main:
        with disk_errors(run_dir / "run.json"):
            atomic_write_json(run_dir / "run.json", {**asdict(cfg), "model": mcfg.to_dict(), "world_size": dist.world})

    ddp_model = model
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp_model = DistributedDataParallel(model)
    name = run_dir.name
    extra = {"tokenizer": tokenizer.name, "objective": cfg.objective, "init": cfg.init, "run": name}

    model.train()
    try:
        if step == 0 and dist.main:  # before any update
            rec = {"step": 0, "loss": _loss(model, *batches.probe(), cfg), "lr": 0.0}
            totals.geometry_seconds += _log_geometry(rec, model, mcfg, name)
            log.log({**rec, **evaluate(model, eval_batches, cfg, bytes_per_token)})

        with progress(cfg.steps, cfg.out, enabled=cfg.progress and dist.main, start=step, transient=False,
                      fields={"loss": "-"}) as bar:
            while step < cfg.steps:
                t0 = time.perf_counter()
                lr = lr_at(step + 1, cfg)
                for group in opt.param_groups:
                    group["lr"] = lr
                opt.zero_grad(set_to_none=True)
                step_loss, labelled = 0.0, 0
                for micro in range(cfg.grad_accum):
                    inputs, labels = batches.next()
                    last = micro == cfg.grad_accum - 1
                    with (nullcontext() if last or ddp_model is model else ddp_model.no_sync()), _autocast(cfg):
                        loss = model_loss(ddp_model, inputs, labels) / cfg.grad_accum
                        loss.backward()
                    if bool((labels != IGNORE).any()):  # mlm may select no position: nan loss, zero gradient
                        step_loss += float(loss.detach())
                        labelled += 1
                if 0 < labelled < cfg.grad_accum:
                    step_loss *= cfg.grad_accum / labelled
                step_loss = mean_across(step_loss, dist)
                if not math.isfinite(step_loss):
                    raise _diverged(step + 1, step_loss, run_dir)
                if cfg.clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
                opt.step()
                step += 1
                if labelled or dist.world > 1:
                    totals.loss_sum += step_loss
                    totals.loss_n += 1
                totals.tokens += cfg.batch_size * cfg.seq_len * cfg.grad_accum * dist.world
                totals.train_seconds += time.perf_counter() - t0

                scored = step % cfg.score_every == 0 or step == cfg.steps
                evaluated = step % (cfg.eval_every or cfg.checkpoint_every) == 0 or step == cfg.steps
                if dist.main and (step % cfg.log_every == 0 or scored or evaluated):
                    loss = totals.loss_sum / totals.loss_n if totals.loss_n else None  # None: nothing labelled
                    rec = {"step": step, "loss": loss, "lr": lr, "tokens": totals.tokens}
                    totals.loss_sum, totals.loss_n = 0.0, 0
                    if scored:
                        totals.geometry_seconds += _log_geometry(rec, model, mcfg, name)
                    if evaluated:
                        rec.update(evaluate(model, eval_batches, cfg, bytes_per_token))
                    rec.update(train_seconds=round(totals.train_seconds, 4),
                               geometry_seconds=round(totals.geometry_seconds, 4))
                    log.log(rec)
                    bar.update(completed=step, loss="-" if loss is None else f"{loss:.4f}")
                else:
                    bar.update(completed=step)
                if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                    _save(run_dir, step, model, tokenizer, opt, batches.gen, totals, dist, cfg, extra)
    finally:
        log.close()

    summary = {
        "run": name, "steps": step, "objective": cfg.objective, "init": cfg.init,
        "params": model.num_params(), "tokens": totals.tokens,
        "train_seconds": totals.train_seconds, "geometry_seconds": totals.geometry_seconds,
        "geometry_overhead": totals.geometry_seconds / max(totals.train_seconds, 1e-9),
        "tokens_per_second": totals.tokens / max(totals.train_seconds, 1e-9),
        "world_size": dist.world, **evaluate(model, eval_batches, cfg, bytes_per_token),
    }
    if dist.main:
        with disk_errors(run_dir / "summary.json"):
            atomic_write_json(run_dir / "summary.json", summary)
    return summary


# --------------------------------------------------------------------------- the pieces of a run


def _checkpoints_to_resume(cfg: TrainConfig, run_dir: Path, dist: Dist) -> list[tuple[int, Path]]:
    """The run's checkpoints; an error if --out holds a run and --resume is missing, or holds another run."""
    if cfg.resume and dist.main:
        clean_leftovers(run_dir)  # a kill mid-checkpoint
    existing = list_checkpoints(run_dir)
    if not cfg.resume and (existing or (run_dir / "metrics.jsonl").exists()):
        raise InputError(f"{run_dir} already holds a run; add --resume to continue it or choose a new --out")
    stored = read_run_json(run_dir) if cfg.resume else None
    if stored is not None:
        check_same_run(cfg, stored)
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
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8,
    )


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


def _log_geometry(rec: dict[str, Any], model: Transformer, mcfg, name: str) -> float:
    """Add the live weights' score records to ``rec``; returns the seconds it took."""
    t0 = time.perf_counter()
    rec["geometry"] = geometry_records(model, mcfg, name)
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
    return ConfigError(f"stopped at step {step}: {what} ({kept}); try a lower --lr")
