"""``attnscope train``: train a small encoder (mlm) or decoder (clm) and log W_qk geometry as it trains.

A thin layer over :func:`attnscope.training.train`. Its options are generated from the fields of
:class:`attnscope.training.config.TrainConfig` (names, help texts and defaults live there only); every
option can also come from a YAML file (``--config``), explicit flags win. Values arrive as text and are
read and checked by TrainConfig, so ``--steps five`` and ``steps: five`` give the same one line.
Under ``torchrun`` the same command trains with DDP. With ``--seeds`` (``--inits``, ``--objectives``) it
trains a grid of runs through :func:`attnscope.training.grid.run_grid` instead.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import Field, fields
from typing import Any, Optional

import typer

from attnscope.errors import InputError
from attnscope.training.config import TrainConfig, cli_flag, default_text, field_types, is_switch


METAVARS = {int: "INTEGER", float: "FLOAT", str: "TEXT"}


def _param_name(f: Field) -> str:
    """The Python name of a field's CLI parameter (``no_progress`` for ``--no-progress``)."""
    return cli_flag(f).lstrip("-").replace("-", "_")


def _parameter(f: Field) -> inspect.Parameter:
    """The typer option of one TrainConfig field; ``None`` (or an unset flag) means "not given"."""
    base, _ = field_types(f)
    help_text = f.metadata["help"]
    if is_switch(f):  # --name / --no-name; neither given: None, decided by the run (TrainConfig.compile_choice)
        option = typer.Option(None, f"{cli_flag(f)}/--no-{f.name.replace('_', '-')}", help=help_text, show_default=False)
        annotation = Optional[bool]
    elif base is bool:
        option, annotation = typer.Option(False, cli_flag(f), help=help_text), bool
    else:
        default = default_text(f)
        if default:
            help_text += f" [default: {default}]"
        decls = [cli_flag(f)] + ([f.metadata["short"]] if f.metadata.get("short") else [])
        option = typer.Option(None, *decls, help=help_text, metavar=METAVARS[base], show_default=False)
        annotation = Optional[str]
    return inspect.Parameter(_param_name(f), inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


EXTRA = [
    inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                      default=typer.Option(None, "--config", help="YAML (or TOML / JSON) file with any of these options.")),
    inspect.Parameter("json_out", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, "--json", help="Print the final summary as JSON on stdout.")),
]
#: a seed grid (attnscope.training.grid): any of these turns --out into the grid's directory
GRID = [
    inspect.Parameter(name.replace("-", "_"), inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                      default=typer.Option(None, f"--{name}", help=text, metavar="TEXT", show_default=False))
    for name, text in (
        ("seeds", "Train one run per seed (0,1,2 or 0-4) into --out/<objective>-<init>-seed<S>; resumable."),
        ("inits", "With a grid: comma-separated inits (instead of --init)."),
        ("objectives", "With a grid: comma-separated objectives (instead of --objective)."),
        ("executor", "With a grid: inline (one after another) | local (a process pool) | slurm. [default: inline]"),
        ("workers", "With a grid and --executor local: runs at once. [default: 2]"),
        ("slurm-partition", "With --executor slurm: the partition (default: the cluster's)."),
        ("slurm-time", "With --executor slurm: minutes per run's job. [default: 60]"),
        ("slurm-mem", "With --executor slurm: GB of memory per run's job."),
        ("slurm-gpus", "With --executor slurm: GPUs per run's job (use with --device cuda)."),
    )
]


def config_options(given: dict[str, Any]) -> dict[str, Any]:
    """TrainConfig keywords from the parsed command line (flags that were not given are left out)."""
    options = {}
    for f in fields(TrainConfig):
        value = given[_param_name(f)]
        if isinstance(f.default, bool):
            if value:  # a flag only ever switches its option away from the default
                options[f.name] = not f.default
        elif value is not None:
            options[f.name] = value
    return options


