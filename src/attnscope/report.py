"""A model-level report: one self-contained HTML page of a model's W_qk geometry (and head metrics).

:func:`build_report` computes everything (metadata from the model's config, per-head and per-layer
scores, the paper's published values when the registry (:mod:`attnscope.zoo`) lists the model,
figures, and the per-head attention metrics of ``attnscope heads`` when ``data`` is given);
:func:`render_html` turns it into one HTML string with the figures embedded as base64 PNG (no
external file, script or font); :func:`write_report` writes it atomically as ``DIR/report.html`` (never over a
``report.html`` of the user's).
:func:`check_out_dir` is the first thing the CLI calls, so an unwritable ``--out`` fails before any
work is done.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from attnscope.errors import InputError
from attnscope.tables import make_out_dir

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["REPORT_NAME", "ModelReport", "build_report", "check_out_dir", "render_html", "write_report"]

REPORT_NAME = "report.html"

#: config keys shown in the metadata table (when present), in this order
META_KEYS = (
    "_name_or_path", "model_type", "architectures", "hidden_size", "d_model", "n_embd", "num_hidden_layers",
    "n_layer", "num_layers", "num_attention_heads", "n_head", "num_key_value_heads", "head_dim",
    "intermediate_size", "max_position_embeddings", "vocab_size", "is_decoder", "torch_dtype",
)  # fmt: skip


@dataclass
class ModelReport:
    """Everything the page shows (tables are tidy DataFrames, figures PNG bytes)."""

    name: str
    source: str
    metadata: dict[str, Any]
    scores: "pd.DataFrame"  # the rows of attnscope.geometry.score()
    summary: "pd.DataFrame"  # per stack: median [Q1, Q3] over layers, with published values if any
    figures: dict[str, bytes] = field(default_factory=dict)  # caption -> PNG
    heads: "pd.DataFrame | None" = None  # attnscope heads' per-head metrics table
    heads_info: dict[str, Any] | None = None
    registry_id: str | None = None
    caveats: tuple[str, ...] = ()
    #: rotary models: median [Q1, Q3] over layers of s and d of the form at each offset (None: not rotary)
    offsets: "pd.DataFrame | None" = None
    atlas: Any = None  # an attnscope.atlas.AtlasResult: geometry beside behaviour, per head
    #: why the atlas section asked for is left out (a model that cannot be run for attention maps); None otherwise
    atlas_note: str | None = None
    #: per stack and layer: the rank cascade (:func:`attnscope.geometry.rank_cascade`); None without spectra
    cascade: "pd.DataFrame | None" = None


def check_out_dir(out: str | os.PathLike) -> Path:
    """``out`` as a writable directory (created if missing) that holds no file of the user's named report.html
    (:func:`attnscope.outputs.check_result_names`); one line otherwise, before any work."""
    from attnscope.outputs import check_result_names

    check_result_names(Path(out).expanduser(), [REPORT_NAME], params="out")
    return make_out_dir(out, "out")


def _png(fig: "Figure") -> bytes:
    """PNG bytes of a figure (attnscope.plots figures are not registered with pyplot: nothing to release)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)  # the figures lay themselves out (constrained layout)
    return buf.getvalue()


def _registry_entry(source: str, name: str | None, registry: str | Path | None) -> Any:
    """The zoo entry of this model: by its id (source or name) or by its installed local copy's path."""
    from attnscope.zoo.registry import entry_for_path, get_entry

    for wanted in (str(source), name):
        entry = get_entry(str(wanted), registry) if wanted else None
        if entry is not None:
            return entry
    return entry_for_path(source, registry)


def _metadata(source: str, family: str) -> tuple[str, dict[str, Any]]:
    """(the source's display name, selected config fields + the scoring family)."""
    from attnscope.sources import open_source

    from attnscope.zoo.registry import resolve_spec

    with open_source(resolve_spec(source)) as src:
        cfg, src_name = dict(src.config), src.name
    meta: dict[str, Any] = {"source": str(source), "attnscope family": family}
    for key in META_KEYS:
        if key in cfg and cfg[key] not in (None, "", []):
            meta[key] = cfg[key]
    return src_name, meta


