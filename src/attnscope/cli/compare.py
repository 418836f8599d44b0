"""``attnscope compare RUN_DIR ...``: loss curves, speed-up over a baseline and scores over training.

A thin layer over :func:`attnscope.training.compare.compare`: prints the Markdown table (or JSON with
``--json``) and, with ``--out DIR``, writes the figures and tables there.
"""

from __future__ import annotations

from typing import List, Optional

import typer


def compare(
    runs: List[str] = typer.Argument(..., help="Run directories written by attnscope train."),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Write figures, CSVs and table.md here."),
    baseline: Optional[str] = typer.Option(
        None, help="Baseline run for the speed-up (default: the default-init run of the same model)."
    ),
    smooth: int = typer.Option(1, help="Speed-up on the mean of the last N logged losses (1 = the paper's rule)."),
    json_out: bool = typer.Option(False, "--json", help="Print the per-run summary as JSON on stdout."),
) -> None:
    """Compare training runs: loss curves, speed-up (1 - step*/total), median/IQR scores over training."""
    from attnscope.tables import records_to_json
    from attnscope.training.compare import compare as run_compare

    from ._common import echo_json, stderr_console

    result = run_compare(runs, out=out, baseline=baseline, smooth=smooth)
    if json_out:
        echo_json(records_to_json(result["summary"]))
    else:
        typer.echo(result["markdown"], nl=False)
    if out is not None:
        stderr_console().print(f"wrote {len(result.get('files', []))} figures and the tables to {out}")


app = compare
