"""Several seeds (x inits x objectives) as one experiment, run through :mod:`attnscope.runs`.

Owns :func:`grid_points` (the validated grid: one :class:`TrainConfig` per objective x init x seed,
each writing an ordinary run directory ``DIR/<objective>-<init>-seed<S>``) and :func:`run_grid`, which
trains them with the executors of the zoo survey (``inline``: one after another in this process;
``local``: a process pool; ``slurm``: a job array through submitit). Bookkeeping lives beside the runs:

    DIR/.grid/grid.json        the base configuration and the axes (a rerun with other settings is refused)
    DIR/.grid/tasks/*.parquet  one summary row per finished run (the results store: finished = skipped)
    DIR/.grid/failed/*.txt     the one-line error of a run that failed

Only run directories sit directly in ``DIR``, so ``attnscope compare DIR/*`` compares the grid.

Every point trains with ``resume`` on, so a rerun after a kill continues each unfinished run from its
last checkpoint (exactly, see :mod:`attnscope.training.trainer`) and skips finished ones (a run is
finished when its store entry and its ``summary.json`` exist); the other runs' files are not touched. Compare the runs with ``attnscope compare DIR/*``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from attnscope.errors import ConfigError, InputError
from attnscope.runs import EXECUTORS, ResultsStore, RunSummary, Task, run_tasks
from attnscope.tables import atomic_write_json

from .config import first_difference
from .data import check_corpus
from .runlog import GRID_STORE, holds_run, read_run_json

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from .trainer import TrainConfig

STORE = GRID_STORE
GRID_FILE = "grid.json"
# settings a rerun of a grid may change (they do not change what is trained)
FREE = ("resume", "progress", "out", "threads", "wandb", "tensorboard", "config")


@dataclass
class Grid:
    """What :func:`run_grid` did: the per-run summaries and the executor's account."""

    runs: "pd.DataFrame"  # one row per finished point: run, run_dir, objective, init, seed, final numbers
    summary: RunSummary  # done / skipped / failed task keys


def _axis(name: str, values: Sequence[Any] | None, default: Any) -> list[Any]:
    vals = [default] if values is None else list(values)
    if not vals:
        raise InputError(f"--{name} is empty; give at least one value")
    dup = sorted({str(v) for v in vals if vals.count(v) > 1})
    if dup:
        raise InputError(f"--{name} lists {', '.join(dup)} more than once")
    return vals


def _seed(v: Any) -> int:
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise InputError(f"seed {v!r} is not an integer")
    try:
        s = int(v)
    except (TypeError, ValueError):
        raise InputError(f"seed {v!r} is not an integer") from None
    if s < 0:
        raise InputError(f"seeds must not be negative, not {s}", params="seeds")
    return s


def point_name(objective: str, init: str, seed: int) -> str:
    """The run directory name (and task key) of one grid point."""
    return f"{objective}-{init}-seed{seed}"


def grid_points(
    base_config: "TrainConfig | Mapping[str, Any]", seeds: Sequence[int], inits: Sequence[str] | None = None,
    objectives: Sequence[str] | None = None, out: str | Path = "runs/grid",
) -> list["TrainConfig"]:
    """One validated config per objective x init x seed, ``out`` = ``DIR/<objective>-<init>-seed<S>``."""
    from .trainer import TrainConfig

    if isinstance(base_config, Mapping):
        names = {f.name for f in fields(TrainConfig)}
        unknown = sorted(set(base_config) - names)
        if unknown:
            raise ConfigError(f"unknown training option(s): {', '.join(unknown)}")
        base = TrainConfig(**dict(base_config))
    else:
        base = base_config
    seeds = _axis("seeds", [_seed(s) for s in seeds or ()], None)
    inits = _axis("inits", inits, base.init)
    objectives = _axis("objectives", objectives, base.objective)
    root = Path(out)
    points = []
    for objective in objectives:
        for init in inits:
            for seed in seeds:
                cfg = replace(base, objective=str(objective), init=str(init), seed=seed, resume=True, progress=False,
                              out=str(root / point_name(objective, init, seed)))
                points.append(cfg.validate())
    return points


def train_point(config: dict[str, Any]) -> "pd.DataFrame":
    """Train (or resume) one grid point; its summary as a one-row table (top level: runs in workers)."""
    import pandas as pd

    from attnscope.progress import plain_lines

    from .trainer import TrainConfig, train

    cfg = TrainConfig(**config)
    with plain_lines():  # a line every 10 s or 10% of the steps, beside the grid's own display
        summary = train(cfg)
    row = {"run": Path(cfg.out).name, "run_dir": cfg.out, "objective": cfg.objective, "init": cfg.init,
           "seed": cfg.seed}
    row.update({k: v for k, v in summary.items() if isinstance(v, (int, float)) and k not in row})
    return pd.DataFrame([row])


