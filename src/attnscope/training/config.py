"""The configuration of a training run: :class:`TrainConfig`, the learning-rate schedule, the resume check.

:class:`TrainConfig` is the one source of truth for the options of ``attnscope train``: each field's
``metadata["help"]`` is its help text, the CLI options are generated from the fields
(:mod:`attnscope.cli.train`), and the options table of docs/training.md is :func:`options_table`
(a test checks all three agree). This module imports no torch, so the CLI can build its options from
it cheaply. Values are checked for type and range in :meth:`TrainConfig.validate`
(a YAML ``steps: five`` or ``--lr inf`` is one line, never a traceback or a NaN run).
"""

from __future__ import annotations

import math
import os
import types
import typing
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnscope.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from .model import ModelConfig

SCHEDULES = ("linear", "cosine", "constant")
MODEL_OVERRIDES = (
    "n_layers", "n_heads", "n_kv_heads", "d_model", "d_ff", "max_seq_len", "vocab_size",
    "dropout", "pos", "norm", "attn_pattern",
)
#: options that may differ between a run and its --resume (everything else must match)
RESUME_FREE = ("resume", "progress", "steps", "out", "wandb", "tensorboard", "config", "threads", "compile")
#: counts that must be >= 1 (``None`` allowed where the field is optional) and >= 0
POSITIVE = ("steps", "batch_size", "grad_accum", "seq_len", "score_every", "checkpoint_every", "log_every",
            "eval_windows", "eval_every", "keep_checkpoints", "threads")
NON_NEGATIVE = ("warmup", "seed", "weight_decay", "clip")


def opt(default: Any, help: str, short: str | None = None) -> Any:
    """A TrainConfig field with its help text (and an optional short flag such as ``-o``)."""
    return field(default=default, metadata={"help": help, "short": short})


