"""``attnscope atlas``: every head's W_qk geometry beside its behaviour, for one model or a zoo group.

    attnscope atlas SOURCE --out DIR [--probe both|random|text] [--data CORPUS] [--windows N] [--length L] ...
    attnscope atlas --zoo offline-real --out DIR
    attnscope atlas SOURCE --out DIR --interventions sym,anti,ablate [--heads 3.1,4.2 | --top 10:previous_token_random]

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
    n_boot: int = typer.Option(2000, "--n-boot", help="Resamples of the 95% interval of Spearman's rho (whole layers) and permutations of its p-value (1 to 100,000; the smallest p is 1/(n+1))."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random probe, the bootstrap and the clustering."),
    batch_size: int = typer.Option(1, "--batch-size", help="Windows per forward pass."),
    device: str = typer.Option("cpu", "--device", help="torch device."),
    as_json: bool = typer.Option(False, "--json", help="Print the correlations as JSON records on stdout."),
    threads: Optional[int] = THREADS,
    interventions: Optional[str] = typer.Option(None, "--interventions", help="Also intervene on each head: any of sym, anti (keep only the symmetric / antisymmetric part of its scores), ablate, mean (zero / mean its output); comma-separated."),
    heads: Optional[str] = typer.Option(None, "--heads", help="With --interventions: only these heads, LAYER.HEAD comma-separated (e.g. 3.1,10.4)."),
    top: Optional[str] = typer.Option(None, "--top", help="With --interventions: only the K heads scoring highest on an atlas column, K:COLUMN; several joined by commas (e.g. 4:induction_random,4:sink_random)."),
    intervention_windows: int = typer.Option(4, "--intervention-windows", help="With --interventions: text windows (loss and behaviour) and random-probe windows (behaviour) per head."),
    intervention_precision: str = typer.Option("auto", "--intervention-precision", help="With --interventions: full (every product in the model's dtype), bf16-delta (the intervened copies' linear layers as the clean copy's plus their difference's product in bfloat16: ~1.7x faster on a CPU, rounding ~0.4% of each effect) or auto (bf16-delta where the CPU or GPU multiplies bfloat16 natively)."),
) -> None:
    """Geometry meets behaviour: s and d of every head's W_qk (at offset 0, at offset 1 and over offsets for
    rotary models) against what the head does on the probes; with --interventions, what each head does
    to the loss and to its own behaviour when its scores keep only their symmetric or antisymmetric part,
    or its output is zeroed or replaced by its mean (resumable per layer in DIR/interventions-store; on
    Linux with --threads 2 to 4, the layers are shared by that many one-thread worker processes)."""
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
    plan = _intervention_plan(interventions, heads, top, intervention_windows, zoo, intervention_precision, device)
    opts = dict(probes=probe, data=data, windows=windows, length=length, random_windows=random_windows,
                random_length=random_length, seed=seed, n_boot=n_boot, batch_size=batch_size, device=device)
    if zoo is not None:
        _run_zoo(zoo, out, opts, as_json)
        return
    from attnscope.atlas import atlas as run_atlas

    res = run_atlas(source, progress=True, **opts)
    for note in res.info.get("position_notes", []):
        stderr_console().print(f"attnscope: note: {note}", highlight=False, soft_wrap=True)
    iv = None
    if plan is not None:
        iv = _intervene(source, res, plan, out, opts)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="layer", maps=res.maps, interventions=iv,
                          views=res.views, settings={"source": source, **opts, "interventions": plan})
    _finish(res.correlations, res.info["model"], written, as_json)
    if iv is not None:
        _finish_interventions(iv)


def _intervention_plan(interventions, heads, top, windows: int, zoo, precision: str = "auto",
                       device: str = "cpu") -> dict | None:
    """The checked --interventions options (before any work), or None without --interventions."""
    from attnscope.interventions.deltas import PRECISIONS, resolve_precision

    if precision not in PRECISIONS:
        raise InputError(f"--intervention-precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if interventions is None:
        if heads is not None or top is not None or precision != "auto":
            raise InputError("--heads, --top and --intervention-precision are options of --interventions; "
                             "give --interventions too")
        return None
    from attnscope.interventions import check_kinds, parse_heads

    if zoo is not None:
        raise InputError("--interventions runs on one model: give a SOURCE, not --zoo")
    if heads is not None and top is not None:
        raise InputError("give --heads or --top, not both")
    if windows < 1:
        raise InputError(f"--intervention-windows must be at least 1, not {windows}")
    plan = {"kinds": check_kinds(interventions), "heads": parse_heads(heads) if heads else None, "top": None,
            "windows": windows, "precision": resolve_precision(precision, device)}
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
                   seed=opts["seed"], device=opts["device"], precision=plan["precision"],
                   store=out / "interventions-store",
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


def write_atlas(table, correlations, info, out: Path, hue: str, maps=None, interventions=None,
                settings=None, views=None) -> list[Path]:
    """Tables, figures and the HTML page of an atlas (one model or pooled) into ``out``, as one result
    (:func:`attnscope.outputs.write_result_set`): every file is rendered before the first one moves into
    ``out``, so an interrupt, a failure or a kill leaves the previous atlas there whole, never a mix.
    With ``interventions`` (their table joined to the atlas table) also interventions.parquet/.csv,
    interventions_sym.png and interventions_loss.png. ``settings``: the options, stored in the manifest.
    ``views``: the atlas's text windows per head (the page's head view, :attr:`attnscope.atlas.AtlasResult.views`).
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
                                                             title=f"{name}: {x} of W_qk vs behaviour"), "png")

    files = {"atlas.parquet": table_bytes(table, "atlas.parquet"), "atlas.csv": table_bytes(table, "atlas.csv"),
             "correlations.csv": table_bytes(correlations, "correlations.csv"),
             "atlas.json": lambda: json_text(info)}
    files.update({f"atlas_{x}.png": scatter(x) for x in GEOMETRY})
    files["atlas_correlations.png"] = lambda: figure_bytes(
        ap.correlation_forest(correlations, title=f"{name}: Spearman rho across heads"), "png")
    if interventions is not None:
        from attnscope.plots import interventions as ip

        files["interventions.parquet"] = table_bytes(interventions, "interventions.parquet")
        files["interventions.csv"] = table_bytes(interventions, "interventions.csv")
        files["interventions_sym.png"] = lambda: figure_bytes(ip.sym_vs_symmetry(
            interventions, title=f"{name}: behaviour when only the symmetric part of the scores is kept"), "png")
        files["interventions_loss.png"] = lambda: figure_bytes(ip.loss_heatmap(
            interventions, title=f"{name}: change in loss per head"), "png")
    files["atlas.html"] = lambda: atlas_page(table, correlations, info, maps=maps, interventions=interventions,
                                                 views=views)
    return write_result_set(out, files, settings, kind="atlas")


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
                                                             "95% CI", "p", *q_cols, "relation"], rows,
                keys=(*lead, "geometry", "behaviour"))
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
    res = run_zoo_atlas(group, out, log=lambda m: con.print(m), progress=True, **opts)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="model", settings={"zoo": group, **opts})
    _finish(res.correlations, res.info["model"], written, as_json)