def _summary_with_published(scores: "pd.DataFrame", entry: Any) -> "pd.DataFrame":
    from attnscope.geometry import summarize

    summ = summarize(scores)
    pub = entry.published if entry is not None else {}
    for col in ("symmetry", "directionality"):
        summ[f"{col}_published"] = [getattr(pub[s], col)[0] if s in pub else float("nan") for s in summ["stack"]]
    return summ


def build_report(
    source: str,
    *,
    name: str | None = None,
    k: float = 2.0,
    data: str | None = None,
    windows: int = 4,
    length: int | None = None,
    registry: str | Path | None = None,
    layer: int = 0,
    device: str = "cpu",
    progress: bool = False,
    atlas: bool = False,
    spectra: bool = True,
) -> ModelReport:
    """Score ``source`` (and measure its heads on ``data`` when given) into a :class:`ModelReport`.

    name: the model's name in every table and title (default: its canonical id, :func:`attnscope.naming.model_label`).
    registry: a zoo YAML (default: the packaged one) to look up published values in.
    layer: the layer of the explicit W_qk[:50, :50] figure.
    atlas: also run both behaviour probes (text windows of ``data``, default builtin) and add the atlas
    section (:mod:`attnscope.atlas`): every head's s and d beside what it does, interactive. A model that
    cannot be run for attention maps (CTranslate2, ONNX) keeps its report; ``atlas_note`` says why the
    section is left out.
    spectra: also the spectra of every form's symmetric and antisymmetric parts (:mod:`attnscope.geometry.spectra`):
    their effective ranks against relative depth (a table and a figure).
    """
    from attnscope.geometry import score, wqk_block
    from attnscope.plots.geometry import (
        plot_head_heatmaps,
        plot_layer_curves,
        plot_wqk_block,
    )

    if windows < 1:
        raise InputError(f"windows must be at least 1, not {windows}", params="windows")
    if data is not None or atlas:  # the device runs the model: checked before the weights are scored
        from attnscope.devices import check_device

        check_device(device)
    entry = _registry_entry(source, name, registry)
    display = name or (entry.id if entry is not None else None)
    scores = score(source, k=k, progress=progress, name=display, spectra=spectra)
    _, meta = _metadata(source, str(scores["family"].iloc[0]))
    display = display or str(scores["model"].iloc[0])  # the canonical id (attnscope.naming.model_label)
    figures: dict[str, bytes] = {}
    figures["s and d per layer (layer form M_L; band: IQR over heads)"] = _png(plot_layer_curves(scores, title=display))
    if (scores["level"] == "head").any():
        figures["s and d of every head (layer x head)"] = _png(plot_head_heatmaps(scores, title=display))
    for stack in dict.fromkeys(scores["stack"]):
        n_layers = int(scores.loc[scores["stack"] == stack, "layer"].max()) + 1
        li = min(layer, n_layers - 1)
        block = wqk_block(source, li, stack=stack)
        caption = f"W_qk[:{block.shape[0]}, :{block.shape[1]}] of {stack} layer {li}"
        figures[caption] = _png(plot_wqk_block(block, f"{display} · {caption}"))
    cascade = None
    if spectra and scores["anti_rank"].notna().any():
        from attnscope.geometry import rank_cascade
        from attnscope.plots.spectra import plot_rank_cascade

        cascade = rank_cascade(scores[scores["anti_rank"].notna()])
        figures["effective rank of the routing (antisymmetric) and filtering (symmetric) parts against relative "
                "depth (median over heads; band: IQR)"] = _png(plot_rank_cascade(cascade, title=display))
    offsets, rotary_figures = _rotary_section(source, display, k)
    figures.update(rotary_figures)
    heads = info = None
    if data is not None:
        from attnscope.heads.maps import extract
        from attnscope.plots.heads import metric_heatmaps

        res = extract(source, data=data, windows=windows, length=length, progress=progress, device=device)
        heads, info = res.metrics.assign(model=display), {**res.info, "model": display}  # one name in every table
        figures["attention-head metrics (mean over windows)"] = _png(metric_heatmaps(heads, title=f"{display}: per-head metrics"))
    at = atlas_note = None
    if atlas:
        from attnscope.atlas import atlas as run_atlas
        from attnscope.errors import UnsupportedError

        try:
            at = run_atlas(source, data=data or "builtin", name=display, device=device, progress=progress)
        except UnsupportedError as exc:  # weights only (CTranslate2, ONNX): the report stands without it
            atlas_note = str(exc)
    return ModelReport(
        name=display, source=str(source), metadata=meta, scores=scores,
        summary=_summary_with_published(scores, entry), figures=figures, heads=heads, heads_info=info,
        registry_id=entry.id if entry is not None else None, caveats=tuple(entry.caveats) if entry is not None else (),
        offsets=offsets,
        atlas=at, atlas_note=atlas_note, cascade=cascade,
    )  # fmt: skip


