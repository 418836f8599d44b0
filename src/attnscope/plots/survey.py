"""Figures and tables of a zoo survey, like the paper's: scores against model size, encoder vs decoder.

From a survey results table (``merged.parquet`` of :func:`attnscope.zoo.survey.run_zoo`, or any
score table) :func:`survey_report` writes:

* ``survey_scores.png``  s and d (median over layers, 25-75 % bars) against the number of parameters
  (log x), encoders navy and decoders purple, one column of panels per modality;
* ``survey_encdec.png``  encoder vs decoder (and cross-attention) stacks of encoder-decoder models,
  side by side per model;
* ``survey_summary.csv`` one row per model and stack: our median [Q1, Q3] and the paper's;
* ``survey_table.md`` / ``survey_table.tex`` the same as Markdown and LaTeX tables.

Functions take tidy tables; each figure function returns a matplotlib Figure (Agg, not pyplot).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from attnscope.errors import InputError

from . import new_figure, save_figure
from .geometry import STACK_COLORS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

MODALITY_ORDER = ("text", "vision", "audio")
SCORE_LABELS = {"symmetry": "symmetry s", "directionality": "directionality d"}
STACK_ORDER = ("encoder", "decoder", "cross")


# ------------------------------------------------------------------------------------- tables


def load_results(results: str | Path) -> "pd.DataFrame":
    """A survey table from a file (.parquet/.csv/.json) or a survey directory (merged table or store)."""
    from attnscope.tables import read_table

    p = Path(results)
    if p.is_dir():
        for name in ("merged.parquet", "merged.csv"):
            if (p / name).is_file():
                return read_table(p / name)
        if (p / "tasks").is_dir():
            from attnscope.runs import ResultsStore

            df = ResultsStore(p).merge()
            if len(df):
                return df
        raise InputError(f"{p}: no merged.parquet, merged.csv or finished results in this directory")
    return read_table(p)


def attach_zoo_columns(df: "pd.DataFrame", zoo_file: str | Path | None = None) -> "pd.DataFrame":
    """Fill ``modality``, ``type``, ``params`` and ``caveats`` from the registry for models whose rows lack them."""
    from attnscope.zoo import load_registry

    df = df.copy()
    entries = {e.id: e for e in load_registry()}
    if zoo_file:
        entries.update({e.id: e for e in load_registry(zoo_file)})
    def lookup(model: str, col: str) -> object:
        e = entries.get(model)
        if e is None:
            return None
        return ",".join(e.caveats) if col == "caveats" else getattr(e, col)

    for col in ("modality", "type", "params", "caveats"):
        if col not in df.columns:
            df[col] = None
        missing = df[col].isna()
        if missing.any():
            df.loc[missing, col] = df.loc[missing, "model"].map(lambda m, c=col: lookup(m, c))
    types = df["type"].isna()
    if types.any():  # not in any registry: infer from the stacks present
        stacks = df.groupby("model")["stack"].agg(lambda s: set(s))
        df.loc[types, "type"] = df.loc[types, "model"].map(
            lambda m: "encoder-decoder" if {"encoder", "decoder"} <= stacks[m] else next(iter(stacks[m] - {"cross"}), None)
        )
    return df


def survey_summary(df: "pd.DataFrame", zoo_file: str | Path | None = None) -> "pd.DataFrame":
    """One row per model and stack: median [Q1, Q3] over layers of s and d, zoo columns, the paper's values."""
    import pandas as pd

    from attnscope.geometry import summarize
    from attnscope.zoo import published_table

    needed = {"model", "stack", "level", "layer", "symmetry", "directionality"}
    if missing := needed - set(df.columns):
        raise InputError(f"not a score table: missing column(s) {', '.join(sorted(missing))}")
    df = attach_zoo_columns(df, zoo_file)
    if "family" not in df.columns:
        df["family"] = ""
    summ = summarize(df)
    zoo_cols = df.groupby("model", sort=False)[["modality", "type", "params", "caveats"]].first().reset_index()
    summ = summ.merge(zoo_cols, on="model", how="left")
    pub = published_table()
    if zoo_file:
        pub = pd.concat([published_table(zoo_file), pub], ignore_index=True).drop_duplicates(["model", "stack"])
    # the paper plotted MusicGen's cross-attention as its "decoder": compare it with our cross stack
    cross = pub["caveats"].fillna("").str.contains("decoder-is-cross-attention") & (pub["stack"] == "decoder")
    pub.loc[cross, "stack"] = "cross"
    pub = pub.rename(columns={c: f"paper_{c}" for c in pub.columns if c not in ("model", "stack")})
    summ = summ.merge(pub, on=["model", "stack"], how="left")
    order = {m: i for i, m in enumerate(MODALITY_ORDER)}
    summ["_mod"] = summ["modality"].map(lambda m: order.get(m, len(order)))
    summ["_stack"] = summ["stack"].map({s: i for i, s in enumerate(STACK_ORDER)})
    summ["params"] = pd.to_numeric(summ["params"], errors="coerce")
    summ = summ.sort_values(["_mod", "params", "model", "_stack"], na_position="last")
    summ = summ.drop(columns=["_mod", "_stack"]).reset_index(drop=True)
    return summ


