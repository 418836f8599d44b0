"""``attnscope atlas``: every head's W_qk geometry beside its behaviour, for one model or a zoo group.

    attnscope atlas SOURCE --out DIR [--probe both|random|text] [--data CORPUS] [--windows N] [--length L] ...
    attnscope atlas --zoo offline-real --out DIR

Thin layer over :mod:`attnscope.atlas`: checks the options and DIR before any work, calls the API,
writes the tables (Parquet and CSV), the figures and a self-contained atlas.html, prints a summary.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from attnscope.errors import InputError

from ._common import check_device, check_out_dir, echo_json, stderr_console
from ._tables import print_table


def atlas(
    source: Optional[str] = typer.Argument(None, help="GGUF file, HF model directory / hub id (or give --zoo)."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for atlas.parquet/.csv, correlations.csv, figures, atlas.html."),
    zoo: Optional[str] = typer.Option(None, "--zoo", help="Run every runnable model of this zoo group (e.g. offline-real), resumable."),
    probe: str = typer.Option("both", "--probe", help="Behaviour probes: both, random (repeated random tokens) or text."),
    data: str = typer.Option("builtin", "--data", help="Corpus of the text probe: builtin, a text file/dir, enwik8, hf:NAME."),
    windows: int = typer.Option(8, "--windows", help="Text-probe windows."),
    length: Optional[int] = typer.Option(None, "--length", help="Text-probe window length in tokens (default 256, or the model's max if shorter)."),
    random_windows: int = typer.Option(8, "--random-windows", help="Random-probe sequences."),
    random_length: Optional[int] = typer.Option(None, "--random-length", help="Random tokens per copy T (window 2T+1; default 127, shortened for short models)."),
    n_boot: int = typer.Option(2000, "--n-boot", help="Resamples of the 95% interval of Spearman's rho (whole layers) and permutations of its p-value (1 to 100,000; the smallest p is 1/(n+1))."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random probe, the bootstrap and the clustering."),
    batch_size: int = typer.Option(1, "--batch-size", help="Windows per forward pass."),
    device: str = typer.Option("cpu", "--device", help="torch device."),
    as_json: bool = typer.Option(False, "--json", help="Print the correlations as JSON records on stdout."),
) -> None:
    """Geometry meets behaviour: s and d of every head's W_qk (at offset 0, at offset 1 and over offsets for
    rotary models) against what the head does on the probes."""
    from attnscope.heads.probes import check_probes

    check_out_dir(out, "--out")
    check_device(device)
    check_probes(probe)
    for value, option in ((windows, "--windows"), (random_windows, "--random-windows"), (n_boot, "--n-boot"),
                          (batch_size, "--batch-size")):
        if value < 1:
            raise InputError(f"{option} must be at least 1, not {value}")
    if (source is None) == (zoo is None):
        raise InputError("give a SOURCE or --zoo GROUP (one of them)")
    opts = dict(probes=probe, data=data, windows=windows, length=length, random_windows=random_windows,
                random_length=random_length, seed=seed, n_boot=n_boot, batch_size=batch_size, device=device)
    if zoo is not None:
        _run_zoo(zoo, out, opts, as_json)
        return
    from attnscope.atlas import atlas as run_atlas

    res = run_atlas(source, progress=sys.stderr.isatty(), **opts)
    for note in res.info.get("position_notes", []):
        stderr_console().print(f"attnscope: note: {note}", highlight=False, soft_wrap=True)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="layer", maps=res.maps)
    _finish(res.correlations, res.info["model"], written, as_json)


def write_atlas(table, correlations, info, out: Path, hue: str, maps=None) -> list[Path]:
    """Tables, figures and the HTML page of an atlas (one model or pooled) into ``out``.

    Every figure and the page are rendered before the first file is written, so an interrupt (Ctrl-C)
    or a failure while drawing leaves the previous atlas in ``out`` whole, never a mix of old and new.
    """
    from attnscope.atlas.build import GEOMETRY, behaviour_columns
    from attnscope.atlas.html import atlas_page
    from attnscope.plots import atlas as ap
    from attnscope.plots import model_label
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import atomic_write_bytes, atomic_write_json, atomic_write_text, write_table

    metrics = behaviour_columns(table)
    name = model_label(str(info.get("model", "")))
    corr = None if hue == "model" else correlations  # pooled: no per-model rho on the panels
    figures = {f"atlas_{x}.png": ap.geometry_vs_behaviour(table, x, metrics, corr, hue=hue,
                                                          title=f"{name}: {x} of W_qk vs behaviour")
               for x in GEOMETRY}  # fmt: skip
    figures["atlas_correlations.png"] = ap.correlation_forest(correlations, title=f"{name}: Spearman rho across heads")
    images = {fname: figure_bytes(fig, "png") for fname, fig in figures.items()}  # print resolution (plots.base.DPI)
    page = atlas_page(table, correlations, info, maps=maps)
    paths = [write_table(table, out / "atlas.parquet"), write_table(table, out / "atlas.csv"),
             write_table(correlations, out / "correlations.csv"), atomic_write_json(out / "atlas.json", info)]
    paths += [atomic_write_bytes(out / fname, data) for fname, data in images.items()]
    paths.append(atomic_write_text(out / "atlas.html", page))
    return paths


def _finish(correlations, model: str, written: list[Path], as_json: bool) -> None:
    from attnscope.atlas.stats import ALPHA, pvalue

    if as_json:
        from attnscope.tables import records_to_json

        echo_json(records_to_json(correlations))
        return
    con = stderr_console()

    def num(v: float) -> str:
        return "-" if v != v else f"{v:+.2f}"  # an undefined rho (NaN) prints as "-", as on the page

    pooled = correlations["model"].nunique() > 1
    lead = ["model"] if pooled else []
    rows = [[*(str(getattr(r, c)) for c in lead), str(r.x), str(r.y), f"{r.n}/{r.n_units}", num(r.rho),
             "-" if r.ci_low != r.ci_low else f"[{num(r.ci_low)}, {num(r.ci_high)}]", pvalue(r.p), pvalue(r.q),
             *([pvalue(r.q_run)] if pooled else []), str(r.relation)]
            for r in correlations.itertuples()]
    first = correlations.iloc[0] if len(correlations) else None
    unit = str(first["unit"]) if first is not None else "layer"
    q_cols = ["q (model)", "q (run)"] if pooled else ["q"]
    print_table(con, f"{model}: Spearman rho across heads", [*lead, "geometry", "behaviour", f"heads/{unit}s", "rho",
                                                             "95% CI", "p", *q_cols, "relation"], rows)
    if first is not None:
        family = ("over each model's tests (model) and over every test of the run (run); relation: q (run)"
                  if pooled else "over the model's tests; relation: q")
        con.print(f"95% CI: {first['interval']}; p: {first['test']}; q: Benjamini-Hochberg {family} <= {ALPHA}.",
                  highlight=False, soft_wrap=True)
        found = (~correlations["relation"].str.startswith(("no relation", "undefined"))).sum()
        con.print(f"{found} of {len(correlations)} relations survive the correction.", highlight=False)
    con.print(f"wrote {len(written)} files into {written[0].parent}")


def _run_zoo(group: str, out: Path, opts: dict, as_json: bool) -> None:
    from attnscope.atlas.zoo import run_zoo_atlas

    con = stderr_console()
    res = run_zoo_atlas(group, out, log=lambda m: con.print(m), progress=sys.stderr.isatty(), **opts)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="model")
    _finish(res.correlations, res.info["model"], written, as_json)
