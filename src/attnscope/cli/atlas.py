"""``attnscope atlas``: every head's W_qk geometry beside its behaviour, for one model or a zoo group.

    attnscope atlas SOURCE --out DIR [--probe both|random|text] [--data CORPUS] [--windows N] [--length L] ...
    attnscope atlas --zoo offline-real --out DIR
    attnscope atlas SOURCE --out DIR --interventions sym,anti,ablate [--heads 3.1,4.2 | --top 10:-directionality]
    attnscope atlas --zoo offline-real --out DIR --interventions sym,anti   # every model, one pooled table

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

from ._common import THREADS, check_device, check_out_dir, echo_json, slurm_options, stderr_console, use_threads
from ._tables import print_table


def atlas(
    source: Optional[str] = typer.Argument(None, help="GGUF file, HF model directory / hub id (or give --zoo)."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for atlas.parquet/.csv, correlations.csv, figures, atlas.html."),
    zoo: Optional[str] = typer.Option(None, "--zoo", help="Run every runnable model of this zoo group (e.g. offline-real; or FILE.yaml, FILE.yaml:GROUP), resumable; with --interventions, every model's interventions too, into one pooled table."),
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
    interventions: Optional[str] = typer.Option(None, "--interventions", help="Also intervene on each head: any of sym, anti (keep only the symmetric / antisymmetric part of its scores), sym~, anti~ (the same, norm-matched: each query's score spread kept), scale:A (its scores times A, A >= 0), anti-rank:R, sym-rank:R (that part at its best rank R, the other whole), ablate, mean, resample (zero its output, its mean, its output on another window); comma-separated. scale:0.5, the control of sym and anti, runs beside them (--no-controls: not). Writes interventions.parquet/.csv, token_effects.parquet (each head's change in loss at every token) and methods.md (the run's methods paragraph: versions, the weights' sha256, windows, statistics)."),
    heads: Optional[str] = typer.Option(None, "--heads", help="With --interventions: only these heads, LAYER.HEAD comma-separated (e.g. 3.1,10.4)."),
    top: Optional[str] = typer.Option(None, "--top", help="With --interventions: only the K heads scoring highest on an atlas column, K:COLUMN, or lowest, K:-COLUMN (e.g. 4:-directionality: the most negative d); several joined by commas (e.g. 4:induction_random,4:sink_random)."),
    intervention_windows: int = typer.Option(8, "--intervention-windows", help="With --interventions: text windows (loss and behaviour) and random-probe windows (behaviour) per head (default 8: docs/atlas.md, 'How many windows')."),
    intervention_data: str = typer.Option("builtin,builtin-code", "--intervention-data", help="With --interventions: the text the changes are measured on; several corpora joined by commas take turns (default: CPython's documentation and standard-library code)."),
    power: Optional[float] = typer.Option(None, "--power", help="With --interventions: plan the windows to detect this change in loss (nats, e.g. 0.02) with 80% power: a pilot screen on --intervention-windows windows gives the heads' per-window spread, then the run takes the windows needed (at least --intervention-windows)."),
    controls: bool = typer.Option(True, "--controls/--no-controls", help="With --interventions: run scale:0.5 beside sym and anti, compare each with it per head (vs_control columns) and claim where a behaviour lives only beyond it."),
    exact: str = typer.Option("auto", "--exact", help="With --interventions: which screened heads are then measured exactly (every head is first screened: per window one forward and 1 + --screen-samples backward passes, the change in loss to second order after the head's exactly recomputed softmax; behaviour changes are always exact). auto (default): for each intervention (not the scale:0.5 control added beside them), the 10% of heads with the largest screened |change in loss| under it (at least 4), plus any --heads/--top; K: the K largest of each, plus those named; 0: the screen alone; all: every head (the full exact sweep)."),
    screen_samples: Optional[int] = typer.Option(None, "--screen-samples", help="With --interventions: next-token draws per window behind the screen's second-order term (its Gauss-Newton curvature; each one more backward pass). Default: at least 4 per window and 32 in all; 0: first order alone (faster; on SmolLM2 far less accurate, on Gemma-3-270m neither ranks well: docs/atlas.md, 'How far the screen can be trusted')."),
    executor: Optional[str] = typer.Option(None, "--executor", help="With --interventions: slurm (or local: a process pool) sends the exact layer passes as jobs, one per layer, each loading the model itself, into DIR/interventions-store (a rerun resumes); default: this process, its layers shared by --threads worker processes."),
    slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="Slurm partition (--executor slurm)."),
    slurm_time: Optional[int] = typer.Option(None, "--slurm-time", help="Minutes per Slurm job (--executor slurm)."),
    slurm_mem: Optional[float] = typer.Option(None, "--slurm-mem", help="Memory per Slurm job, GB (--executor slurm)."),
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
                              source, probe, exact, executor, controls, intervention_data, power,
                              screen_samples, slurm_options(executor or "this process", slurm_partition, slurm_time, slurm_mem))
    from attnscope.outputs import check_result_names

    check_result_names(out, atlas_file_names(plan is not None, pooled=zoo is not None))  # a user's file: refused now
    opts = dict(probes=probe, data=data, windows=windows, length=length, random_windows=random_windows,
                random_length=random_length, seed=seed, n_boot=n_boot, batch_size=batch_size, device=device)
    if zoo is not None:
        _run_zoo(zoo, out, opts, as_json, plan)
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
    iv = effects = iv_info = None
    if plan is not None:
        iv, effects, iv_info = _intervene(subject, res, plan, out, opts)
    with phase(f"atlas {res.info['model']}: figures and atlas.html"):
        written = write_atlas(res.table, res.correlations, res.info, out, hue="layer", maps=res.maps,
                              interventions=iv, views=res.views, token_effects=effects,
                              settings={"source": source, **opts, "interventions": plan}, interventions_info=iv_info)
    _finish(res.correlations, res.info["model"], written, as_json)
    if iv is not None:
        _finish_interventions(iv, iv_info)


def _intervention_plan(interventions, heads, top, windows: int, zoo, precision: str = "auto",
                       device: str = "cpu", source=None, probes: str = "both", exact: str = "auto",
                       executor: str | None = None, controls: bool = True, data: str = "builtin,builtin-code",
                       power: float | None = None, screen_samples: int | None = None,
                       slurm: dict | None = None) -> dict | None:
    """The checked --interventions options (before any work: the heads against the model's config, --top's
    columns against the columns the atlas will have), or None without --interventions."""
    from attnscope.interventions.deltas import PRECISIONS, resolve_precision

    if precision not in PRECISIONS:
        raise InputError(f"--intervention-precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if interventions is None:
        if heads is not None or top is not None or precision != "auto" or exact != "auto" or executor is not None \
                or not controls or power is not None or screen_samples is not None:
            raise InputError("--heads, --top, --exact, --executor, --no-controls, --power, --screen-samples and "
                             "--intervention-precision are options of --interventions; give --interventions too")
        return None
    from attnscope.atlas.build import atlas_columns
    from attnscope.interventions import check_kinds, parse_heads
    from attnscope.interventions.run import check_heads_in, head_grid
    from attnscope.interventions.selection import check_exact
    from attnscope.interventions.summary import check_top_columns, parse_top

    if zoo is not None and heads is not None:
        raise InputError("--heads names a model's own heads: with --zoo, choose them per model with --top K:COLUMN")
    if heads is not None and top is not None:
        raise InputError("give --heads or --top, not both")
    if windows < 1:
        raise InputError(f"--intervention-windows must be at least 1, not {windows}")
    plan: dict[str, Any] = {"kinds": check_kinds(interventions), "heads": parse_heads(heads) if heads else None, "top": None,
            "windows": windows, "precision": resolve_precision(precision, device), "exact": check_exact(exact),
            "executor": executor, "slurm": slurm, "controls": controls, "data": data, "power": power,
            "screen_samples": screen_samples}
    if screen_samples is not None and screen_samples < 0:
        raise InputError(f"--screen-samples must be 0 (first order alone) or more, not {screen_samples}")
    if power is not None and not (power > 0 and power == power and power != float("inf")):
        raise InputError(f"--power must be a change in loss above 0 (nats, e.g. 0.02), not {power}")
    from attnscope.training.data import check_corpus

    for corpus in (c.strip() for c in data.split(",") if c.strip()):
        check_corpus(corpus)
    if executor is not None and executor not in ("local", "slurm", "inline"):
        raise InputError(f"--executor must be local or slurm (or left out: this process), not {executor!r}")
    if executor == "slurm":  # before the atlas and the screen, not after them
        from attnscope.runs.executors import check_slurm

        check_slurm()
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
                   data=plan["data"], windows=plan["windows"], length=opts["length"], random_windows=random_n,
                   random_length=opts["random_length"], seed=opts["seed"], device=opts["device"],
                   precision=plan["precision"], store=out / "interventions-store", name=res.info["model"],
                   exact=plan["exact"], executor=plan["executor"], slurm=plan["slurm"], controls=plan["controls"],
                   power=plan["power"], screen_samples=plan.get("screen_samples"),
                   progress=True)  # a long job: progress lines in a log too
    return iv.table, iv.token_effects, iv.info


def _finish_interventions(table, info: dict | None = None) -> None:
    """A few lines on the console: heads run, screened and measured exactly, the largest loss changes (a
    screened value marked "est."), the screen's agreement with the exact pass, the heads whose behaviour lives
    in their antisymmetric part (and those that need both parts); the rest is in interventions.csv and atlas.html."""
    from attnscope.interventions.summary import ALPHA, ANTISYMMETRIC, BOTH, UNDECIDED, UNKNOWN, becomes, sym_collapse

    con = stderr_console()

    def say(text: str) -> None:
        con.print(text, soft_wrap=True, highlight=False)

    heads = table[["layer", "head"]].drop_duplicates()
    kinds = ", ".join(dict.fromkeys(table["intervention"]))
    n = int(max(table["n"].max(), table["n_screen"].max() if "n_screen" in table else 0)) if len(table) else 0
    say(f"interventions: {len(heads)} heads, each under {kinds} on {n} windows (full table: interventions.csv)")
    loss = table[table["measure"] == "loss"]
    if loss.empty:
        say("loss: none measured (an encoder has no next-token loss); behaviour changes are in interventions.csv")
    else:
        measured = loss[loss["exact"].astype(bool)] if "exact" in loss else loss
        n_exact = measured[["layer", "head"]].drop_duplicates().shape[0]
        rule = (info or {}).get("exact_rule", "")
        order = "first" if (info or {}).get("screen_samples", 1) == 0 else "second"  # 0 draws: first order alone
        say(f"screen: every head to {order} order (est.); measured exactly: {n_exact} of {len(heads)} heads"
            + (f" ({rule})" if rule else ""))
        for kind, sub in loss.groupby("intervention", sort=False):
            ex = sub[sub["exact"].astype(bool)] if "exact" in sub else sub
            up = int(((ex["p_bh"] < ALPHA) & (ex["delta"] > 0)).sum())
            est = (f"; screened median {sub['delta_screen'].median():+.4f} est. over {len(sub)}"
                   if "delta_screen" in sub else "")
            if ex["delta"].notna().any():
                say(f"{kind}: median change in loss {ex['delta'].median():+.4f} nats over {len(ex)} heads measured "
                    f"exactly (median detectable {ex['detectable_change'].median():.4f}); {up} raise it "
                    f"(p_bh < {ALPHA}){est}")
            else:
                say(f"{kind}: none measured exactly{est}")
        size = loss["delta"].where(loss["delta"].notna(), loss.get("delta_screen", loss["delta"]))
        big = loss.assign(shown=size).reindex(size.abs().sort_values(ascending=False).index).head(5)

        def shown_change(r) -> str:
            if r.delta == r.delta:
                return f"L{r.layer}H{r.head} {r.intervention} {r.delta:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]"
            return f"L{r.layer}H{r.head} {r.intervention} {r.shown:+.3f} est. (screened only)"

        say("largest changes in loss: " + ", ".join(shown_change(r) for r in big.itertuples()))
        for kind, agree in ((info or {}).get("agreement") or {}).items():
            worst = agree["largest_disagreement"]
            rho = agree["spearman_rho"]
            say(f"screen vs exact, {kind}: Spearman rho {'-' if rho != rho else f'{rho:+.2f}'} over "
                f"{agree['heads']} heads measured both ways; largest disagreement {worst['head']} "
                f"(est. {worst['screen']:+.3f}, exact {worst['exact']:+.3f})")
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
    unknown = hit[hit["lives_in"] == UNKNOWN]
    if len(unknown):
        say(f"{len(unknown)} heads collapse under sym; run anti too to tell whether they need their "
            "antisymmetric part or both parts")
    undecided = hit[hit["lives_in"].str.startswith(UNDECIDED)]
    if len(undecided):
        r = undecided.iloc[0]
        say(f"{len(undecided)} behaviours collapse under sym but are undecided (e.g. L{r['layer']}H{r['head']} "
            f"{r['measure']}: {r['why']}); interventions.csv has vs_control for each")
    turned = becomes(table)
    if len(turned):
        say("what heads become: " + "; ".join(turned["text"].head(4))
            + (f" and {len(turned) - 4} more (atlas.html)" if len(turned) > 4 else ""))


def atlas_file_names(interventions: bool, pooled: bool = False) -> list[str]:
    """The files an atlas always writes into its folder (with ``interventions``, also those of the interventions,
    and for a zoo (``pooled``) the cross-model summary interventions_models.csv; token_effects.parquet only comes
    with a single decoder's interventions, so it is not listed)."""
    from attnscope.atlas.build import GEOMETRY

    names = ["atlas.parquet", "atlas.csv", "correlations.csv", "atlas.json", *(f"atlas_{x}.png" for x in GEOMETRY),
             "atlas_correlations.png"]
    if interventions:
        names += ["interventions.parquet", "interventions.csv", "interventions.json", "interventions_sym.png",
                  "interventions_loss.png", "methods.md"]
        if pooled:
            names.append("interventions_models.csv")
    return [*names, "atlas.html"]


def write_atlas(table, correlations, info, out: Path, hue: str, maps=None, interventions=None,
                settings=None, views=None, token_effects=None, interventions_info=None) -> list[Path]:
    """Tables, figures and the HTML page of an atlas (one model or pooled) into ``out``, as one result
    (:func:`attnscope.outputs.write_result_set`): every file is rendered before the first one moves into
    ``out``, so an interrupt, a failure or a kill leaves the previous atlas there whole, never a mix.
    With ``interventions`` (their table joined to the atlas table) also interventions.parquet/.csv,
    interventions_sym.png and interventions_loss.png; with ``token_effects`` (their per-token changes in loss,
    :attr:`attnscope.interventions.InterventionResult.token_effects`) token_effects.parquet and the page's
    per-token section. ``settings``: the options, stored in the manifest. ``interventions_info``: how the
    interventions were made (:attr:`attnscope.interventions.InterventionResult.info`: the exact rule, the
    screen's agreement with the exact pass), written as interventions.json, and with the atlas's ``info`` and the
    weight files' sha256 as methods.md (:func:`attnscope.interventions.methods.methods_text`).
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
        makers["interventions.json"] = lambda: json_text(interventions_info or {})
        makers["interventions_sym.png"] = lambda: figure_bytes(ip.sym_vs_symmetry(
            interventions, title=f"{name}: behaviour when only the symmetric part of the scores is kept"), "png")
        grid = ((interventions_info or {}).get("n_layers"), (interventions_info or {}).get("n_heads"))
        makers["interventions_loss.png"] = lambda: figure_bytes(ip.loss_heatmap(
            interventions, title=f"{name}: change in loss per head", shape=grid if None not in grid else None), "png")
        from attnscope.interventions.methods import methods_text, weights_fingerprint

        makers["methods.md"] = lambda: methods_text(interventions_info or {}, interventions, info, weights_fingerprint(
            (settings or {}).get("source") or info.get("source")))  # the run's methods paragraph (sha256 of the weights)
    makers["atlas.html"] = lambda: atlas_page_parts(table, correlations, info, maps=maps, interventions=interventions,
                                                    views=views, token_effects=effects)  # written piece by piece
    if interventions is not None and hue == "model":  # a zoo: the models side by side
        from attnscope.interventions.summary import across_models

        makers["interventions_models.csv"] = table_bytes(across_models(interventions), "interventions_models.csv")
    names = atlas_file_names(interventions is not None, pooled=hue == "model")  # the CLI's list, checked first
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


def _run_zoo(group: str, out: Path, opts: dict, as_json: bool, plan: dict | None = None) -> None:
    from attnscope.atlas.zoo import run_zoo_atlas

    con = stderr_console()
    iv_opts = None
    if plan is not None:  # every model's interventions too, each model loaded once for both
        random_n = plan["windows"] if opts["probes"] in ("both", "random") else 0
        iv_opts = dict(interventions=list(plan["kinds"]), top=plan["top"], data=plan["data"], windows=plan["windows"],
                       length=opts["length"], random_windows=random_n, random_length=opts["random_length"],
                       seed=opts["seed"], device=opts["device"], precision=plan["precision"], exact=plan["exact"],
                       executor=plan["executor"], slurm=plan["slurm"], controls=plan["controls"], power=plan["power"],
                       screen_samples=plan.get("screen_samples"))
    res = run_zoo_atlas(group, out, log=lambda m: con.print(m), progress=True, interventions=iv_opts, **opts)
    pooled = res.info.pop("interventions_table", None)
    infos = res.info.pop("interventions", None)
    iv_info = None
    if pooled is not None:
        first = next(iter(infos.values()), {}) if infos else {}
        iv_info = {**first, "model": f"zoo {group}", "models": list(dict.fromkeys(pooled["model"])),
                   "per_model": infos}
    written = write_atlas(res.table, res.correlations, res.info, out, hue="model", interventions=pooled,
                          interventions_info=iv_info, settings={"zoo": group, **opts, "interventions": plan})
    _finish(res.correlations, res.info["model"], written, as_json)
    if pooled is not None:
        _finish_interventions(pooled, iv_info)
        from attnscope.interventions.summary import across_models

        summary = across_models(pooled)
        show = summary[summary["statistic"].str.startswith("kept") & summary["intervention"].isin(["sym", "anti"])]
        for (kind, measure), sub in show.groupby(["intervention", "measure"], sort=False):
            con.print(f"{measure} heads under {kind}, kept fraction (median [Q1, Q3], heads): " + "; ".join(
                f"{r.model} {r.median:.2f} [{r.q1:.2f}, {r.q3:.2f}] ({r.heads}{', few' if r.few_units else ''})"
                for r in sub.itertuples()), soft_wrap=True, highlight=False)