def _fmt(med: float, q1: float, q3: float) -> str:
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (med, q1, q3)):
        return ""
    return f"{med:+.2f} [{q1:+.2f}, {q3:+.2f}]"


def _table_rows(summary: "pd.DataFrame") -> list[list[str]]:
    rows = []
    for r in summary.itertuples(index=False):
        rd = r._asdict()
        params = rd.get("params")
        rows.append([
            str(rd["model"]), str(rd["stack"]), str(rd["n_layers"]),
            "" if params is None or (isinstance(params, float) and math.isnan(params)) else f"{float(params) / 1e6:.1f}M",
            _fmt(rd["symmetry_median"], rd["symmetry_q1"], rd["symmetry_q3"]),
            _fmt(rd.get("paper_symmetry_median"), rd.get("paper_symmetry_q1"), rd.get("paper_symmetry_q3")),
            _fmt(rd["directionality_median"], rd["directionality_q1"], rd["directionality_q3"]),
            _fmt(rd.get("paper_directionality_median"), rd.get("paper_directionality_q1"),
                 rd.get("paper_directionality_q3")),
            str(rd.get("caveats") or ""),
        ])  # fmt: skip
    return rows


TABLE_HEADER = ["model", "stack", "layers", "params", "s (ours)", "s (paper)", "d (ours)", "d (paper)", "caveats"]


def summary_markdown(summary: "pd.DataFrame") -> str:
    """A Markdown table: median [Q1, Q3] over layers per model and stack, ours next to the paper's."""
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in _table_rows(summary)]
    return "\n".join(lines) + "\n"


def _tex_escape(s: str) -> str:
    """Escape LaTeX specials in a cell."""
    table = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
             "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}
    return "".join(table.get(ch, ch) for ch in s)


def summary_latex(summary: "pd.DataFrame") -> str:
    """A LaTeX (booktabs) table of the same content as :func:`summary_markdown`."""
    out = [r"\begin{tabular}{lllr" + "l" * (len(TABLE_HEADER) - 4) + "}", r"\toprule",
           " & ".join(_tex_escape(h) for h in TABLE_HEADER) + r" \\", r"\midrule"]
    out += [" & ".join(_tex_escape(c) for c in row) + r" \\" for row in _table_rows(summary)]
    out += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------ figures


