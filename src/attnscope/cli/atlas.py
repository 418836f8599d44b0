"""``attnscope atlas``: every head's W_qk geometry beside its behaviour, for one model or a zoo group.

    attnscope atlas SOURCE --out DIR [--probe both|random|text] [--data CORPUS] [--windows N] [--length L] ...
    attnscope atlas --zoo offline-real --out DIR
    attnscope atlas SOURCE --out DIR --interventions sym,anti,ablate [--heads 3.1,4.2 | --top 10:previous_token_random]

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
    n_boot: int = typer.Option(2000, "--n-boot", help="Bootstrap resamples of the 95% interval of Spearman's rho (1 to 100,000)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random probe, the bootstrap and the clustering."),
    batch_size: int = typer.Option(1, "--batch-size", help="Windows per forward pass."),
    device: str = typer.Option("cpu", "--device", help="torch device."),
    as_json: bool = typer.Option(False, "--json", help="Print the correlations as JSON records on stdout."),
    interventions: Optional[str] = typer.Option(None, "--interventions", help="Also intervene on each head: any of sym, anti (keep only the symmetric / antisymmetric part of its scores), ablate, mean (zero / mean its output); comma-separated."),
    heads: Optional[str] = typer.Option(None, "--heads", help="With --interventions: only these heads, LAYER.HEAD comma-separated (e.g. 3.1,10.4)."),
    top: Optional[str] = typer.Option(None, "--top", help="With --interventions: only the K heads scoring highest on an atlas column, K:COLUMN; several joined by commas (e.g. 4:induction_random,4:sink_random)."),
    intervention_windows: int = typer.Option(4, "--intervention-windows", help="With --interventions: text windows (loss and behaviour) and random-probe windows (behaviour) per head."),
) -> None:
    """Geometry meets behaviour: s and d of every head's W_qk (at offset 0, at offset 1 and over offsets for
    rotary models) against what the head does on the probes; with --interventions, what each head does
    to the loss and to its own behaviour when its scores keep only their symmetric or antisymmetric part,
    or its output is zeroed or replaced by its mean (resumable per layer in DIR/interventions-store)."""
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
    plan = _intervention_plan(interventions, heads, top, intervention_windows, zoo)
    opts = dict(probes=probe, data=data, windows=windows, length=length, random_windows=random_windows,
                random_length=random_length, seed=seed, n_boot=n_boot, batch_size=batch_size, device=device)
    if zoo is not None:
        _run_zoo(zoo, out, opts, as_json)
        return
    from attnscope.atlas import atlas as run_atlas

    res = run_atlas(source, progress=sys.stderr.isatty(), **opts)
    for note in res.info.get("position_notes", []):
        stderr_console().print(f"attnscope: note: {note}", highlight=False, soft_wrap=True)
    iv = None
    if plan is not None:
        iv = _intervene(source, res, plan, out, opts)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="layer", maps=res.maps, interventions=iv)
    _finish(res.correlations, res.info["model"], written, as_json)
    if iv is not None:
        _finish_interventions(iv)


def _intervention_plan(interventions, heads, top, windows: int, zoo) -> dict | None:
    """The checked --interventions options (before any work), or None without --interventions."""
    if interventions is None:
        if heads is not None or top is not None:
            raise InputError("--heads and --top choose the heads of --interventions; give --interventions too")
        return None
    from attnscope.interventions import check_kinds, parse_heads

    if zoo is not None:
        raise InputError("--interventions runs on one model: give a SOURCE, not --zoo")
    if heads is not None and top is not None:
        raise InputError("give --heads or --top, not both")
    if windows < 1:
        raise InputError(f"--intervention-windows must be at least 1, not {windows}")
    plan = {"kinds": check_kinds(interventions), "heads": parse_heads(heads) if heads else None, "top": None,
            "windows": windows}
    if top is not None:
        plan["top"] = []
        for part in (p.strip() for p in top.split(",")):
            k, colon, column = part.partition(":")
            if not (colon and k.isdigit() and int(k) > 0 and column):
                raise InputError(f"--top must be K:COLUMN with K >= 1, e.g. 10:previous_token_random, not {part!r}")
            plan["top"].append((int(k), column))
    return plan


def _intervene(source, res, plan: dict, out: Path, opts: dict):
    """The interventions of ``plan`` on ``source``, joined to the atlas table on (model, layer, head)."""
    from attnscope.interventions import intervene

    chosen = plan["heads"]
    if plan["top"] is not None:
        chosen = []
        for k, column in plan["top"]:
            if column not in res.table.columns:
                raise InputError(f"--top: the atlas table has no column {column!r}")
            best = res.table.nlargest(k, column)
            chosen += [pair for pair in zip(best["layer"].astype(int), best["head"].astype(int)) if pair not in chosen]
    random_n = plan["windows"] if opts["probes"] in ("both", "random") else 0
    iv = intervene(source, interventions=plan["kinds"], heads=chosen, data=opts["data"], windows=plan["windows"],
                   length=opts["length"], random_windows=random_n, random_length=opts["random_length"],
                   seed=opts["seed"], device=opts["device"], store=out / "interventions-store",
                   name=res.info["model"], progress=True)  # a long job: progress lines in a log too
    keep = [c for c in res.table.columns if c not in ("stack",)]
    return iv.table.merge(res.table[keep], on=["model", "layer", "head"], how="left", validate="many_to_one")


def _finish_interventions(table) -> None:
    from attnscope.interventions import needs_direction

    con = stderr_console()
    hit = needs_direction(table)
    loss = table[table["measure"] == "loss"]
    for kind, sub in loss.groupby("intervention", sort=False):
        if sub["delta"].notna().any():
            con.print(f"{kind}: median delta loss {sub['delta'].median():+.4f} nats over {len(sub)} heads; "
                      f"{int(((sub['p_bh'] < 0.05) & (sub['delta'] > 0)).sum())} heads raise it (p_bh < 0.05)")
    shown = 8  # the strongest; the page and interventions.csv hold them all
    names = ", ".join(f"L{r.layer}H{r.head} ({r.measure} {r.clean:.2f} -> {r.value:.2f})" for r in hit.head(shown).itertuples())
    more = f" and {len(hit) - shown} more (atlas.html)" if len(hit) > shown else ""
    con.print(f"heads that need their directional part (behaviour collapses under sym): {names or 'none'}{more}",
              soft_wrap=True, highlight=False)


def write_atlas(table, correlations, info, out: Path, hue: str, maps=None, interventions=None) -> list[Path]:
    """Tables, figures and the HTML page of an atlas (one model or pooled) into ``out``; with ``interventions``
    (their table joined to the atlas table) also interventions.parquet/.csv, interventions_sym.png and
    interventions_loss.png.

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
    if interventions is not None:
        from attnscope.plots import interventions as ip

        figures["interventions_sym.png"] = ip.sym_vs_symmetry(interventions, title=f"{name}: behaviour when only the symmetric part of the scores is kept")
        figures["interventions_loss.png"] = ip.loss_heatmap(interventions, title=f"{name}: change in loss per head")
    images = {fname: figure_bytes(fig, "png", dpi=110) for fname, fig in figures.items()}
    page = atlas_page(table, correlations, info, maps=maps, interventions=interventions)
    paths = [write_table(table, out / "atlas.parquet"), write_table(table, out / "atlas.csv"),
             write_table(correlations, out / "correlations.csv"), atomic_write_json(out / "atlas.json", info)]
    if interventions is not None:
        paths += [write_table(interventions, out / "interventions.parquet"),
                  write_table(interventions, out / "interventions.csv")]
    paths += [atomic_write_bytes(out / fname, data) for fname, data in images.items()]
    paths.append(atomic_write_text(out / "atlas.html", page))
    return paths


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
    print_table(con, f"{model}: Spearman rho across heads ({interval})", ["geometry", "behaviour", "n", "rho", "95% CI", "relation"], rows)
    con.print(f"wrote {len(written)} files into {written[0].parent}")


def _run_zoo(group: str, out: Path, opts: dict, as_json: bool) -> None:
    from attnscope.atlas.zoo import run_zoo_atlas

    con = stderr_console()
    res = run_zoo_atlas(group, out, log=lambda m: con.print(m), progress=sys.stderr.isatty(), **opts)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="model")
    _finish(res.correlations, res.info["model"], written, as_json)
