"""``attnscope train``: train a small encoder (mlm) or decoder (clm) and log W_qk geometry as it trains.

A thin layer over :func:`attnscope.training.train`. Its options are generated from the fields of
:class:`attnscope.training.config.TrainConfig` (names, help texts and defaults live there only); every
option can also come from a YAML file (``--config``), explicit flags win. Values arrive as text and are
read and checked by TrainConfig, so ``--steps five`` and ``steps: five`` give the same one line.
Under ``torchrun`` the same command trains with DDP.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import Field, fields
from typing import Any, Optional

import typer

from attnscope.training.config import TrainConfig, cli_flag, default_text, field_types

METAVARS = {int: "INTEGER", float: "FLOAT", str: "TEXT"}


def _param_name(f: Field) -> str:
    """The Python name of a field's CLI parameter (``no_progress`` for ``--no-progress``)."""
    return cli_flag(f).lstrip("-").replace("-", "_")


def _parameter(f: Field) -> inspect.Parameter:
    """The typer option of one TrainConfig field; ``None`` (or an unset flag) means "not given"."""
    base, _ = field_types(f)
    help_text = f.metadata["help"]
    if base is bool:
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
    from attnscope.progress import stderr_console
    from attnscope.training import train as run_training

    from ._common import echo_json

    cfg = TrainConfig.from_sources(given["config"], **config_options(given))
    summary = run_training(cfg)
    if given["json_out"]:
        echo_json(json.dumps(summary))
        return
    line = f"trained {summary['steps']} steps -> {cfg.out}"
    if "eval_loss" in summary:
        line += f"; held-out loss {summary['eval_loss']:.4f} ({summary['eval_bits_per_token']:.3f} bits/token)"
    line += f"; geometry logging {100 * summary['geometry_overhead']:.2f}% of training time"
    stderr_console().print(line)


_PARAMS = [_parameter(f) for f in fields(TrainConfig)] + EXTRA
train.__signature__ = inspect.Signature(_PARAMS)  # type: ignore[attr-defined]
train.__annotations__ = {p.name: p.annotation for p in _PARAMS}

app = train