def plot_scores_vs_params(summary: "pd.DataFrame", annotate_max: int = 10, show_paper: bool = True) -> "Figure":
    """s and d vs number of parameters (log x), median over layers with 25-75 % bars; a column per modality.

    Self-attention stacks only (encoder navy, decoder purple); models without a parameter count are left
    out. Points are labelled with the model name in panels of at most ``annotate_max`` models; hollow
    markers show the paper's published medians where the registry has them (``show_paper``).
    """
    import numpy as np

    data = summary[summary["stack"].isin(["encoder", "decoder"])].copy()
    data["params"] = data["params"].astype(float)
    data = data[np.isfinite(data["params"]) & (data["params"] > 0)]
    if data.empty:
        raise InputError("no model with a parameter count to plot (add `params` via the zoo registry)")
    mods = [m for m in MODALITY_ORDER if m in set(data["modality"])] + sorted(
        {m for m in data["modality"].dropna() if m not in MODALITY_ORDER})
    fig = new_figure(figsize=(4.2 * len(mods), 6.4), layout="constrained")
    axes = np.atleast_2d(fig.subplots(2, len(mods), sharex="col", sharey="row", squeeze=False))
    for j, mod in enumerate(mods):
        sub = data[data["modality"] == mod]
        for i, col in enumerate(("symmetry", "directionality")):
            ax = axes[i, j]
            for stack in ("encoder", "decoder"):
                s = sub[sub["stack"] == stack]
                if s.empty:
                    continue
                med = s[f"{col}_median"].to_numpy(float)
                err = np.vstack([med - s[f"{col}_q1"].to_numpy(float), s[f"{col}_q3"].to_numpy(float) - med])
                ax.errorbar(s["params"], med, yerr=np.clip(err, 0, None), fmt="o", ms=5, capsize=2, lw=1,
                            color=STACK_COLORS[stack], label=f"{stack}s ({len(s)})")
                paper_col = f"paper_{col}_median"
                if show_paper and paper_col in s.columns and s[paper_col].notna().any():
                    ax.plot(s["params"], s[paper_col].astype(float), "o", ms=7, mfc="none", alpha=0.6,
                            color=STACK_COLORS[stack], label=f"{stack}s, paper")
                if sub["model"].nunique() <= annotate_max:
                    for x, y, m in zip(s["params"], med, s["model"]):
                        ax.annotate(str(m).split("/")[-1], (x, y), xytext=(4, 3), textcoords="offset points",
                                    fontsize=6.5, color=STACK_COLORS[stack])
            ax.axhline(0, color="0.6", lw=0.6, zorder=0)
            ax.set_xscale("log")
            lo, hi = float(sub["params"].min()), float(sub["params"].max())
            ax.set_xlim(lo / 2, hi * 2)  # also keeps a single-model panel from collapsing
            ax.set_ylim(-1.05, 1.05)
            if i == 0:
                ax.set_title(mod)
            if i == 1:
                ax.set_xlabel("number of parameters")
            if j == 0:
                ax.set_ylabel(SCORE_LABELS[col] + " (median over layers)")
            if i == 0:
                ax.legend(loc="lower left", fontsize=8, frameon=False)
    fig.suptitle("W_qk geometry across models (bars: 25-75 % over layers)")
    return fig


def plot_encoder_decoder(summary: "pd.DataFrame") -> "Figure | None":
    """Encoder vs decoder (and cross-attention) stacks of encoder-decoder models, side by side per model."""
    import numpy as np

    data = summary[summary["type"] == "encoder-decoder"]
    models = list(dict.fromkeys(data["model"]))
    if not models:
        return None
    stacks = [s for s in STACK_ORDER if s in set(data["stack"])]
    width = 0.8 / len(stacks)
    fig = new_figure(figsize=(max(4.5, 0.9 * len(models) + 2), 6.0), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    x = np.arange(len(models))
    for ax, col in zip(axes, ("symmetry", "directionality")):
        for k, stack in enumerate(stacks):
            s = data[data["stack"] == stack].set_index("model").reindex(models)
            med = s[f"{col}_median"].to_numpy(float)
            err = np.vstack([med - s[f"{col}_q1"].to_numpy(float), s[f"{col}_q3"].to_numpy(float) - med])
            ax.errorbar(x + (k - (len(stacks) - 1) / 2) * width, med, yerr=np.clip(np.nan_to_num(err), 0, None),
                        fmt="s", ms=6, capsize=2, lw=1, color=STACK_COLORS[stack], label=stack)
        ax.axhline(0, color="0.6", lw=0.6, zorder=0)
        ax.set_ylim(-1.05, 1.05)
        ax.set_ylabel(SCORE_LABELS[col])
    axes[0].legend(loc="lower left", fontsize=8, frameon=False, ncol=len(stacks))
    axes[1].set_xlim(-0.6, len(models) - 0.4)
    axes[1].set_xticks(x)
    axes[1].set_xticklabels([m.split("/")[-1] for m in models], rotation=35, ha="right", fontsize=8)
    fig.suptitle("encoder-decoder models, stack by stack\n(median and 25-75 % over layers)", fontsize=10)
    return fig


def survey_report(results_path: str | Path, out_dir: str | Path, *, zoo_file: str | Path | None = None) -> list[Path]:
    """Write the survey figures and tables for a results table/directory into ``out_dir``; return the paths."""
    from attnscope.tables import atomic_write_text, write_table

    df = load_results(results_path)
    if df.empty:
        raise InputError(f"{results_path}: the results table is empty")
    summary = survey_summary(df, zoo_file)
    out = Path(out_dir)
    paths = [write_table(summary, out / "survey_summary.csv")]
    paths.append(atomic_write_text(out / "survey_table.md", summary_markdown(summary)))
    paths.append(atomic_write_text(out / "survey_table.tex", summary_latex(summary)))
    try:
        paths.append(save_figure(plot_scores_vs_params(summary), out / "survey_scores.png"))
    except InputError:
        pass  # no parameter counts: tables only
    fig = plot_encoder_decoder(summary)
    if fig is not None:
        paths.append(save_figure(fig, out / "survey_encdec.png"))
    return paths