@dataclass
class TrainConfig:
    """Every option of a training run (CLI flags, YAML keys and Python keywords share these names)."""

    preset: str = opt("bert-mini", "Model shape: bert-mini (4 layers, 4 heads, d 256, FFN 1024), bert-base "
                      "(12/12/768/3072), bert-large (24/16/1024/4096), byte-12l (12/8/512/2048, context 1024, "
                      "vocab 256, pre-LN).")
    objective: str = opt("mlm", "mlm (encoder, masked LM) or clm (decoder, causal LM).")
    init: str = opt("default", "default | symmetric (W_q := W_k at step 0) | symmetric-paper (the original "
                    "code's variant).")
    tie_qk: bool = opt(False, "Keep W_q = W_k for the whole run (k_proj is the only parameter).")
    data: str = opt("builtin", "builtin | text file or directory | enwik8 | PATH/enwik8.zip | hf:NAME[:CONFIG] "
                    "| jigsaw:PATH.")
    tokenizer: str = opt("bytes", "bytes | tokenizer.json | HF tokenizer dir | wordpiece:N | bpe:N (trained on "
                         "the corpus).")
    steps: int = opt(1000, "Optimizer updates.")
    batch_size: int = opt(16, "Sequences per micro-batch (per process).")
    grad_accum: int = opt(1, "Micro-batches per update.")
    seq_len: int = opt(128, "Tokens per sequence.")
    lr: float = opt(5e-4, "Peak learning rate (AdamW; no decay on biases and LayerNorms).")
    weight_decay: float = opt(0.01, "AdamW weight decay.")
    warmup: int = opt(100, "Linear warmup steps.")
    schedule: str = opt("linear", "Decay after warmup: linear | cosine | constant.")
    clip: float = opt(1.0, "Gradient-norm clipping (0: off).")
    bf16: bool = opt(False, "bf16 autocast (refused on a GPU without bf16 support).")
    compile: bool | None = opt(None, "torch.compile the model: on by default with a CUDA device and dense attention "
                               "(where it pays), off elsewhere; --compile turns it on anywhere (first steps slower "
                               "while it compiles; one line if it cannot, e.g. no C++ compiler).")
    seed: int = opt(0, "Random seed (init, data order, masks, dropout).")
    mask_prob: float = opt(0.15, "mlm: fraction of positions selected (80% mask, 10% random, 10% kept).")
    score_every: int = opt(100, "Log geometry scores every K steps (and at step 0).")
    score_offsets: str | None = opt(None, "With --pos rotary: also log s and d at these offsets (tokens; 0,1,16 or "
                                    "log:0:512:8) as geometry_offsets (unset: none).")
    score_spectra: bool = opt(False, "Also log the spectra of every head's and layer form's symmetric and "
                              "antisymmetric parts with the geometry scores (sym_rank, anti_rank, sym_signature, "
                              "anti_top2; q/k copied to the host each time).")
    checkpoint_every: int = opt(500, "Write a checkpoint every K steps (and at the end).")
    eval_every: int | None = opt(None, "Evaluate on the held-out split every K steps (unset: --checkpoint-every).")
    eval_windows: int = opt(64, "Held-out windows per evaluation.")
    log_every: int = opt(10, "Log the mean training loss every K steps.")
    keep_checkpoints: int | None = opt(None, "Keep only the last N checkpoints (unset: all).")
    out: str = opt("runs/run", "Run directory.", short="-o")
    resume: bool = opt(False, "Continue the run in --out from its last checkpoint.")
    progress: bool = opt(True, "No progress display (without it: a bar on a terminal, plain lines in a log).")
    device: str = opt("cpu", "cpu, cuda, cuda:N or mps.")
    threads: int | None = opt(None, "CPU threads (unset: ATTNSCOPE_THREADS, else OMP_NUM_THREADS, else the CPUs minus the 1-minute load average, at least 1).")
    wandb: str | None = opt(None, "Also log to this Weights & Biases project (optional package).")
    tensorboard: bool = opt(False, "Also log to TensorBoard in RUN_DIR/tensorboard (optional package).")
    # model overrides (None: the preset's value)
    n_layers: int | None = opt(None, "Override the preset's layers.")
    n_heads: int | None = opt(None, "Override the preset's query heads.")
    n_kv_heads: int | None = opt(None, "Key/value heads (fewer than the heads: grouped-query attention).")
    d_model: int | None = opt(None, "Override the preset's model width.")
    d_ff: int | None = opt(None, "Override the preset's MLP width.")
    max_seq_len: int | None = opt(None, "Override the preset's context length.")
    vocab_size: int | None = opt(None, "Override the vocabulary size (unset: the tokenizer's).")
    dropout: float | None = opt(None, "Override the preset's dropout rate.")
    pos: str | None = opt(None, "Positions: learned | sinusoidal | rotary.")
    norm: str | None = opt(None, "LayerNorm placement: post (BERT) | pre (GPT-2).")
    attn_pattern: str | None = opt(None, "Sparse attention pattern from attnscope.sparse: a preset name "
                                   "(e.g. byte-sparse-8h) or a YAML/JSON pattern file.")

    def validate(self) -> "TrainConfig":
        """Check every value's type and range; ConfigError (one line) for the first bad one."""
        from .model import (  # torch: only when a run is checked, not for --help
            INITS,
            PRESETS,
        )
        from .objectives import check_objective

        for f in fields(self):
            setattr(self, f.name, _coerce(f, getattr(self, f.name)))
        if self.preset not in PRESETS:
            raise ConfigError(f"preset={self.preset!r} is unknown; choose one of {', '.join(PRESETS)}", params="preset")
        check_objective(self.objective)
        if self.init not in INITS:
            raise ConfigError(f"init={self.init!r} is unknown; choose one of {', '.join(INITS)}", params="init")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule={self.schedule!r} is unknown; choose one of {', '.join(SCHEDULES)}",
                              params="schedule")
        for name in POSITIVE:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive, not {value!r}", params=name)
        for name in NON_NEGATIVE:
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)!r}", params=name)
        from attnscope.threads import MAX_THREADS

        if self.threads is not None and self.threads > MAX_THREADS:
            raise ConfigError(f"threads must be at most {MAX_THREADS}, not {self.threads}", params="threads")
        if self.lr <= 0:
            raise ConfigError(f"lr must be positive, not {self.lr!r}", params="lr")
        if self.attn_pattern is not None:  # a bad ATTNSCOPE_FLEX_TUNE: refused now, not at the first CUDA step
            from attnscope.sparse.tuning import mode

            mode()
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"mask_prob must be in (0, 1), not {self.mask_prob}", params="mask_prob")
        self.offsets()
        return self

    def compile_choice(self) -> tuple[bool, str]:
        """(compile the model?, the one line that says why): ``compile`` when given, else on for CUDA with dense
        attention (FlexAttention compiles a sparse pattern's attention itself; compiling the rest is not yet
        measured to pay), off on other devices."""
        if self.compile is not None:
            return self.compile, f"torch.compile {'on' if self.compile else 'off'} (compile={self.compile})"
        if not self.device.startswith("cuda"):
            return False, f"torch.compile off: the default on {self.device} (--compile to compile)"
        if self.attn_pattern is not None:
            return False, ("torch.compile off: the default with --attn-pattern, whose attention FlexAttention "
                           "compiles itself (--compile to compile the rest)")
        return True, "torch.compile on: the default on CUDA with dense attention, where it pays (--no-compile: off)"

    def offsets(self) -> list[int] | None:
        """``score_offsets`` parsed (None when unset); ConfigError when the model's positions are not rotary."""
        if self.score_offsets is None:
            return None
        from attnscope.errors import InputError
        from attnscope.geometry.offsets import parse_offsets

        try:
            offsets = parse_offsets(self.score_offsets)
        except InputError as err:
            raise ConfigError(str(err).replace("--offsets", "score_offsets")) from None
        from .model import PRESETS

        pos = self.pos or PRESETS[self.preset].get("pos", "learned")
        if pos != "rotary":
            raise ConfigError(f"score_offsets needs rotary positions (--pos rotary); this model's are {pos}")
        return offsets

    @classmethod
    def from_sources(cls, yaml_path: str | None = None, **options: Any) -> "TrainConfig":
        """Defaults < YAML file < explicit options (``None`` options count as not given)."""
        values: dict[str, Any] = {}
        if yaml_path:
            values.update(load_yaml(yaml_path))
        from_file = set(values)
        given = {k: v for k, v in options.items() if v is not None}
        values.update(given)
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown training option(s): {', '.join(unknown)}")
        try:
            return cls(**values).validate()
        except ConfigError as exc:  # a value from the file: name the file and its key, not a flag
            if not any(p in from_file and p not in given for p in exc.params):
                raise
            raise ConfigError(f"{Path(str(yaml_path)).name}: {exc}") from None

    def model_config(self) -> "ModelConfig":
        """The ModelConfig this run trains (preset + overrides; causal iff clm; vocab set later)."""
        from .model import preset_config

        over = {k: getattr(self, k) for k in MODEL_OVERRIDES}
        over["causal"] = self.objective == "clm"
        over["tie_qk"] = self.tie_qk
        cfg = preset_config(self.preset, **over)
        if self.seq_len > cfg.max_seq_len:
            raise ConfigError(f"seq_len {self.seq_len} exceeds the model's max_seq_len {cfg.max_seq_len}")
        return cfg.with_pattern_heads()  # the pattern's heads go into every checkpoint's config.json


