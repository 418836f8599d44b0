"""``attnscope compare RUN_DIR ...``: paired speed-ups, intervals over seeds, loss curves and scores.

A thin layer over :func:`attnscope.training.compare.compare`: prints the Markdown tables (or JSON with
``--json``), notes on stderr, and with ``--out DIR`` writes the tables and the figures of
:mod:`attnscope.plots.training` there.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from attnscope.errors import InputError


def _steps(text: Optional[str]) -> list[int]:
    if not text:
        return []
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--at takes comma-separated steps, not {text!r}") from None


#: the files every comparison writes into --out (with scores and several inits, also score_summary.csv,
#: loss_differences.png, scores_median.png and scores_per_layer.png)
OUTPUTS = ("summary.csv", "stats.csv", "curves.csv", "losses.csv", "table.md", "loss_curves.png", "loss_bands.png")


def compare(
    runs: List[str] = typer.Argument(..., help="Run directories written by attnscope train (a --seeds grid's folder: its runs)."),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Write figures, CSVs and table.md here."),
    baseline: Optional[str] = typer.Option(
        None, help="One baseline run for every run (default: the default-init run with the same settings and seed)."
    ),
    at: Optional[str] = typer.Option(None, "--at", help="Also report the loss at these steps, e.g. 1000,4000."),
    target: Optional[float] = typer.Option(
        None, help="Target loss for steps-to-target and speed-up (default: the paired baseline's final loss)."
    ),
    smooth: int = typer.Option(
        1, help="Smooth both training-loss curves alike: mean of the last N logged losses (default 1: as logged)."
    ),
    speedup: str = typer.Option(
        "matched", help="matched (default): steps to the baseline's final loss, run / baseline, same curve; "
        "paper: 1 - step*/total on the training loss (biased, see docs/training.md)."
    ),
    curve: str = typer.Option(
        "auto", help="Curve of the matched speed-up: auto (held-out where both runs logged it, else train), "
        "held-out or train (default auto; --speedup paper: auto only)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print {runs, stats, verdicts, notes} as JSON on stdout."),
) -> None:
    """Compare training runs: paired speed-up per seed, mean and 95% t-interval over seeds, whether the inits
    are distinguishable, curves, scores."""
    import json

    from ._common import stderr_console
    from attnscope.outputs import check_result_names
    from attnscope.tables import check_writable, records_to_json
    from attnscope.training.compare import compare as run_compare

    from ._common import echo_json

    if out is not None:  # before any work: nothing printed, then refused
        check_writable(out, "--out", directory=True)
        check_result_names(out, OUTPUTS)  # a file of the user's by one of these names is never replaced
    result = run_compare(runs, baseline=baseline, smooth=smooth, at=_steps(at), target=target, speedup=speedup,
                         curve=curve)
    err = stderr_console()
    for note in result.notes:
        err.print(f"note: {note}", highlight=False, soft_wrap=True)
    if json_out:
        echo_json('{"runs": ' + records_to_json(result.runs) + ', "stats": ' + records_to_json(result.stats)
                  + ', "verdicts": ' + records_to_json(result.verdicts) + ', "notes": ' + json.dumps(result.notes)
                  + "}\n")
    else:
        typer.echo(result.markdown, nl=False)
    if out is None:
        return
    from attnscope.outputs import write_result_set
    from attnscope.plots import training as plots
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import table_bytes

    tables = {"summary.csv": result.runs, "stats.csv": result.stats, "curves.csv": result.curves,
              "losses.csv": result.losses}
    if not result.score_summary.empty:
        tables["score_summary.csv"] = result.score_summary
    figures = {"loss_curves.png": plots.loss_curves(result.losses), "loss_bands.png": plots.loss_bands(result.curves)}
    differences = plots.loss_differences(result.curves)
    if differences is not None:
        figures["loss_differences.png"] = differences
    if not result.score_summary.empty:
        figures["scores_median.png"] = plots.score_medians(result.score_summary)
        figures["scores_per_layer.png"] = plots.score_layers(result.scores)
    files = {name: table_bytes(df, name) for name, df in tables.items()}
    files["table.md"] = result.markdown
    files.update({name: (lambda fig=fig: figure_bytes(fig)) for name, fig in figures.items()})
    write_result_set(out, files, {"runs": list(runs), "baseline": baseline, "at": at, "target": target,
                                  "smooth": smooth, "speedup": speedup, "curve": curve},
                     kind="compare")
    err.print(f"wrote {len(figures)} figures and {len(tables) + 1} tables to {out}", highlight=False, soft_wrap=True)


app = compare
