"""Reading run directories for :mod:`.compare`: ``run.json`` + ``metrics.jsonl`` into :class:`Run` objects
and tidy per-run tables.

Owns the checks on what a run directory may hold (hostile files answered in one line: a record the
trainer never writes, a corrupt ``run.json``; a torn last line is ignored with a note), the settings
that make runs comparable (:meth:`Run.group_key`, :meth:`Run.pair_key`), the paired baseline of each
run (:func:`pick_baselines`) and the group labels (:func:`group_labels`). No statistics, no text.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from attnscope.errors import FormatError, InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# configuration fields that do not change what is trained (left out when grouping and pairing)
NOT_COMPARED = frozenset({
    "out", "resume", "progress", "threads", "wandb", "tensorboard", "config", "device", "world_size",
    "keep_checkpoints", "checkpoint_every", "score_every", "score_offsets", "score_spectra", "log_every",
    "eval_every",
    "model.attn_pattern_heads",  # the heads attn_pattern held (for --resume's check); runs before 2026-11-28 lack it
})
TREATMENTS = ("init", "tie_qk", "model.tie_qk")  # what a baseline differs in


@dataclass
class Run:
    """One run directory, read."""

    name: str
    path: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    @property
    def objective(self) -> str:
        return str(self.config.get("objective", "?"))

    @property
    def init(self) -> str:
        return str(self.config.get("init", "?"))

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def total_steps(self) -> int | None:
        """The configured ``steps`` of run.json (None where it has none)."""
        return self.config.get("steps")

    @property
    def last_step(self) -> int:
        """The last logged step."""
        return max(rec["step"] for rec in self.records)

    @property
    def is_default(self) -> bool:
        """A default-init run (the baseline kind): ``init: default`` and W_q, W_k not tied."""
        return self.init == "default" and not self.config.get("tie_qk") and not self.config.get("model", {}).get("tie_qk")

    def settings(self) -> dict[str, str]:
        """Flattened comparable configuration (``model.*`` nested keys), values as JSON text."""
        flat: dict[str, Any] = {}
        for k, v in self.config.items():
            if k == "model" and isinstance(v, dict):
                flat.update({f"model.{mk}": mv for mk, mv in v.items()})
            else:
                flat[k] = v
        return {k: json.dumps(v, sort_keys=True) for k, v in flat.items() if k not in NOT_COMPARED}

    def group_key(self) -> tuple:
        return tuple(sorted((k, v) for k, v in self.settings().items() if k != "seed"))

    def pair_key(self) -> tuple:
        return tuple(sorted((k, v) for k, v in self.settings().items() if k not in TREATMENTS))


def load_run(path: str | Path) -> Run:
    """Read a run directory; a torn last line of ``metrics.jsonl`` is ignored with a note, an unfinished
    run (last logged step below run.json's ``steps``) gets a note, anything else wrong is one clear error."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: not a directory (give run directories written by attnscope train)")
    metrics, conf = path / "metrics.jsonl", path / "run.json"
    for f in (metrics, conf):
        if not f.is_file():
            raise InputError(f"{path}: not a training run directory (no {f.name})")
    try:
        config = json.loads(conf.read_text())
    except OSError as exc:
        raise InputError(f"{conf}: cannot read it ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FormatError(f"{conf}: not valid JSON ({exc.__class__.__name__}); the run's configuration is lost") from None
    if not isinstance(config, dict) or not isinstance(config.get("model", {}), dict):
        raise FormatError(f"{conf}: not a run configuration (expected a JSON object with a 'model' object)")
    total = config.get("steps")
    if total is not None and (not _is_int(total) or total < 1):
        raise FormatError(f"{conf}: steps {total!r} is not a positive integer")
    try:
        lines = metrics.read_text().splitlines()
    except OSError as exc:
        raise InputError(f"{metrics}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise FormatError(f"{metrics}: not UTF-8 text") from None
    numbered = [(n, ln) for n, ln in enumerate(lines, 1) if ln.strip()]
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    line_of: dict[int, int] = {}  # step -> line
    for i, (n, line) in enumerate(numbered):
        try:
            rec = json.loads(line)
        except ValueError:
            if i == len(numbered) - 1:  # a crash mid-write leaves a partial last line
                notes.append(f"{metrics}: ignored the torn last line {n}")
                continue
            raise FormatError(f"{metrics}: line {n} is not JSON") from None
        if not isinstance(rec, dict) or not _is_int(rec.get("step")):
            raise FormatError(f"{metrics}: line {n} is not a metrics record (needs an integer 'step')")
        problem = _record_problem(rec, total, line_of)
        if problem:
            raise FormatError(f"{metrics}: line {n}: {problem}")
        line_of[rec["step"]] = n
        records.append(rec)
    if not records:
        raise InputError(f"{metrics} holds no records")
    records.sort(key=lambda rec: rec["step"])  # steps are unique, so this order is the training order
    run = Run(path.name, path, config, records, notes)
    if total is not None and run.last_step < total:
        notes.append(f"run {run.name} is unfinished: logged {run.last_step} of its {total} steps")
    return run


#: the losses a record may hold: cross-entropies, so finite and non-negative (null: nothing was labelled)
LOSS_KEYS = ("loss", "eval_loss")
SCORE_KEYS = ("symmetry", "directionality")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _record_problem(rec: dict[str, Any], total: int | None, line_of: dict[int, int]) -> str | None:
    """What makes ``rec`` something the trainer never writes (None if nothing): a step that is negative,
    beyond the run's ``total`` steps or already seen (``line_of``: step -> line), a loss that is not a
    finite non-negative number, a score that is not a finite number."""
    step = rec["step"]
    if step < 0:
        return f"step {step} is negative"
    if total is not None and step > total:
        return f"step {step} is beyond the run's {total} steps"
    if step in line_of:
        return f"step {step} appears twice (also on line {line_of[step]})"
    for key in LOSS_KEYS:
        value = rec.get(key)
        if value is None:
            continue
        if not _is_number(value):
            return f"{key} {value!r} is not a number"
        if not (_finite(value) and value >= 0):
            return f"{key} {value!r} is not a finite non-negative number"
    geometry = rec.get("geometry", [])
    if not isinstance(geometry, list) or not all(isinstance(g, dict) for g in geometry):
        return "geometry is not a list of score records"
    for g in geometry:
        for key in SCORE_KEYS:
            value = g.get(key)
            if value is not None and not (_is_number(value) and _finite(value)):
                return f"{key} score {value!r} is not a finite number"
    return None


# --------------------------------------------------------------------------- per-run tables


def loss_table(runs: Sequence[Run]) -> "pd.DataFrame":
    """Tidy: run, seed, objective, init, step, loss (training), eval_loss (NaN where not evaluated)."""
    import pandas as pd

    rows = [
        {"run": r.name, "seed": r.seed, "objective": r.objective, "init": r.init, "step": rec["step"],
         "loss": rec.get("loss"), "eval_loss": rec.get("eval_loss")}
        for r in runs
        for rec in r.records
    ]
    return pd.DataFrame(rows).astype({"loss": float, "eval_loss": float})


def score_table(runs: Sequence[Run]) -> "pd.DataFrame":
    """Tidy: one score record per (run, logged step, layer/head), with run, objective, init, step."""
    import pandas as pd

    rows = []
    for r in runs:
        for rec in r.records:
            for g in rec.get("geometry", ()):
                rows.append({"run": r.name, "objective": r.objective, "init": r.init, "step": rec["step"], **g})
    if not rows:
        return pd.DataFrame(columns=["run", "objective", "init", "step", "stack", "level", "layer", "head",
                                     "symmetry", "directionality"])
    return pd.DataFrame(rows)


def score_summary(scores: "pd.DataFrame") -> "pd.DataFrame":
    """Median and quartiles over layers (layer-level rows) per run, stack and step."""
    import pandas as pd

    layer = scores[scores["level"] == "layer"]
    if layer.empty:
        return pd.DataFrame()
    keys = ["run", "objective", "init", "stack", "step"]
    out = layer.groupby(keys)[["symmetry", "directionality"]].quantile([0.25, 0.5, 0.75]).unstack()
    names = {0.25: "q1", 0.5: "median", 0.75: "q3"}
    out.columns = [f"{metric}_{names[q]}" for metric, q in out.columns]
    return out.reset_index()


# --------------------------------------------------------------------------- baselines and groups


def pick_baselines(runs: Sequence[Run], baseline: str | None = None) -> dict[str, str]:
    """run name -> baseline run name: ``baseline`` for every run if given, else the paired default-init
    run (same configuration but the init, same seed). A run without one is an error."""
    names = {r.name for r in runs}
    if baseline is not None:
        chosen = Path(baseline).name
        if chosen not in names:
            raise InputError(f"baseline {baseline!r} is not one of the compared runs")
        return {r.name: chosen for r in runs}
    defaults = {r.pair_key(): r for r in runs if r.is_default}
    out = {}
    for r in runs:
        b = defaults.get(r.pair_key())
        if b is None:
            raise InputError(f"run {r.name} (init {r.init}, seed {r.seed}) has no default-init run with the same "
                             f"settings among the compared runs{_nearest(r, defaults.values())}; add one or name "
                             "one with baseline=RUN", params="baseline")
        out[r.name] = b.name
    return out


def setting_differences(run: Run, other: Run) -> list[str]:
    """``["warmup (5 vs 100)", ...]``: the settings, treatments aside (the seed included), where ``run``
    differs from ``other``."""
    mine = {k: v for k, v in run.settings().items() if k not in TREATMENTS}
    theirs = {k: v for k, v in other.settings().items() if k not in TREATMENTS}
    return [f"{k} ({mine.get(k, 'unset')} vs {theirs.get(k, 'unset')})" for k in sorted(set(mine) | set(theirs))
            if mine.get(k) != theirs.get(k)]


def _nearest(run: Run, defaults: Any) -> str:
    """``: the nearest, B, differs in warmup (10 vs 0)``: the settings (treatments aside) where the default-init
    run closest to ``run`` differs from it; empty without default-init runs."""
    best: tuple[int, str] | None = None
    for d in defaults:
        diff = setting_differences(run, d)
        if best is None or len(diff) < best[0]:
            best = (len(diff), f": the nearest, {d.name}, differs in {', '.join(diff)}")
    return "" if best is None else best[1]


#: model settings that follow from the objective (mlm: bidirectional + a [MASK] token; clm: causal)
OBJECTIVE_IMPLIES = ("model.causal", "model.vocab_size")


def group_labels(runs: Sequence[Run]) -> dict[str, str]:
    """run name -> group label: the settings that differ between groups (``init=symmetric objective=clm``)."""
    keys = {r.name: dict(r.group_key()) for r in runs}
    distinct = list(dict.fromkeys(tuple(sorted(k.items())) for k in keys.values()))
    varying = sorted({k for a in distinct for k, v in a for b in distinct if dict(b).get(k) != v})
    if "objective" in varying:  # what the objective sets itself (causal mask, the [MASK] token) says nothing more
        varying = [k for k in varying if k not in OBJECTIVE_IMPLIES]
    out = {}
    for r in runs:
        if varying:
            out[r.name] = " ".join(f"{k}={_plain(keys[r.name].get(k, 'null'))}" for k in varying)
        else:
            out[r.name] = f"{r.objective}/{r.init}"
    return out


def _plain(text: str) -> str:
    value = json.loads(text)
    return value if isinstance(value, str) else text