def _check_grid_file(root: Path, record: dict[str, Any]) -> None:
    """A rerun must have the settings of the grid already in ``root``, unless none of its runs started yet
    (say, every run failed on a missing corpus: the fixed rerun replaces the record)."""
    path = root / STORE / GRID_FILE
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = None
    old_base = old.get("base") if isinstance(old, dict) else None
    if not isinstance(old_base, dict):
        raise InputError(f"{path} is not a grid record; move it away or choose a new output directory")
    if not any(holds_run(d) for d in root.iterdir() if d.is_dir()):
        return
    for k, v in record["base"].items():
        if k not in FREE and k in old_base and old_base[k] != v:
            raise InputError(f"{root} holds a grid with {k} = {old_base[k]!r}, not {v!r}; choose a new output directory")


def _check_finished_point(point: "TrainConfig", store: ResultsStore) -> None:
    """A finished entry whose run directory was removed or damaged is trained again; one whose directory now
    holds a run with other settings (retrained by hand) is refused rather than reported as the grid's."""
    run_dir, name = Path(point.out), Path(point.out).name
    if not store.path(name).is_file():
        return
    if not (run_dir / "summary.json").is_file():
        store.path(name).unlink()
        return
    stored = read_run_json(run_dir) or {}
    k = first_difference(point, stored, free=FREE)
    if k is not None:
        raise InputError(f"{run_dir} holds a run with {k} = {stored[k]!r}, not the grid's {getattr(point, k)!r}; "
                         "move it away to train this point again")


def run_grid(
    base_config: "TrainConfig | Mapping[str, Any]",
    seeds: Sequence[int],
    inits: Sequence[str] | None = None,
    objectives: Sequence[str] | None = None,
    out: str | Path = "runs/grid",
    executor: str = "inline",
    workers: int = 2,
    slurm: dict[str, Any] | None = None,
    progress: bool = True,
) -> Grid:
    """Train every objective x init x seed point under ``out`` (resumable; see the module docstring)."""
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    if int(workers) < 1:
        raise InputError(f"workers must be at least 1, not {workers}", params="workers")
    points = grid_points(base_config, seeds, inits, objectives, out)
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise InputError(f"out={root} is a file, not a directory", params="out")
    if holds_run(root):  # compare DIR/* would then fail
        raise InputError(f"out={root} holds a training run; a grid needs a directory of its own", params="out")
    base = asdict(points[0])
    record = {"base": {k: v for k, v in base.items() if k not in ("objective", "init", "seed")},
              "axes": {"objectives": list(dict.fromkeys(p.objective for p in points)),
                       "inits": list(dict.fromkeys(p.init for p in points)),
                       "seeds": list(dict.fromkeys(p.seed for p in points))}}
    _check_grid_file(root, record)
    check_corpus(points[0].data)  # before grid.json holds the settings and every run fails on it
    try:
        (root / STORE).mkdir(parents=True, exist_ok=True)
        atomic_write_json(root / STORE / GRID_FILE, record)
    except OSError as exc:
        raise InputError(f"out={root}: cannot write there ({exc.strerror})", params="out") from None
    if executor != "inline":  # several trainings at once: one thread each unless asked otherwise
        points = [p if p.threads else replace(p, threads=1) for p in points]
    # each run reports its steps in plain lines (train_point): under the grid's bar, from pool workers sharing
    # the terminal, or in its own Slurm log
    points = [replace(p, progress=progress) for p in points]
    tasks = [Task(Path(p.out).name, asdict(p)) for p in points]
    store = ResultsStore(root / STORE)
    for p in points:
        _check_finished_point(p, store)
    summary = run_tasks(train_point, tasks, store, executor=executor, workers=workers, slurm=slurm,
                        progress=progress, desc="grid")
    return Grid(store.merge([t.key for t in tasks]), summary)


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or ``"0-4"`` (inclusive) -> seeds; empty, malformed or duplicated -> one line."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep and lo:
                a, b = int(lo), int(hi)
                if b < a or b - a > 10_000:
                    raise InputError(f"seeds range {part!r} is empty or too long", params="seeds")
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise InputError(f"seeds takes integers like 0,1,2 or 0-4, not {part!r}", params="seeds") from None
    if not seeds:
        raise InputError("seeds is empty; give at least one seed (e.g. 0,1,2)", params="seeds")
    return _axis("seeds", [_seed(s) for s in seeds], None)


__all__ = ["Grid", "grid_points", "parse_seeds", "point_name", "run_grid", "train_point"]
