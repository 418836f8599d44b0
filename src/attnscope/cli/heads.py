"""``attnscope heads``: per-head attention metrics (default command), ``cluster`` and ``derive``.

    attnscope heads SOURCE --data CORPUS --windows N --length L [--out FILE] [--json] [--plot DIR] [--js FILE]
    attnscope heads cluster METRICS [--features a,b,c] [--k-min 2 --k-max 8] [--method ward|kmeans|both]
    attnscope heads derive METRICS [--out pattern.yaml] [--layer N]

Thin layer over :mod:`attnscope.heads`; heavy imports happen inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from attnscope.errors import InputError

from ._common import (THREADS, check_device, check_out_dir, check_out_file, check_out_names, echo_json,
                      make_default_group, stderr_console, use_threads, write_out_table)
from ._tables import print_frame, print_table

app = typer.Typer(
    cls=make_default_group("measure"),
    help="Head anatomy: per-head attention metrics (attnscope heads SOURCE ...), clustering, sparse-pattern derivation.",
    no_args_is_help=True,
)


def _plot_dir(plot: Optional[Path]) -> Optional[Path]:
    if plot is None:
        return None
    check_out_dir(plot, "--plot")
    plot.mkdir(parents=True, exist_ok=True)
    return plot


@app.command("measure")
def measure(
    source: str = typer.Argument(..., help="HF model dir / hub id, a GGUF file (extra attnscope[gguf]), or an attnscope checkpoint / run dir."),
    data: str = typer.Option("builtin", "--data", help="Corpus: builtin, a text file/dir, enwik8, hf:NAME, jigsaw:PATH."),
    windows: int = typer.Option(10, "--windows", help="Held-out windows measured (each --length tokens)."),
    length: Optional[int] = typer.Option(None, "--length", help="Window length in tokens (default: the model's max, at most 512; byte models 1024 bytes)."),
    batch_size: int = typer.Option(1, "--batch-size", help="Windows per forward pass."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the per-head table (.csv/.parquet/.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON records on stdout."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write figures into this directory."),
    js: Optional[Path] = typer.Option(None, "--js", help="Also compute head-to-head JS divergences and write them here."),
    js_rows: int = typer.Option(64, "--js-rows", help="Query rows of window 0 used for the JS divergences."),
    device: str = typer.Option("cpu", "--device", help="torch device: cpu, cuda, cuda:N or mps."),
    random_probe: bool = typer.Option(True, "--random-probe/--no-random-probe", help="Also run the repeated-random-tokens probe (8 sequences, T = 127 or what the model allows): columns induction_random, previous_token_random, sink_random."),
    threads: Optional[int] = THREADS,
) -> None:
    """Measure every head of SOURCE on held-out windows of a corpus (streamed layer by layer).

    All metric columns come from the corpus windows (the text probe) except the ``*_random`` columns,
    which come from the repeated-random-tokens probe (BOS, T random tokens, the same T again).
    """
    from attnscope.heads.maps import check_extract_args, extract, open_model, window_plan

    if js is not None and js_rows < 1:
        raise InputError(f"--js needs --js-rows of at least 1, not {js_rows}")
    check_extract_args(windows, length, batch_size, js_rows if js else 0)  # every option before the model loads
    check_out_file(out, "--out", inputs=(source, data))
    check_out_file(js, "--js", inputs=(source, data))
    check_out_names(plot, HEADS_FIGURES, "--plot")
    check_device(device)
    if out is not None and js is not None and out.resolve() == js.resolve():
        raise InputError(f"--out and --js are the same file {out}")
    use_threads(threads)
    plot_dir = _plot_dir(plot)
    model = open_model(source, device=device, plan=window_plan(data, windows, length))  # corpus size checked before the load
    ex_layers: tuple[int, ...] = ()
    if plot_dir is not None:
        ex_layers = tuple(sorted({0, model.n_layers // 2, model.n_layers - 1}))
    res = extract(
        model, data=data, windows=windows, length=length, batch_size=batch_size, js_rows=js_rows if js else 0,
        example_layers=ex_layers, example_len=96, progress=True, device=device,
    )
    df = res.metrics
    if random_probe:
        from attnscope.heads.probes import with_random_probe

        df = with_random_probe(model, df, batch_size=batch_size, progress=True)
    if out is not None:
        write_out_table(df, out, kind="heads")
    if js is not None:
        if res.js is None:  # every "wrote" line below must be true
            raise InputError(f"{model.name}: no JS divergences were computed, so --js {js} was not written")
        write_out_table(res.js, js, kind="heads-js")
    if plot_dir is not None:  # the three figures replace an earlier run's as a whole
        from attnscope.outputs import write_result_set
        from attnscope.plots import heads as hp
        from attnscope.plots import model_label
        from attnscope.plots.base import figure_bytes

        name = model_label(model.name)
        write_result_set(plot_dir, {
            "heads_heatmaps.png": lambda: figure_bytes(hp.metric_heatmaps(df, title=f"{name}: per-head metrics")),
            "heads_scatter.png": lambda: figure_bytes(hp.metric_scatter(df, hue="layer")),
            "heads_maps.png": lambda: figure_bytes(hp.example_maps(
                res.examples, title=f"{name}: attention maps (sqrt scale, window 0)")),
        }, {"source": source, "data": data, "windows": windows, "length": length}, kind="heads")
    if as_json:
        from attnscope.tables import records_to_json

        echo_json(records_to_json(df))
        return
    _summary(df, res.info, out, js, plot_dir)


def _summary(df, info, out, js, plot_dir) -> None:
    from attnscope.heads.metrics import CAUSAL_DEFINED

    from attnscope.plots import model_label

    con = stderr_console()
    streaming = "streamed per layer" if info["streaming"] else "output_attentions (all layers at once)"
    name = model_label(info["model"])
    con.print(
        f"[bold]{escape(name)}[/]: {info['n_layers']} layers x {info['n_heads']} heads, "
        f"{'causal' if info['causal'] else 'bidirectional'}, {info['windows']} windows x {info['length']} tokens, {streaming}"
    )
    cols = ["entropy", "entropy_norm", "sparsity", "distance", "confidence", "sink_first", "prev_mass"]
    rows = [[str(layer), *[f"{sub[c].median():.3f}" for c in cols]] for layer, sub in df.groupby("layer")]
    print_table(con, "per layer: median over heads", ["layer", *cols], rows)
    if not info["causal"]:
        con.print(
            f"bidirectional model: {' and '.join(CAUSAL_DEFINED)} keep their causal definition "
            "(earlier keys only; docs/heads.md)"
        )
    given = str(info.get("source", info["model"]))
    if name != given:
        con.print(f"note: {escape(name)} is read from {escape(given)}", highlight=False)
    notable = []
    for col, label in (("prev_mass", "previous-token"), ("sink_first", "first-token sink"), ("induction_score", "induction"),
                       ("dup_score", "duplicate-token"), ("induction_random", "induction (random probe)"),
                       ("previous_token_random", "previous-token (random probe)")):
        if col in df.columns and df[col].notna().any() and round(float(df[col].max()), 2) > 0:  # no 0.00 "strongest"
            r = df.loc[df[col].idxmax()]
            label += " (causal def.)" if col in CAUSAL_DEFINED and not info["causal"] else ""
            notable.append(f"{label}: L{int(r['layer'])}H{int(r['head'])} ({r[col]:.2f})")
    if notable:
        con.print("strongest heads -- " + "; ".join(notable))
    for what, p in (("table", out), ("JS divergences", js), ("figures", plot_dir)):
        if p is not None:
            con.print(f"wrote {what}: {p}")


@app.command("cluster")
def cluster(
    metrics: Path = typer.Argument(..., help="A metrics table written by `attnscope heads SOURCE --out`."),
    features: str = typer.Option("entropy,sparsity,distance", "--features", help="Comma-separated metric columns."),
    k_min: int = typer.Option(2, "--k-min", help="Fewest clusters tried (at least 2)."),
    k_max: Optional[int] = typer.Option(
        None, "--k-max", help="Most clusters tried (default 8, or --k-min if larger; at most the number of heads - 1)."
    ),
    method: str = typer.Option("both", "--method", help="ward, kmeans or both."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write labels (all k; `best` marks each method's best k); silhouettes go next to it as <stem>_silhouette<ext>."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write figures into this directory."),
    js: Optional[Path] = typer.Option(None, "--js", help="A JS table from `attnscope heads --js`: embed heads with MDS."),
    seed: int = typer.Option(0, "--seed", help="k-means / MDS seed."),
    as_json: bool = typer.Option(False, "--json", help="Print silhouettes, best k and labels (best k) as JSON on stdout."),
) -> None:
    """Cluster heads on z-scored metric features; silhouette per k picks the best k from the data."""
    from attnscope.heads.cluster import check_js_matches, cluster_heads, cluster_profiles, embed_js
    from attnscope.tables import read_table

    check_out_file(out, "--out", inputs=(metrics, js), companions=(_silhouette_name(out),) if out else ())
    check_out_names(plot, ["cluster_silhouette.png", "cluster_js_mds.png",
                           *(f"cluster_map_{m}.png" for m in ("ward", "kmeans"))], "--plot")
    df = read_table(metrics)
    js_table = read_table(js) if js is not None else None
    if js_table is not None:
        check_js_matches(js_table, df, label=str(js))
    feats = [f.strip() for f in features.split(",") if f.strip()]
    res = cluster_heads(df, feats, k_min=k_min, k_max=k_max, method=method, seed=seed)
    emb = embed_js(js_table, seed=seed) if js_table is not None else None
    if out is not None:
        write_out_table(res.labels, out, kind="heads-cluster", companions={_silhouette_name(out): res.silhouette})
    plot_dir = _plot_dir(plot)
    if plot_dir is not None:
        figures = _cluster_figures(res, "cluster_silhouette.png", "cluster_map_{}.png", "best silhouette")
        if emb is not None:
            from attnscope.plots import heads as hp
            from attnscope.plots.base import figure_bytes

            figures["cluster_js_mds.png"] = figure_bytes(hp.js_mds(emb))
        from attnscope.outputs import write_result_set

        write_result_set(plot_dir, figures, {"metrics": str(metrics), "features": features}, kind="heads-cluster")
    if as_json:
        best_rows = res.labels[res.labels["best"]]
        payload = {
            "features": list(res.features),
            "best_k": res.best_k,
            "silhouette": json.loads(res.silhouette.to_json(orient="records")),
            "labels": json.loads(best_rows.to_json(orient="records")),
        }
        if emb is not None:
            payload["mds"] = json.loads(emb.to_json(orient="records"))
        echo_json(json.dumps(payload))
        return
    con = stderr_console()
    methods = list(res.best_k)
    rows = []
    for k in sorted(res.silhouette["k"].unique()):
        cells = [str(k)]
        for m in methods:
            v = res.silhouette[(res.silhouette["method"] == m) & (res.silhouette["k"] == k)]["silhouette"].iloc[0]
            cells.append(f"[bold]{v:.3f}[/]" if res.best_k[m] == k else f"{v:.3f}")
        rows.append(cells)
    print_table(con, f"mean silhouette ({', '.join(res.features)}, z-scored; {len(df)} heads)", ["k", *methods], rows)
    for m, k in res.best_k.items():
        print_frame(con, f"{m}: best k = {k}, cluster profiles", cluster_profiles(df, res.labels, m, res.features))
    if out is not None:
        con.print(f"wrote labels: {out}; silhouettes: {out.with_name(_silhouette_name(out))}", highlight=False)
    if plot_dir is not None:
        con.print(f"wrote figures: {', '.join(sorted(p.name for p in plot_dir.glob('cluster_*.png')))} in {plot_dir}",
                  highlight=False)


@app.command("derive")
def derive(
    metrics: Path = typer.Argument(..., help="A metrics table written by `attnscope heads SOURCE --out`."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the pattern spec (.yaml/.json); usable as attn_pattern."),
    layer: Optional[int] = typer.Option(None, "--layer", help="Derive from this layer only (default: median over layers)."),
    model: Optional[str] = typer.Option(None, "--model", help="Which model of a multi-model table."),
    min_window: int = typer.Option(4, "--min-window", help="Smallest local window proposed (tokens)."),
    max_window: int = typer.Option(128, "--max-window", help="Widest local window (tokens); a head reaching further is global (stride + anchor instead)."),
    sink_threshold: float = typer.Option(0.2, "--sink-threshold", help="First-token attention mass (share, 0..1) that earns an anchor at key 0."),
    as_json: bool = typer.Option(False, "--json", help="Print the pattern spec as JSON on stdout."),
) -> None:
    """Propose a sparse attention pattern per head from its measured metrics."""
    from attnscope.heads.derive import derive_pattern
    from attnscope.tables import read_table

    check_out_file(out, "--out", suffixes=(".yaml", ".yml", ".json"), inputs=(metrics,))
    df = read_table(metrics)
    pat, why = derive_pattern(df, layer=layer, model=model, min_window=min_window, max_window=max_window, sink_threshold=sink_threshold)
    if out is not None:
        from attnscope.outputs import write_result_file

        write_result_file(out, pat.dumps(out), {"metrics": str(metrics)}, kind="heads-derive")
    if as_json:
        echo_json(json.dumps(pat.to_dict()))
        return
    con = stderr_console()
    for r in why.itertuples():
        con.print(f"head {r.head} ({r.summary}): {r.pattern}   [dim]{r.reason}[/]")
    if out is not None:
        con.print(f"wrote pattern: {out}  (train with --attn-pattern {out})")
    else:
        import yaml

        typer.echo(yaml.safe_dump(pat.to_dict(), sort_keys=False), nl=False)


@app.command("study")
def study(
    out: Path = typer.Argument(..., help="Study directory (runs, tables, figures); finished runs are reused."),
    pattern: str = typer.Option("byte-sparse-8h", "--pattern", help="Sparse pattern of the sparse run (preset or spec file)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Optimizer updates per model (default 250)."),
    n_layers: Optional[int] = typer.Option(None, "--n-layers", help="Transformer layers per model (default 4)."),
    d_model: Optional[int] = typer.Option(None, "--d-model", help="Model width d_model (default 128)."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Context length in bytes, also the measured window length (default 256)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sequences per optimizer update (default 16)."),
    data: Optional[str] = typer.Option(None, "--data", help="Byte corpus (default builtin)."),
    windows: int = typer.Option(10, "--windows", help="Held-out windows for the head metrics."),
) -> None:
    """Train a dense and a sparse byte decoder differing only in attention pattern; compare and cluster heads."""
    from attnscope.heads.study import run_study

    check_out_names(out, STUDY_TABLES, "out")  # a file of yours by one of these names: refused before training
    check_out_names(out / "figures", STUDY_FIGURES, "out")
    over = {k: v for k, v in dict(steps=steps, n_layers=n_layers, d_model=d_model, batch_size=batch_size, data=data).items() if v is not None}
    if seq_len is not None:
        over.update(seq_len=seq_len, max_seq_len=seq_len)
    con = stderr_console()
    res = run_study(out, pattern=pattern, windows=windows, train_overrides=over, log=lambda m: con.print(m))
    _write_study(out, res)
    print_frame(con, "study summary", res["summary"])
    con.print(f"best k: {res['clusters'].best_k}; tables and figures in {out}")


#: the figures `attnscope heads SOURCE --plot DIR` writes
HEADS_FIGURES = ("heads_heatmaps.png", "heads_scatter.png", "heads_maps.png")


#: what `attnscope heads study OUT` writes into OUT and OUT/figures (besides its two run folders)
STUDY_TABLES = ("summary.csv", "heads_metrics.csv", "clusters.csv", "clusters_silhouette.csv")
STUDY_FIGURES = ("dense_heatmaps.png", "dense_maps.png", "sparse_heatmaps.png", "sparse_maps.png", "scatter.png",
                 "silhouette.png", "clusters_ward.png", "clusters_kmeans.png")


def _silhouette_name(out: Path) -> str:
    """The silhouettes' file beside ``--out X.csv``: X_silhouette.csv."""
    return f"{out.stem}_silhouette{out.suffix}"


