"""Tables of a zoo survey next to the paper's: load the results, join the registry, summarise, format.

From a survey results table (``merged.parquet`` of :func:`attnscope.zoo.survey.run_zoo`, a results store,
or any score table):

* :func:`load_results`        the score table of a file or survey directory;
* :func:`attach_zoo_columns`  ``modality``, ``type``, ``params``, ``caveats`` from the registry;
* :func:`survey_summary`      one row per model and stack: our median [Q1, Q3] over layers and the paper's;
* :func:`summary_markdown` / :func:`summary_latex`  the same as Markdown and LaTeX (booktabs) tables.

Everything here returns data; ``attnscope geometry plot`` writes ``survey_summary.csv``,
``survey_table.md`` and ``survey_table.tex`` next to the figures of :mod:`attnscope.plots.survey`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from attnscope.errors import InputError
from attnscope.runs import ResultsStore
from attnscope.tables import read_table

from .registry import MODALITY_ORDER, STACK_ORDER, load_registry, published_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd



def load_results(results: str | Path) -> "pd.DataFrame":
    """A survey table from a file (.parquet/.csv/.json) or a survey directory (merged table or store)."""
    p = Path(results)
    if p.is_dir():
        for name in ("merged.parquet", "merged.csv"):
            if (p / name).is_file():
                return read_table(p / name)
        if (p / "tasks").is_dir():
            df = ResultsStore(p).merge()
            if len(df):
                return df
        raise InputError(f"{p}: no merged.parquet, merged.csv or finished results in this directory")
    return read_table(p)


def attach_zoo_columns(df: "pd.DataFrame", zoo_file: str | Path | None = None) -> "pd.DataFrame":
    """Fill ``modality``, ``type``, ``params`` and ``caveats`` from the registry for models whose rows lack them."""
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
        if missing.any():  # one lookup per model, then a vectorised map over the rows
            per_model = {m: lookup(m, col) for m in df.loc[missing, "model"].unique()}
            df.loc[missing, col] = df.loc[missing, "model"].map(per_model)
    types = df["type"].isna()
    if types.any():  # not in any registry: infer from the stacks present
        stacks = df.groupby("model")["stack"].agg(lambda s: set(s))
        inferred = {m: "encoder-decoder" if {"encoder", "decoder"} <= st else next(iter(st - {"cross"}), None)
                    for m, st in stacks.items()}
        df.loc[types, "type"] = df.loc[types, "model"].map(inferred)
    return df


def survey_summary(df: "pd.DataFrame", zoo_file: str | Path | None = None) -> "pd.DataFrame":
    """One row per model and stack: median [Q1, Q3] over layers of s and d, zoo columns, the paper's values."""
    import pandas as pd

    from attnscope.geometry import summarize

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