def train(**given: Any) -> None:
    """Train a Transformer (mlm encoder or clm decoder), logging loss and W_qk geometry to RUN_DIR/metrics.jsonl."""
    from ._common import stderr_console
    from attnscope.training import train as run_training

    from ._common import echo_json

    options = config_options(given)
    cfg = TrainConfig.from_sources(given["config"], **options)
    if any(given[p.name] is not None for p in GRID):
        _train_grid(cfg, options, given)
        return
    summary = run_training(cfg)
    if given["json_out"]:
        echo_json(json.dumps(summary))
        return
    line = f"trained {summary['steps']} steps -> {cfg.out}"
    if "eval_loss" in summary:
        line += f"; held-out loss {summary['eval_loss']:.4f} ({summary['eval_bits_per_token']:.3f} bits/token)"
    line += overhead_text(summary)
    stderr_console().print(line)


#: below this many seconds of training steps, the geometry logging's share of them says nothing (its first scoring
#: alone, which also pays the first use of its kernels, can take longer than a few steps)
SHARE_FROM_S = 10.0


def overhead_text(summary: dict[str, Any]) -> str:
    """The summary's geometry-logging part: its share of the training time, or on a short run both times."""
    t, g = float(summary.get("train_seconds", 0.0)), float(summary.get("geometry_seconds", 0.0))
    if t < SHARE_FROM_S:
        return (f"; geometry logging {g:.2f} s beside {t:.2f} s of training steps (a run this short says nothing of "
                "its share)")
    return f"; geometry logging {100 * summary['geometry_overhead']:.2f}% of training time"


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [v.strip() for v in text.split(",") if v.strip()]


def _number(given: dict[str, Any], name: str, kind: type) -> Any:
    """A grid option given as text, read as ``kind`` (None when not given); beyond 32 bits is one line, the
    rest of its range is checked by the caller."""
    from ._common import fits_32_bits

    text = given[name]
    if text is None:
        return None
    flag = "--" + name.replace("_", "-")
    try:
        value = kind(text)
    except ValueError:
        raise InputError(f"{flag} takes a {'whole ' if kind is int else ''}number, not {text!r}") from None
    fits_32_bits(value, flag)
    return value


def _train_grid(cfg: TrainConfig, options: dict[str, Any], given: dict[str, Any]) -> None:
    """``--seeds/--inits/--objectives``: every point as a run directory under --out, through run_grid."""
    from ._common import stderr_console
    from attnscope.tables import records_to_json
    from attnscope.training.grid import parse_seeds, run_grid

    from ._common import echo_json, positive, slurm_options

    for single, plural in (("seed", "seeds"), ("init", "inits"), ("objective", "objectives")):
        if single in options and given[plural] is not None:
            raise InputError(f"give --{single} or --{plural}, not both")
    seeds = parse_seeds(given["seeds"]) if given["seeds"] is not None else [cfg.seed]
    workers = _number(given, "workers", int)
    positive(workers, "--workers")
    executor = given["executor"] or "inline"
    if workers is not None and executor != "local":
        raise InputError(f"--workers goes with --executor local (this grid runs {executor}: "
                         f"{'one run after another' if executor == 'inline' else 'one Slurm array task per run'})")
    slurm = slurm_options(executor, given["slurm_partition"], _number(given, "slurm_time", int),
                          _number(given, "slurm_mem", float), _number(given, "slurm_gpus", int), cpus=cfg.threads or 1)
    grid = run_grid(cfg, seeds, inits=_names(given["inits"]), objectives=_names(given["objectives"]), out=cfg.out,
                    executor=executor, workers=workers or 2, slurm=slurm, progress=cfg.progress)
    err = stderr_console()
    for key, msg in grid.summary.failed.items():
        err.print(f"failed: {key}: {msg}", highlight=False, soft_wrap=True)
    if given["json_out"]:
        echo_json(records_to_json(grid.runs) + "\n")
    s = grid.summary
    err.print(f"grid in {cfg.out}: {len(s.done)} trained, {len(s.skipped)} already done, {len(s.failed)} failed; "
              f"compare with: attnscope compare {cfg.out}/*", highlight=False, soft_wrap=True)
    if s.failed:
        raise InputError(f"{len(s.failed)} run(s) of the grid failed (see above); fix the cause and rerun to resume")


_PARAMS = [_parameter(f) for f in fields(TrainConfig)] + EXTRA + GRID
train.__signature__ = inspect.Signature(_PARAMS)  # type: ignore[attr-defined]
train.__annotations__ = {p.name: p.annotation for p in _PARAMS}

app = train