def _cluster_figures(res, silhouette_name: str, map_name: str, note: str) -> dict[str, bytes]:
    """The silhouette curve and, per method, the cluster map at its best k: {file name: PNG bytes}."""
    from attnscope.plots import heads as hp
    from attnscope.plots.base import figure_bytes

    figures = {silhouette_name: figure_bytes(hp.silhouette_curve(res.silhouette))}
    for m, k in res.best_k.items():
        best = res.labels[(res.labels["method"] == m) & (res.labels["k"] == k)]
        figures[map_name.format(m)] = figure_bytes(hp.cluster_map(best, title=f"{m}, k = {k} ({note})"))
    return figures


def _write_study(out: Path, res: dict) -> None:
    """The study's tables (summary, per-head metrics, clusters) and figures (OUT/figures), each folder one result
    (:func:`attnscope.outputs.write_result_set`)."""
    from attnscope.outputs import write_result_set
    from attnscope.plots import heads as hp
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import table_bytes

    tables = {"summary.csv": res["summary"], "heads_metrics.csv": res["metrics"],
              "clusters.csv": res["clusters"].labels, "clusters_silhouette.csv": res["clusters"].silhouette}
    figures = {}
    for name, sub in res["metrics"].groupby("model"):
        figures[f"{name}_heatmaps.png"] = figure_bytes(hp.metric_heatmaps(sub, title=f"{name} model: per-head metrics"))
        figures[f"{name}_maps.png"] = figure_bytes(hp.example_maps(
            res["examples"][name], title=f"{name} model: attention maps (window 0, first 96 bytes)"))
    figures["scatter.png"] = figure_bytes(hp.metric_scatter(res["metrics"], hue="model"))
    figures.update(_cluster_figures(res["clusters"], "silhouette.png", "clusters_{}.png",
                                    "best silhouette; clustered jointly"))
    write_result_set(out / "figures", figures, kind="heads-study")
    write_result_set(out, {n: table_bytes(t, n) for n, t in tables.items()}, kind="heads-study")