def _rotary_section(source: str, display: str, k: float) -> tuple["pd.DataFrame | None", dict[str, bytes]]:
    """For a rotary model: s and d of the layer forms at log-spaced offsets up to the trained context
    (summary and figures), and the heads x wavelength energy of the middle layer; nothing otherwise."""
    from attnscope.errors import UnsupportedError
    from attnscope.geometry import frequencies, parse_offsets, score, summarize
    from attnscope.geometry.offsets import PositionNote
    from attnscope.plots.offsets import plot_frequency_usage, plot_offset_curves, plot_offset_heatmaps

    try:
        freq = frequencies(source, name=display)
    except UnsupportedError:  # no rotary positions (or a rotary variant --offsets does not handle)
        return None, {}
    context = freq["context_length"].dropna()
    stop = int(context.iloc[0]) if len(context) else 4096
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PositionNote)
        df = score(source, k=k, levels=("layer",), name=display, offsets=parse_offsets(f"log:0:{stop}:12"))
    figures = {
        f"s and d of the layer forms at each offset (query - key position, up to the trained context {stop})":
            _png(plot_offset_curves(df, title=display)),
        "s and d per layer and offset": _png(plot_offset_heatmaps(df, title=display)),
    }  # fmt: skip
    layers = sorted(freq["layer"].unique().tolist())
    mid = layers[len(layers) // 2]
    caption = f"share of each head's W_qk energy by rotary pair, layer {mid} (wavelength in tokens)"
    figures[caption] = _png(plot_frequency_usage(freq, mid, stop if len(context) else None, title=f"{display} · layer {mid}"))
    return summarize(df), figures


# ---- HTML --------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #1b1b1f; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.1em; } h2 { border-bottom: 2px solid #1f2a6b; padding-bottom: 0.15em; margin-top: 1.8em; }
.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.92em; }
th, td { border: 1px solid #ccd; padding: 0.25em 0.6em; text-align: right; }
th { background: #eef0f8; } td.l, th.l { text-align: left; }
tr:nth-child(even) td { background: #f8f8fc; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #dde; }
figcaption { color: #444; font-size: 0.9em; } .note { color: #555; font-size: 0.9em; }
details { margin: 0.5em 0 1em; } .scroll { overflow-x: auto; }
"""


def _cell(v: Any, digits: int = 3) -> str:
    if isinstance(v, float):
        return "&ndash;" if math.isnan(v) else f"{v:.{digits}f}" if abs(v) < 10 else f"{v:.4g}"
    return html.escape(str(v))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_cell(v)}</td>' for i, v in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f'<div class="scroll"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def _frame(df: "pd.DataFrame", left: int = 1) -> str:
    return _table([str(c) for c in df.columns], [list(r) for r in df.itertuples(index=False, name=None)], left)


def _iqr(med: float, q1: float, q3: float) -> str:
    return "&ndash;" if math.isnan(med) else f"{med:+.2f} [{q1:+.2f}, {q3:+.2f}]"


def _published(v: Any) -> Any:
    return "not in the paper" if isinstance(v, float) and math.isnan(v) else v


def _scores_html(rep: ModelReport) -> list[str]:
    """The scores table: median [Q1, Q3] per stack, with the paper's values in columns of their own only
    when the paper scored at least one of the stacks ("not in the paper" where it did not)."""
    s = rep.summary
    cols = ("symmetry", "directionality")
    paper = any(s[f"{c}_published"].notna().any() for c in cols)
    rows = []
    for _, r in s.iterrows():
        row = [r["stack"], r["n_layers"]]
        for c in cols:
            row.append(_iqr(r[f"{c}_median"], r[f"{c}_q1"], r[f"{c}_q3"]))
            row += [_published(r[f"{c}_published"])] if paper else []
        rows.append(row)
    header = ["stack", "layers", "symmetry s", *(["s (paper)"] if paper else []), "directionality d",
              *(["d (paper)"] if paper else [])]
    where = f" (registry id <code>{html.escape(rep.registry_id)}</code>)" if rep.registry_id else ""
    note = (f'"paper" is the published median{where}' if paper else
            f"the paper published no values for this model{where or ' (it is not in the registry)'}")
    return ["<h2>Scores</h2>",
            f'<p class="note">Median [Q1, Q3] over layers of the layer form M<sub>L</sub>; {note}.</p>',
            _table(header, rows)]


def render_html(rep: ModelReport) -> str:
    """The report as one self-contained HTML document (figures as base64 PNG data URIs), framed by
    :func:`attnscope.pages.document`."""
    from attnscope import __version__
    from attnscope.pages import document

    esc = html.escape
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        f'<p class="sub">attnscope {esc(__version__)} model report, {stamp}. Symmetry s and directionality d of '
        "W<sub>qk</sub> = W<sub>q</sub> W<sub>k</sub><sup>T</sup> (Saponati et al., ICML 2025): s = +1 symmetric, "
        "&minus;1 skew; d &lt; 0 = a few dominant key columns (the decoder signature).</p>",
        "<h2>Model</h2>",
        _table(["field", "value"], left=2, rows=[[k, ", ".join(map(str, v)) if isinstance(v, list) else v] for k, v in rep.metadata.items()]),
    ]  # fmt: skip
    parts += _scores_html(rep)
    if rep.caveats:
        parts.append(f'<p class="note">Registry caveats: {esc(", ".join(rep.caveats))} (a correct re-run is expected to differ).</p>')
    if rep.offsets is not None:
        o = rep.offsets
        rows = [[r["stack"], r["offset"], _iqr(r["symmetry_median"], r["symmetry_q1"], r["symmetry_q3"]),
                 _iqr(r["directionality_median"], r["directionality_q1"], r["directionality_q3"])]
                for _, r in o.iterrows()]  # fmt: skip
        parts += [
            "<h3>Position-aware: the form at each offset (rotary model)</h3>",
            '<p class="note">A rotary model applies M<sub>o</sub> = W<sub>q</sub> G(o) W<sub>k</sub><sup>T</sup> '
            "between a query and a key o positions behind it; offset 0 is the table above. Median [Q1, Q3] over "
            "layers (docs/geometry.md, position-aware geometry).</p>",
            _table(["stack", "offset", "symmetry s", "directionality d"], rows, left=1),
        ]
    if rep.cascade is not None:
        c = rep.cascade
        rows = [[r["stack"], r["layer"], f"{r['relative_depth']:.2f}", r["anti_rank"], r["sym_rank"],
                 r["sym_signature"], r["anti_top2"]] for _, r in c.iterrows()]  # fmt: skip
        parts += [
            "<h3>Routing and filtering: spectra of the parts</h3>",
            '<p class="note">Per layer, the median over heads of the effective rank (Roy &amp; Vetterli: exp of the '
            "entropy of the normalised singular values) of each head's antisymmetric part (routing) and symmetric "
            "part (filtering) of W<sub>qk</sub>, the signature of the symmetric part (+1: matches like with like, "
            "&minus;1: unlike) and the energy share of the antisymmetric part's top two singular values "
            "(docs/geometry.md, spectra).</p>",
            _table(["stack", "layer", "depth", "anti_rank", "sym_rank", "signature S", "top-2 of A"], rows, left=1),
        ]
    lay = rep.scores[rep.scores["level"] == "layer"]
    if not lay.empty:
        cols = ["stack", "layer", "symmetry", "directionality", "frobenius_norm", "n_outlier_rows", "n_outlier_cols"]
        parts += ["<h3>Per layer (M<sub>L</sub>)</h3>", _frame(lay[[c for c in cols if c in lay.columns]])]
    hd = rep.scores[rep.scores["level"] == "head"]
    if not hd.empty:
        cols = ["stack", "layer", "head", "symmetry", "directionality", "frobenius_norm"]
        parts += [
            f"<details><summary>Per head ({len(hd)} rows)</summary>",
            _frame(hd[[c for c in cols if c in hd.columns]]),
            "</details>",
        ]
    parts.append("<h2>Figures</h2>")
    for caption, png in rep.figures.items():
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{b64}"><figcaption>{esc(caption)}</figcaption></figure>')
    if rep.heads is not None:
        parts.append(_heads_html(rep.heads, rep.heads_info or {}))
    if rep.atlas is not None:
        from attnscope.atlas.html import atlas_section

        parts.append(atlas_section(rep.atlas.table, rep.atlas.correlations, rep.atlas.info, maps=rep.atlas.maps,
                                   views=getattr(rep.atlas, "views", None)))
    elif rep.atlas_note is not None:
        parts += ["<h2>Geometry meets behaviour (atlas)</h2>",
                  f'<p class="note">No atlas section for this model: {esc(rep.atlas_note)}.</p>']
    return document(f"attnscope report: {rep.name}", "\n".join(parts), css=_CSS, heading=rep.name)


def _heads_html(df: "pd.DataFrame", info: dict[str, Any]) -> str:
    from attnscope.heads.metrics import CAUSAL_DEFINED

    causal = bool(info.get("causal"))
    cols = ["entropy", "entropy_norm", "sparsity", "distance", "confidence", "sink_first", "prev_mass", "dup_score", "induction_score"]
    cols = [c for c in cols if c in df.columns]
    per_layer = df.groupby("layer")[cols].median().reset_index()
    labels = [c + (" (causal def.)" if c in CAUSAL_DEFINED and not causal else "") for c in cols]
    note = (
        f"{info.get('windows', '?')} windows x {info.get('length', '?')} tokens, "
        f"{'causal' if causal else 'bidirectional'} model."
    )
    if not causal:
        note += f" {', '.join(CAUSAL_DEFINED)} keep their causal definition (earlier keys only)."
    show = ["layer", "head", *cols]
    return "\n".join([
        "<h2>Attention heads</h2>", f'<p class="note">{html.escape(note)} Median over heads per layer:</p>',
        _table(["layer", *labels], [list(r) for r in per_layer.itertuples(index=False, name=None)]),
        f"<details><summary>Per head ({len(df)} rows)</summary>", _frame(df[show]), "</details>",
    ])  # fmt: skip


def write_report(rep: ModelReport, out: str | os.PathLike) -> Path:
    """Write ``out/report.html`` atomically as attnscope's result there (it replaces only a report attnscope wrote,
    :func:`attnscope.outputs.write_result_set`); returns its path."""
    from attnscope.outputs import write_result_set

    return write_result_set(check_out_dir(out), {REPORT_NAME: lambda: render_html(rep)}, kind="report")[0]
