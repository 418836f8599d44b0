"""``attnscope report``: one self-contained HTML page of a model (thin layer over attnscope.report).

    attnscope report SOURCE --out DIR [--data CORPUS --windows N --length L] [--name NAME] [--zoo-file F]
    attnscope report --demo --out DIR
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Optional

import typer

from attnscope.errors import InputError

from ._common import THREADS, stderr_console, use_threads


def report(
    source: Optional[str] = typer.Argument(None, help="HF model directory, weights file or hub id."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write report.html into (created if missing)."),
    data: Optional[str] = typer.Option(None, "--data", help="Also measure the attention heads on this corpus (as `attnscope heads --data`)."),
    windows: int = typer.Option(4, "--windows", help="Held-out windows for the head metrics, each --length tokens (with --data)."),
    length: Optional[int] = typer.Option(None, "--length", help="Window length for the head metrics (default: the model's)."),
    name: Optional[str] = typer.Option(None, "--name", help="Model name in the page and its tables (default: its zoo or hub id, else the file or folder name)."),
    k: float = typer.Option(2.0, "--k", help="Outlier threshold of directionality: mean + k std."),
    layer: int = typer.Option(0, "--layer", help="Layer of the W_qk[:50,:50] figure (0-based)."),
    zoo_file: Optional[Path] = typer.Option(None, "--zoo-file", help="A registry YAML to look published values up in."),
    threads: Optional[int] = THREADS,
    demo: bool = typer.Option(False, "--demo", help="Report on the bundled all-MiniLM-L6-v2 (needs attnscope\\[demo])."),
    device: str = typer.Option("cpu", "--device", help="torch device for the head metrics."),
    spectra: bool = typer.Option(True, "--spectra/--no-spectra", help="The effective ranks of each head's symmetric and antisymmetric parts over depth (a table and a figure; on by default)."),
    atlas: bool = typer.Option(False, "--atlas", help="Add the atlas section: s/d of every head beside its behaviour (both probes; text from --data, default builtin; the atlas's own windows, 8 x 256 tokens, not --windows/--length; a model that cannot run for maps, such as CTranslate2, keeps its report with a note instead)."),
) -> None:
    """Write DIR/report.html: metadata, scores (with the paper's values), figures, and head metrics with --data."""
    from attnscope.report import build_report, check_out_dir, write_report

    check_out_dir(out)  # before any work
    if demo:
        from .geometry import DEMO_NAME, demo_model_dir

        if source is not None:
            raise InputError("give a SOURCE or --demo, not both")
        source, name = str(demo_model_dir()), name or DEMO_NAME
    if source is None:
        raise InputError("give a SOURCE (model directory, weights file or hub id) or --demo")
    if layer < 0:
        raise InputError(f"--layer must be >= 0, not {layer}")
    if zoo_file is not None and not zoo_file.is_file():
        raise InputError(f"--zoo-file {zoo_file}: no such file")
    use_threads(threads)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = build_report(
            source, name=name, k=k, data=data, windows=windows, length=length, registry=zoo_file, layer=layer,
            device=device, progress=True, atlas=atlas, spectra=spectra,
        )  # fmt: skip
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)  # one line, flags for parameters
    if rep.atlas_note is not None:
        print(f"attnscope: note: no atlas section: {rep.atlas_note}", file=sys.stderr)
    path = write_report(rep, out)
    stderr_console().print(f"wrote {path}")