def field_types(f: Field) -> tuple[type, bool]:
    """(base type, optional) of a TrainConfig field: ``int | None`` -> (int, True)."""
    hint = typing.get_type_hints(TrainConfig)[f.name]
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else ()
    if args:
        return next(a for a in args if a is not type(None)), True
    return hint, False


def _coerce(f: Field, value: Any) -> Any:
    """``value`` as the field's type (numbers in strings are read), or ConfigError naming the field."""
    base, optional = field_types(f)
    if value is None and optional:
        return None
    kind = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[base]
    bad = ConfigError(f"{f.name} must be {kind}, not {value!r}", params=f.name)
    if base is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if base is str:
        if not isinstance(value, str):
            raise bad
        return value
    if isinstance(value, bool):
        raise bad
    if isinstance(value, str):
        try:
            value = float(value.strip()) if base is float else int(value.strip())
        except ValueError:
            raise bad from None
    if base is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            raise bad
        if not -(2**63) <= value < 2**63:
            raise ConfigError(f"{f.name} {value} is too large (whole numbers must fit in 64 bits)", params=f.name)
        return value
    if not isinstance(value, (int, float)):
        raise bad
    if not math.isfinite(value):
        raise ConfigError(f"{f.name} must be a finite number, not {value!r}", params=f.name)
    return float(value)


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


