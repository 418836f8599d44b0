"""``attnscope atlas``: every head's W_qk geometry beside its behaviour, for one model or a zoo group.

    attnscope atlas SOURCE --out DIR [--probe both|random|text] [--data CORPUS] [--windows N] [--length L] ...
    attnscope atlas --zoo offline-real --out DIR

Thin layer over :mod:`attnscope.atlas`: checks the options and DIR before any work, calls the API,
writes the tables (Parquet and CSV), the figures and a self-contained atlas.html, prints a summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnscope.errors import InputError

from ._common import THREADS, check_device, check_out_dir, echo_json, stderr_console, use_threads
from ._tables import print_table


def atlas(
    source: Optional[str] = typer.Argument(None, help="GGUF file, HF model directory / hub id (or give --zoo)."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for atlas.parquet/.csv, correlations.csv, figures, atlas.html."),
    zoo: Optional[str] = typer.Option(None, "--zoo", help="Run every runnable model of this zoo group (e.g. offline-real; or FILE.yaml, FILE.yaml:GROUP), resumable."),
    probe: str = typer.Option("both", "--probe", help="Behaviour probes: both, random (repeated random tokens) or text."),
    data: str = typer.Option("builtin", "--data", help="Corpus of the text probe: builtin, a text file/dir, enwik8, hf:NAME."),
    windows: int = typer.Option(8, "--windows", help="Text-probe windows."),
    length: Optional[int] = typer.Option(None, "--length", help="Text-probe window length in tokens (default 256, or the model's max if shorter)."),
    random_windows: int = typer.Option(8, "--random-windows", help="Random-probe sequences (at most 10,000)."),
    random_length: Optional[int] = typer.Option(None, "--random-length", help="Random tokens per copy T (window 2T+1; default 127, shortened for short models)."),
    n_boot: int = typer.Option(2000, "--n-boot", help="Bootstrap resamples of the 95% interval of Spearman's rho (1 to 100,000)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random probe, the bootstrap and the clustering."),
    batch_size: int = typer.Option(1, "--batch-size", help="Windows per forward pass."),
    device: str = typer.Option("cpu", "--device", help="torch device."),
    as_json: bool = typer.Option(False, "--json", help="Print the correlations as JSON records on stdout."),
    threads: Optional[int] = THREADS,
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
    use_threads(threads)
    opts = dict(probes=probe, data=data, windows=windows, length=length, random_windows=random_windows,
                random_length=random_length, seed=seed, n_boot=n_boot, batch_size=batch_size, device=device)
    if zoo is not None:
        _run_zoo(zoo, out, opts, as_json)
        return
    from attnscope.atlas import atlas as run_atlas

    res = run_atlas(source, progress=True, **opts)
    for note in res.info.get("position_notes", []):
        stderr_console().print(f"attnscope: note: {note}", highlight=False, soft_wrap=True)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="layer", maps=res.maps,
                          settings={"source": source, **opts})
    _finish(res.correlations, res.info["model"], written, as_json)


def write_atlas(table, correlations, info, out: Path, hue: str, maps=None, settings=None) -> list[Path]:
    """Tables, figures and the HTML page of an atlas (one model or pooled) into ``out``, as one result
    (:func:`attnscope.outputs.write_result_set`): every file is rendered before the first one moves into
    ``out``, so an interrupt, a failure or a kill leaves the previous atlas there whole, never a mix.
    ``settings``: the options, stored in the folder's manifest.
    """
    from attnscope.atlas.build import GEOMETRY, behaviour_columns
    from attnscope.atlas.html import atlas_page
    from attnscope.outputs import write_result_set
    from attnscope.plots import atlas as ap
    from attnscope.plots import model_label
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import json_text, table_bytes

    metrics = behaviour_columns(table)
    name = model_label(str(info.get("model", "")))
    corr = None if hue == "model" else correlations  # pooled: no per-model rho on the panels

    def scatter(x: str):
        return lambda: figure_bytes(ap.geometry_vs_behaviour(table, x, metrics, corr, hue=hue,
                                                             title=f"{name}: {x} of W_qk vs behaviour"), "png", dpi=110)

    files = {"atlas.parquet": table_bytes(table, "atlas.parquet"), "atlas.csv": table_bytes(table, "atlas.csv"),
             "correlations.csv": table_bytes(correlations, "correlations.csv"),
             "atlas.json": lambda: json_text(info)}
    files.update({f"atlas_{x}.png": scatter(x) for x in GEOMETRY})
    files["atlas_correlations.png"] = lambda: figure_bytes(
        ap.correlation_forest(correlations, title=f"{name}: Spearman rho across heads"), "png", dpi=110)
    files["atlas.html"] = lambda: atlas_page(table, correlations, info, maps=maps)
    return write_result_set(out, files, settings, kind="atlas")


def _finish(correlations, model: str, written: list[Path], as_json: bool) -> None:
    if as_json:
        from attnscope.tables import records_to_json

        echo_json(records_to_json(correlations))
        return
    con = stderr_console()

    def num(v: float) -> str:
        return "-" if v != v else f"{v:+.2f}"  # an undefined rho (NaN) prints as "-", as on the page

    rows = [[str(r.x), str(r.y), str(r.n), num(r.rho),
             "-" if r.ci_low != r.ci_low else f"[{num(r.ci_low)}, {num(r.ci_high)}]", str(r.relation)]
            for r in correlations.itertuples()]
    interval = str(correlations["interval"].iloc[0]) if len(correlations) else ""
    print_table(con, f"{model}: Spearman rho across heads ({interval})", ["geometry", "behaviour", "n", "rho", "95% CI", "relation"],
                rows, keys=("geometry", "behaviour"))
    con.print(f"wrote {len(written)} files into {written[0].parent}")


def _run_zoo(group: str, out: Path, opts: dict, as_json: bool) -> None:
    from attnscope.atlas.zoo import run_zoo_atlas

    con = stderr_console()
    res = run_zoo_atlas(group, out, log=lambda m: con.print(m), progress=True, **opts)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="model", settings={"zoo": group, **opts})
    _finish(res.correlations, res.info["model"], written, as_json)
