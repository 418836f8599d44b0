"""``attnscope atlas``: every head's W_qk geometry beside its behaviour, for one model or a zoo group.

    attnscope atlas SOURCE --out DIR [--probe both|random|text] [--data CORPUS] [--windows N] [--length L] ...
    attnscope atlas --zoo offline-real --out DIR
    attnscope atlas SOURCE --out DIR --interventions sym,anti,ablate [--heads 3.1,4.2 | --top 10:-directionality]

Thin layer over :mod:`attnscope.atlas`: checks the options and DIR before any work (with
--interventions: the heads against the model's config, --top's columns against the atlas to come),
loads the model once for the atlas and the interventions, calls the API, writes the tables (Parquet
and CSV), the figures and a self-contained atlas.html, prints a short summary (the full tables are in
the files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

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
    interventions: Optional[str] = typer.Option(None, "--interventions", help="Also intervene on each head: any of sym, anti (keep only the symmetric / antisymmetric part of its scores), ablate, mean (zero / mean its output); comma-separated. Writes interventions.parquet/.csv and token_effects.parquet (each head's change in loss at every token)."),
    heads: Optional[str] = typer.Option(None, "--heads", help="With --interventions: only these heads, LAYER.HEAD comma-separated (e.g. 3.1,10.4)."),
    top: Optional[str] = typer.Option(None, "--top", help="With --interventions: only the K heads scoring highest on an atlas column, K:COLUMN, or lowest, K:-COLUMN (e.g. 4:-directionality: the most negative d); several joined by commas (e.g. 4:induction_random,4:sink_random)."),
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
    plan = _intervention_plan(interventions, heads, top, intervention_windows, zoo, intervention_precision, device,
                              source, probe)
    from attnscope.outputs import check_result_names

    check_result_names(out, atlas_file_names(plan is not None))  # a file of the user's: refused before any work
    opts = dict(probes=probe, data=data, windows=windows, length=length, random_windows=random_windows,
                random_length=random_length, seed=seed, n_boot=n_boot, batch_size=batch_size, device=device)
    if zoo is not None:
        _run_zoo(zoo, out, opts, as_json)
        return
    from attnscope.atlas import atlas as run_atlas
    from attnscope.progress import phase

    subject = None
    if plan is not None:  # one load for both: the atlas runs on the interventions' model (with its LM head)
        from attnscope.interventions import open_subject

        with phase(f"loading {source}"):
            subject = open_subject(source, device=device)
    res = run_atlas(subject.maps if subject is not None else source, progress=True, **opts)
    for note in res.info.get("position_notes", []):
        stderr_console().print(f"attnscope: note: {note}", highlight=False, soft_wrap=True)
    iv = effects = None
    if plan is not None:
        iv, effects = _intervene(subject, res, plan, out, opts)
    with phase(f"atlas {res.info['model']}: figures and atlas.html"):
        written = write_atlas(res.table, res.correlations, res.info, out, hue="layer", maps=res.maps,
                              interventions=iv, views=res.views, token_effects=effects,
                              settings={"source": source, **opts, "interventions": plan})
    _finish(res.correlations, res.info["model"], written, as_json)
    if iv is not None:
        _finish_interventions(iv)


def _intervention_plan(interventions, heads, top, windows: int, zoo, precision: str = "auto",
                       device: str = "cpu", source=None, probes: str = "both") -> dict | None:
    """The checked --interventions options (before any work: the heads against the model's config, --top's
    columns against the columns the atlas will have), or None without --interventions."""
    from attnscope.interventions.deltas import PRECISIONS, resolve_precision

    if precision not in PRECISIONS:
        raise InputError(f"--intervention-precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if interventions is None:
        if heads is not None or top is not None or precision != "auto":
            raise InputError("--heads, --top and --intervention-precision are options of --interventions; "
                             "give --interventions too")
        return None
    from attnscope.atlas.build import atlas_columns
    from attnscope.interventions import check_kinds, parse_heads
    from attnscope.interventions.run import check_heads_in, head_grid
    from attnscope.interventions.summary import check_top_columns, parse_top

    if zoo is not None:
        raise InputError("--interventions runs on one model: give a SOURCE, not --zoo")
    if heads is not None and top is not None:
        raise InputError("give --heads or --top, not both")
    if windows < 1:
        raise InputError(f"--intervention-windows must be at least 1, not {windows}")
    plan: dict[str, Any] = {"kinds": check_kinds(interventions), "heads": parse_heads(heads) if heads else None, "top": None,
            "windows": windows, "precision": resolve_precision(precision, device)}
    if top is not None:
        plan["top"] = parse_top(top)
        _suggest_top_columns(plan["top"], atlas_columns(probes))
        check_top_columns(plan["top"], atlas_columns(probes))
    check_heads_in(plan["heads"], head_grid(source))  # the config alone: seconds, not the atlas's minutes
    return plan


def _suggest_top_columns(top: list, columns: list[str]) -> None:
    """One line for a --top COLUMN the atlas will not have, naming the columns it may mean: those it begins or is
    part of (``induction`` -> induction_random, induction_text), else the closest spellings, else all of them."""
    import difflib

    for _k, column in top:
        name = column[1:] if column.startswith("-") else column
        if name in columns:
            continue
        near = [c for c in columns if c.startswith(name) or name in c] or difflib.get_close_matches(name, columns, n=4)
        shown = ", ".join(near or columns)
        raise InputError(f"--top: the atlas table has no column {name!r} ({'did you mean' if near else 'its columns:'} "
                         f"{shown})", params="top")


def _intervene(subject, res, plan: dict, out: Path, opts: dict):
    """The interventions of ``plan`` on the loaded ``subject``, joined to the atlas table on (model, layer, head),
    and their per-token changes in loss (None for an encoder)."""
    from attnscope.interventions import intervene

    random_n = plan["windows"] if opts["probes"] in ("both", "random") else 0
    iv = intervene(subject, interventions=plan["kinds"], heads=plan["heads"], top=plan["top"], atlas=res,
                   data=opts["data"], windows=plan["windows"], length=opts["length"], random_windows=random_n,
                   random_length=opts["random_length"], seed=opts["seed"], device=opts["device"],
                   precision=plan["precision"], store=out / "interventions-store", name=res.info["model"],
                   progress=True)  # a long job: progress lines in a log too
    return iv.table, iv.token_effects


def _finish_interventions(table) -> None:
    """A few lines on the console: heads run, the largest loss changes, the heads whose behaviour lives in
    their antisymmetric part (and those that need both parts); the rest is in interventions.csv and atlas.html."""
    from attnscope.interventions.summary import ALPHA, ANTISYMMETRIC, BOTH, sym_collapse

    con = stderr_console()

    def say(text: str) -> None:
        con.print(text, soft_wrap=True, highlight=False)

    heads = table[["layer", "head"]].drop_duplicates()
    kinds = ", ".join(dict.fromkeys(table["intervention"]))
    n = int(table["n"].max()) if len(table) else 0
    say(f"interventions: {len(heads)} heads, each under {kinds} on {n} windows (full table: interventions.csv)")
    loss = table[table["measure"] == "loss"]
    if loss.empty or not loss["delta"].notna().any():
        say("loss: none measured (an encoder has no next-token loss); behaviour changes are in interventions.csv")
    else:
        for kind, sub in loss.groupby("intervention", sort=False):
            up = int(((sub["p_bh"] < ALPHA) & (sub["delta"] > 0)).sum())
            say(f"{kind}: median change in loss {sub['delta'].median():+.4f} nats over {len(sub)} heads "
                f"(median detectable {sub['detectable_change'].median():.4f}); {up} raise it (p_bh < {ALPHA})")
        big = loss.reindex(loss["delta"].abs().sort_values(ascending=False).index).head(5)
        say("largest changes in loss: " + ", ".join(
            f"L{r.layer}H{r.head} {r.intervention} {r.delta:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]"
            for r in big.itertuples()))
    hit = sym_collapse(table)
    shown = 6  # the strongest; the page and interventions.csv hold them all
    for lives, what in ((ANTISYMMETRIC, "heads that need their antisymmetric (directional) part "
                                        "(behaviour collapses under sym, kept under anti)"),
                        (BOTH, "heads that need both parts (behaviour collapses under sym and under anti)")):
        sub = hit[hit["lives_in"] == lives]
        names = ", ".join(f"L{r.layer}H{r.head} ({r.measure} {r.clean:.2f} -> {r.value:.2f})"
                          for r in sub.head(shown).itertuples())
        more = f" and {len(sub) - shown} more (atlas.html)" if len(sub) > shown else ""
        say(f"{what}: {names or 'none'}{more}")
    unknown = hit[~hit["lives_in"].isin([ANTISYMMETRIC, BOTH])]
    if len(unknown):
        say(f"{len(unknown)} heads collapse under sym; run anti too to tell whether they need their "
            "antisymmetric part or both parts")


def atlas_file_names(interventions: bool) -> list[str]:
    """The files an atlas always writes into its folder (with ``interventions``, also those of the interventions;
    token_effects.parquet only comes with a decoder's interventions, so it is not listed)."""
    from attnscope.atlas.build import GEOMETRY

    names = ["atlas.parquet", "atlas.csv", "correlations.csv", "atlas.json", *(f"atlas_{x}.png" for x in GEOMETRY),
             "atlas_correlations.png"]
    if interventions:
        names += ["interventions.parquet", "interventions.csv", "interventions_sym.png", "interventions_loss.png"]
    return [*names, "atlas.html"]


def write_atlas(table, correlations, info, out: Path, hue: str, maps=None, interventions=None,
                settings=None, views=None, token_effects=None) -> list[Path]:
    """Tables, figures and the HTML page of an atlas (one model or pooled) into ``out``, as one result
    (:func:`attnscope.outputs.write_result_set`): every file is rendered before the first one moves into
    ``out``, so an interrupt, a failure or a kill leaves the previous atlas there whole, never a mix.
    With ``interventions`` (their table joined to the atlas table) also interventions.parquet/.csv,
    interventions_sym.png and interventions_loss.png; with ``token_effects`` (their per-token changes in loss,
    :attr:`attnscope.interventions.InterventionResult.token_effects`) token_effects.parquet and the page's
    per-token section. ``settings``: the options, stored in the manifest.
    ``views``: the atlas's text windows per head (the page's head view, :attr:`attnscope.atlas.AtlasResult.views`).
    """
    from attnscope.atlas.build import GEOMETRY, behaviour_columns
    from attnscope.atlas.html import atlas_page_parts
    from attnscope.outputs import write_result_set
    from attnscope.plots import atlas as ap
    from attnscope.plots import model_label
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import json_text, table_bytes

    metrics = behaviour_columns(table)
    name = model_label(str(info.get("model", "")))
    corr = None if hue == "model" else correlations  # pooled: no per-model rho on the panels
    effects = token_effects if token_effects is not None and len(token_effects) else None  # none: an encoder

    def scatter(x: str):
        return lambda: figure_bytes(ap.geometry_vs_behaviour(table, x, metrics, corr, hue=hue,
                                                             title=f"{name}: {x} of W_qk vs behaviour"), "png")

    makers: dict[str, Any] = {"atlas.parquet": table_bytes(table, "atlas.parquet"), "atlas.csv": table_bytes(table, "atlas.csv"),
                        "correlations.csv": table_bytes(correlations, "correlations.csv"),
                        "atlas.json": lambda: json_text(info)}
    makers.update({f"atlas_{x}.png": scatter(x) for x in GEOMETRY})
    makers["atlas_correlations.png"] = lambda: figure_bytes(
        ap.correlation_forest(correlations, title=f"{name}: Spearman rho across heads"), "png")
    if interventions is not None:
        from attnscope.plots import interventions as ip

        makers["interventions.parquet"] = table_bytes(interventions, "interventions.parquet")
        makers["interventions.csv"] = table_bytes(interventions, "interventions.csv")
        makers["interventions_sym.png"] = lambda: figure_bytes(ip.sym_vs_symmetry(
            interventions, title=f"{name}: behaviour when only the symmetric part of the scores is kept"), "png")
        makers["interventions_loss.png"] = lambda: figure_bytes(ip.loss_heatmap(
            interventions, title=f"{name}: change in loss per head"), "png")
    makers["atlas.html"] = lambda: atlas_page_parts(table, correlations, info, maps=maps, interventions=interventions,
                                                    views=views, token_effects=effects)  # written piece by piece
    names = atlas_file_names(interventions is not None)  # the one list, also checked by the CLI before any work
    if effects is not None:
        makers["token_effects.parquet"] = table_bytes(effects, "token_effects.parquet")
        names.insert(names.index("atlas.html"), "token_effects.parquet")
    return write_result_set(out, {n: makers[n] for n in names}, settings, kind="atlas")


#: relations listed on the console (the strongest by q); correlations.csv and atlas.html hold every test
SHOWN_RELATIONS = 8


def _finish(correlations, model: str, written: list[Path], as_json: bool) -> None:
    """The console's part: a few lines (how many tests, how many relations survive, the strongest ones as a
    small table); the whole table is correlations.csv (and ``--json``)."""
    from attnscope.atlas.stats import ALPHA, pvalue

    if as_json:
        from attnscope.tables import records_to_json

        echo_json(records_to_json(correlations))
        return
    con = stderr_console()

    def say(text: str) -> None:
        con.print(text, highlight=False, soft_wrap=True)

    def num(v: float) -> str:
        return "-" if v != v else f"{v:+.2f}"  # an undefined rho (NaN) prints as "-", as on the page

    pooled = correlations["model"].nunique() > 1
    q_col = "q_run" if pooled else "q"
    first = correlations.iloc[0] if len(correlations) else None
    own = correlations[correlations["copy_of"].eq("")] if "copy_of" in correlations.columns else correlations
    found = correlations[~correlations["relation"].str.startswith(("no relation", "undefined"))]
    found_own = found[found.index.isin(own.index)].sort_values(q_col, kind="stable")
    copies = len(correlations) - len(own)
    say(f"{model}: {len(own)} tests of geometry against behaviour across heads"
        + (f" ({copies} more columns repeat another, e.g. s at offset 1 = s where positions are no rotation: "
           "each test counted once)" if copies else "")
        + f"; {len(found_own)} relations survive Benjamini-Hochberg ({q_col} <= {ALPHA}).")
    if len(found_own):
        lead = ["model"] if pooled else []
        rows = [[*(str(getattr(r, c)) for c in lead), str(r.x), str(r.y), num(r.rho),
                 "-" if r.ci_low != r.ci_low else f"[{num(r.ci_low)}, {num(r.ci_high)}]", pvalue(getattr(r, q_col))]
                for r in found_own.head(SHOWN_RELATIONS).itertuples()]
        more = f", the first {SHOWN_RELATIONS} of {len(found_own)}" if len(found_own) > SHOWN_RELATIONS else ""
        print_table(con, f"relations found{more}", [*lead, "geometry", "behaviour", "rho", "95% CI", q_col], rows,
                    keys=(*lead, "geometry", "behaviour"))
    if first is not None:
        say(f"95% CI: {first['interval']}; p: {first['test']}. Every test: correlations.csv, atlas.html.")
    few = own[own["few_units"]] if "few_units" in own.columns else own.iloc[:0]
    if len(few):
        from attnscope.atlas.stats import MIN_UNITS

        say(f"{len(few)} of {len(own)} intervals rest on fewer than {MIN_UNITS} {first['unit']}s (few_units in "
            "correlations.csv): too few resampling units to trust the interval.")
    say(f"wrote {len(written)} files into {written[0].parent}")


def _run_zoo(group: str, out: Path, opts: dict, as_json: bool) -> None:
    from attnscope.atlas.zoo import run_zoo_atlas

    con = stderr_console()
    res = run_zoo_atlas(group, out, log=lambda m: con.print(m), progress=True, **opts)
    written = write_atlas(res.table, res.correlations, res.info, out, hue="model", settings={"zoo": group, **opts})
    _finish(res.correlations, res.info["model"], written, as_json)