def first_difference(cfg: TrainConfig, stored: dict[str, Any], free: tuple[str, ...] = RESUME_FREE) -> str | None:
    """The first setting (not in ``free``) where ``cfg`` differs from a stored run.json, or None."""
    return next((k for k in asdict(cfg) if k not in free and k in stored and stored[k] != getattr(cfg, k)), None)


def check_same_run(cfg: TrainConfig, stored: dict[str, Any]) -> None:
    """ConfigError unless ``cfg`` has the settings of the stored run (``RESUME_FREE`` options may differ)."""
    k = first_difference(cfg, stored)
    if k is not None:
        raise ConfigError(f"resume=True with different settings: {k} was {stored[k]!r}, now {getattr(cfg, k)!r}",
                          params=("resume", k))


def check_same_pattern(cfg: TrainConfig, stored: dict[str, Any]) -> None:
    """ConfigError unless a pattern FILE still holds the heads the run trained with: ``attn_pattern`` is its path,
    so an edited file would otherwise change the attention of a resumed run without a word."""
    model = stored.get("model")
    was = model.get("attn_pattern_heads") if isinstance(model, dict) else None
    if cfg.attn_pattern is None or not isinstance(was, list):  # dense, or a run written before it was recorded
        return
    if cfg.model_config().attn_pattern_heads != was:  # the file as it reads now
        raise ConfigError(f"resume=True with attn_pattern {cfg.attn_pattern!r} changed since the run started "
                          "(run.json's model.attn_pattern_heads holds the pattern it trained with); restore the file",
                          params=("resume", "attn_pattern"))


# --------------------------------------------------------------------------- the options, for CLI and docs


def cli_flag(f: Field) -> str:
    """The command-line flag of a field: ``--name``; booleans that default to on: ``--no-name``."""
    name = f.name.replace("_", "-")
    return f"--no-{name}" if f.default is True else f"--{name}"


def is_switch(f: Field) -> bool:
    """A boolean whose default is decided at run time (``None``): both ``--name`` and ``--no-name`` exist."""
    return f.default is None and field_types(f) == (bool, True)


def cli_flags(f: Field) -> list[str]:
    """Every flag of a field: :func:`cli_flag`, ``--no-name`` for a switch, the short flag."""
    flags = [cli_flag(f)] + ([f"--no-{f.name.replace('_', '-')}"] if is_switch(f) else [])
    return flags + ([f.metadata["short"]] if f.metadata.get("short") else [])


def default_text(f: Field) -> str:
    """The field's default as shown in --help and the docs (empty for unset optional values)."""
    return "" if f.default is None or f.default is MISSING or isinstance(f.default, bool) else str(f.default)


def options_table() -> str:
    """The Markdown table of every option of ``attnscope train`` (docs/training.md holds exactly this)."""
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for f in fields(TrainConfig):
        flags = cli_flags(f)
        default = default_text(f)
        help_text = f.metadata["help"].replace("|", "\\|")
        rows.append(f"| {', '.join(f'`{x}`' for x in flags)} | {f'`{default}`' if default else ''} | {help_text} |")
    return "\n".join(rows) + "\n"
