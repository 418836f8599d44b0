"""Scoring pipeline: source -> family spec -> per-layer factors -> score records -> tidy table.

``score(source)`` streams one layer at a time (a family spec reads that layer's q and k tensors,
then they are dropped), so peak memory is about one layer's factors whatever the model size.
Records follow the shared score-record schema (:data:`RECORD_COLUMNS`); ``summarize`` reduces them
to the paper's per-model numbers (median and IQR over layers). With ``offsets`` every record is
repeated per relative offset (an ``offset`` column), scoring a rotary model's form at that distance.

Non-finite weights never abort a run: the affected heads (and their layer) get NaN scores and one
warning per call names them; every other head is scored as usual.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from attnscope.errors import FormatError, InputError, check_type

from attnscope.families.base import check_fold

from .kernels import head_stats, layer_matrix, layer_stats

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from attnscope.families.base import AttentionFactors
    from attnscope.families.rope import RotaryLayout

    from .kernels import FormStats
    from .spectra import Spectra

LEVELS = ("head", "layer")

#: the shared score record (same columns in geometry output, trainer metrics and the zoo store)
RECORD_COLUMNS = [
    "model", "source", "family", "stack", "level", "layer", "head", "kv_head",
    "symmetry", "directionality", "frobenius_norm", "n_outlier_rows", "n_outlier_cols",
    "n_heads", "n_kv_heads", "d_model", "d_head",
]  # fmt: skip

_INT_COLUMNS = ("layer", "head", "kv_head", "n_outlier_rows", "n_outlier_cols", "n_heads", "n_kv_heads", "d_model", "d_head")


class NonFiniteWeightsWarning(UserWarning):
    """Some q/k weights are NaN or infinite; those heads are scored NaN."""


def _check_levels(levels: Iterable[str]) -> tuple[str, ...]:
    check_type(levels, (str, list, tuple), "levels", '"head", "layer", "both" or a list of them')
    if isinstance(levels, str):
        levels = ("head", "layer") if levels == "both" else (levels,)
    levels = tuple(levels)
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad or not levels:
        raise InputError(f"levels must be head, layer or both, not {', '.join(map(str, bad)) or 'nothing'}", params="levels")
    return levels


def _nan_record(spectra: bool = False) -> dict[str, Any]:
    rec = {"symmetry": np.nan, "directionality": np.nan, "frobenius_norm": np.nan,
           "n_outlier_rows": None, "n_outlier_cols": None}  # fmt: skip
    if spectra:
        from .spectra import SPECTRA_COLUMNS

        rec.update(dict.fromkeys(SPECTRA_COLUMNS, np.nan))
    return rec


def _level_stats(q: np.ndarray, kk: np.ndarray, level: str, offsets: list[int] | None,
                 layout: "RotaryLayout | None", grams: list | None = None) -> list["FormStats"]:  # fmt: skip
    """Stats of one level (head or layer) per offset ([one] without offsets). Offset 0, and every
    offset of a model without rotary positions, is today's unrotated form, by the same kernel.
    ``grams`` (a list): the head kernel's Grams are appended to it, for the spectra."""
    if level == "head" and grams is not None:
        from .kernels import head_stats_with_grams

        base, g = head_stats_with_grams(q, kk)  # the same statistics as head_stats, and its Grams
        grams.append(g)
    else:
        base = head_stats(q, kk) if level == "head" else layer_stats(q, kk)
    from .rotary import offset_head_stats, offset_layer_stats

    return _per_offset(base, q, kk, offsets, layout, offset_head_stats if level == "head" else offset_layer_stats)


def _per_offset(base: Any, q: np.ndarray, kk: np.ndarray, offsets: list[int] | None,
                layout: "RotaryLayout | None", at_offsets: Any) -> list[Any]:
    """``base`` (the form at offset 0) once per offset, each rotary offset's own from ``at_offsets(q, kk, layout,
    offsets)`` (a model without rotary positions has the one form at every offset); ``[base]`` without offsets."""
    if offsets is None:
        return [base]
    rotated = [o for o in offsets if o != 0] if layout is not None else []
    by_offset = dict(zip(rotated, at_offsets(q, kk, layout, rotated))) if rotated else {}
    return [by_offset.get(o, base) for o in offsets]


def _level_spectra(q: np.ndarray, kk: np.ndarray, level: str, offsets: list[int] | None,
                   layout: "RotaryLayout | None", grams: list | None = None) -> list["Spectra"]:  # fmt: skip
    """Spectra of one level per offset, as :func:`_level_stats` (:mod:`.spectra`), heads from the Grams
    :func:`_level_stats` left in ``grams``."""
    from .spectra import layer_spectra, offset_head_spectra, offset_layer_spectra, spectra_with_grams

    base = spectra_with_grams(q, kk, grams[0] if grams else None) if level == "head" else layer_spectra(q, kk)
    return _per_offset(base, q, kk, offsets, layout, offset_head_spectra if level == "head" else offset_layer_spectra)


def _score_layer(
    factors: "AttentionFactors", k: float, levels: tuple[str, ...], offsets: list[int] | None = None,
    layout: "RotaryLayout | None" = None, spectra: bool = False,
) -> tuple[list[dict], int]:
    """Records of one layer (per offset, with an ``offset`` column, when ``offsets`` is given), and how many
    of its query heads had non-finite weights. ``spectra``: add the :data:`.spectra.SPECTRA_COLUMNS`."""
    q = np.asarray(factors.q, dtype=np.float32)
    kk = np.asarray(factors.k, dtype=np.float32)
    if q.ndim != 3 or kk.ndim != 3 or q.shape[2] != kk.shape[2]:
        raise FormatError(
            f"{factors.stack} layer {factors.layer}: q {tuple(q.shape)} and k {tuple(kk.shape)} "
            "are not per-head factors [h, d, e] / [g, d, e]"
        )
    kv = factors.kv_index  # validates the grouping
    n_h, d, e = q.shape
    bad_q = ~np.isfinite(q).reshape(n_h, -1).all(axis=1)  # [h]
    bad_k = ~np.isfinite(kk).reshape(kk.shape[0], -1).all(axis=1)  # [g]
    bad = bad_q | bad_k[kv]  # [h]
    if bad.any():  # score the rest on zeroed copies; the bad ones become NaN below
        q = np.where(bad[:, None, None], np.float32(0), np.nan_to_num(q))
        kk = np.where(bad_k[:, None, None], np.float32(0), np.nan_to_num(kk))
    base = {"stack": factors.stack, "layer": int(factors.layer), "n_heads": int(n_h),
            "n_kv_heads": int(kk.shape[0]), "d_model": int(d), "d_head": int(e)}  # fmt: skip
    offs: list[int | None] = list(offsets) if offsets is not None else [None]
    records: list[dict] = []
    for level in levels:
        if level == "layer" and bad.any():
            per_offset: list[FormStats | None] = [None] * len(offs)
            per_spectra: list[Spectra | None] = [None] * len(offs)
        else:
            grams: list | None = [] if spectra else None
            per_offset = list(_level_stats(q, kk, level, offsets, layout, grams))
            per_spectra = list(_level_spectra(q, kk, level, offsets, layout, grams)) if spectra else [None] * len(offs)
        for off, stats, spec in zip(offs, per_offset, per_spectra):
            at = {**base, "offset": off} if off is not None else base
            if off is not None and layout is not None and layout.window is not None:
                at["beyond_window"] = off >= layout.window  # masked by the layer's sliding window
            records.extend(_records(at, level, stats, k, kv, bad, spec, spectra))
    return records, int(bad.sum())


def _records(base: dict, level: str, stats: "FormStats | None", k: float, kv: np.ndarray, bad: np.ndarray,
             spec: "Spectra | None" = None, spectra: bool = False) -> list[dict]:  # fmt: skip
    """Score records of one level at one offset (``stats`` None: the layer has non-finite weights);
    with ``spectra``, the columns of ``spec`` too."""
    if stats is None:
        return [{**base, "level": "layer", "head": None, "kv_head": None, **_nan_record(spectra)}]
    cols = spec.columns() if spec is not None else {}
    dirs, n_r, n_c = stats.directionality(k)
    sym, frob = stats.symmetry, np.sqrt(stats.frob2)
    if level == "layer":
        return [{**base, "level": "layer", "head": None, "kv_head": None, "symmetry": float(sym[0]),
                 "directionality": float(dirs[0]), "frobenius_norm": float(frob[0]),
                 "n_outlier_rows": int(n_r[0]), "n_outlier_cols": int(n_c[0]),
                 **{name: float(v[0]) for name, v in cols.items()}}]  # fmt: skip
    out = []
    for h in range(len(kv)):
        rec = {**base, "level": "head", "head": h, "kv_head": int(kv[h])}
        if bad[h]:
            rec.update(_nan_record(spectra))
        else:
            rec.update(symmetry=float(sym[h]), directionality=float(dirs[h]), frobenius_norm=float(frob[h]),
                       n_outlier_rows=int(n_r[h]), n_outlier_cols=int(n_c[h]),
                       **{name: float(v[h]) for name, v in cols.items()})  # fmt: skip
        out.append(rec)
    return out


def score_factors(
    factors: "AttentionFactors", *, k: float = 2.0, levels: Sequence[str] = LEVELS,
    offsets: Sequence[int] | None = None, layout: "RotaryLayout | None" = None, spectra: bool = False,
) -> list[dict]:
    """Score records (without model/family) of one layer's factors; warns once on non-finite weights.

    offsets (with the layer's rotary ``layout``, None for no rotary positions): one record set per offset.
    spectra: add the spectral columns (:data:`.spectra.SPECTRA_COLUMNS`).
    """
    if offsets is not None:
        from .offsets import check_offsets

        offsets = check_offsets(offsets)
    check_type(spectra, bool, "spectra", "True or False")
    records, n_bad = _score_layer(factors, float(k), _check_levels(levels), offsets, layout, spectra)
    if n_bad:
        warnings.warn(
            f"{factors.stack} layer {factors.layer}: {n_bad} head(s) have non-finite q/k weights; scored NaN",
            NonFiniteWeightsWarning,
            stacklevel=2,
        )
    return records


def score(
    source: Any,
    *,
    config: Any = None,
    k: float = 2.0,
    levels: Sequence[str] = LEVELS,
    stacks: Sequence[str] | None = None,
    progress: bool = False,
    name: str | None = None,
    fold_norms: bool | str = False,
    offsets: Sequence[int] | None = None,
    spectra: bool = False,
) -> "pd.DataFrame":
    """Score every layer (and head) of a model: a tidy DataFrame of score records.

    source: a local HF directory, a weights file, a hub id, any WeightSource, or a model in memory
    (a loaded transformers model, a state dict with ``config=``, an attnscope Transformer, a
    TransformerLens-style object; see :mod:`attnscope.sources.loaded`). config: a dict or
    transformers config for a state dict (or to override a module's own).
    k: outlier threshold (mean + k std) for directionality. levels: "head" and/or "layer".
    stacks: restrict to some of "encoder", "decoder", "cross". progress: show how far it is (a bar, a notebook line or log lines: :mod:`attnscope.progress`).
    name: the ``model`` column (default: the model's canonical id, :func:`attnscope.naming.model_label`:
    the zoo or hub id where known, else the file's stem or folder's name); ``source`` is the path or id as given.
    fold_norms: False / "none" (the paper's convention: W_q W_k^T as stored), True / "qk" (fold the
    q/k-norm gains of QK-norm models into W_q, W_k), "all" (also the input-norm gain); the choice is
    the ``fold_norms`` column of every record.
    offsets: relative offsets (query position - key position); every record gains an ``offset`` column
    and scores the form ``M_offset = W_q G(offset) W_k^T`` that a rotary model applies at that distance
    (:mod:`attnscope.geometry.rotary`); offset 0 is exactly the score without offsets. A model without
    rotary positions gets the same scores at every offset and one :class:`PositionNote` saying so. At most
    :data:`~attnscope.geometry.offsets.MAX_OFFSETS` offsets, each within the model's context length
    (:func:`~attnscope.geometry.offsets.reach`; 2^31 when the config states none).
    spectra: also the spectra of each form's symmetric and antisymmetric parts (:mod:`attnscope.geometry.spectra`):
    columns ``sym_rank``, ``anti_rank`` (effective ranks), ``sym_signature`` and ``anti_top2``, per offset too.
    """
    from attnscope.families import get_family, warn_extra_layers
    from attnscope.sources import open_source

    check_type(k, (int, float, np.integer, np.floating), "k", "a number (the outlier threshold, e.g. 2.0)")
    if not np.isfinite(k) or k < 0:
        raise InputError(f"k must be a finite number >= 0, not {k}", params="k")
    lv = _check_levels(levels)
    check_type(spectra, bool, "spectra", "True or False")
    fold = check_fold(fold_norms)
    if offsets is not None:
        from .offsets import check_offsets

        offsets = check_offsets(offsets)
    from attnscope.naming import model_names

    from attnscope.zoo.registry import resolve_spec

    src = open_source(resolve_spec(source), config=config)  # a zoo id: its installed copy
    model, given = model_names(source, src.name, name, src.config)
    try:
        if offsets is not None:
            from .offsets import check_reach

            check_reach(offsets, src.config, str(model))
        fam = get_family(src.config)
        infos = fam.stacks(src.config, src)
        warn_extra_layers(fam, src, infos)
        if stacks is not None:
            stacks = (stacks,) if isinstance(stacks, str) else tuple(stacks)
            bad = [s for s in stacks if s not in {"encoder", "decoder", "cross"}]
            if bad:
                raise InputError(f"stacks must be encoder, decoder or cross, not {', '.join(map(str, bad))}", params="stacks")
            have = {i.stack for i in infos}
            if not have & set(stacks):
                raise InputError(f"{model}: has no {'/'.join(stacks)} stack (it has {', '.join(sorted(have))})")
            infos = [i for i in infos if i.stack in stacks]
        total = sum(i.n_layers for i in infos)
        records: list[dict] = []
        bad_layers: list[str] = []
        notes: dict[str, None] = {}  # one line each, in order
        from attnscope.progress import progress as progress_bar

        with progress_bar(total, model, enabled=progress, unit="layers") as bar:
            for info in infos:
                for layer in range(info.n_layers):
                    layout = _layout(src, info, layer, notes) if offsets is not None else None
                    factors = fam.layer_factors(src, info, layer, fold)
                    recs, n_bad = _score_layer(factors, float(k), lv, offsets, layout, spectra)
                    if n_bad:
                        bad_layers.append(f"{info.stack} {layer} ({n_bad} heads)")
                    records.extend(recs)
                    del factors
                    bar.advance()
    finally:
        if src is not source:  # we opened it, we close it
            src.close()
    for line in notes:
        from .offsets import PositionNote

        warnings.warn(f"{model}: {line}", PositionNote, stacklevel=2)
    if bad_layers:
        warnings.warn(
            f"{model}: non-finite q/k weights in layer(s) {', '.join(bad_layers)}; those scores are NaN",
            NonFiniteWeightsWarning,
            stacklevel=2,
        )
    for rec in records:
        rec["model"] = model
        rec["source"] = given
        rec["family"] = fam.name
        rec["fold_norms"] = fold
    return records_frame(records)


def _layout(src: Any, info: Any, layer: int, notes: dict[str, None]) -> "RotaryLayout | None":
    """The rotary layout of one layer (None: no rotary positions); its one-line notes collected in ``notes``."""
    from attnscope.families.rope import NOT_ROTARY_NOTE, position_kind, rotary_layout

    layout = rotary_layout(src.config, info, layer, src)
    if layout is None:
        notes[NOT_ROTARY_NOTE.format(stack=info.stack, how=position_kind(src.config))] = None
    elif layout.note.startswith(("dynamic", "longrope")):
        notes[layout.note] = None
    if layout is not None and layout.window is not None:
        notes["sliding-window layers mask keys W or more tokens back: their records at offset >= W have "
              "beyond_window = True (a form the layer never applies)"] = None
    return layout


def records_frame(records: list[dict]) -> "pd.DataFrame":
    """Records -> DataFrame with the record columns in order and nullable integer columns."""
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    for col in RECORD_COLUMNS:
        if col not in df.columns:
            df[col] = None
    extra = [c for c in df.columns if c not in RECORD_COLUMNS]
    df = df[RECORD_COLUMNS + extra]
    for col in _INT_COLUMNS:
        df[col] = pd.array(df[col].tolist(), dtype="Int64")
    from .spectra import SPECTRA_COLUMNS

    for col in ("symmetry", "directionality", "frobenius_norm", *(c for c in SPECTRA_COLUMNS if c in df.columns)):
        df[col] = df[col].astype("float64")
    return df


#: the columns of a score table that summaries and plots read


def summarize(df: "pd.DataFrame") -> "pd.DataFrame":
    """Per model and stack (and offset, when the table has one): median and IQR (25th, 75th percentile)
    over layers of s and d.

    Uses the layer-level rows (the paper's per-layer M_L); a table holding only head rows is
    summarised over all its heads instead (``level`` says which).
    """
    import pandas as pd

    from attnscope.tables import SCORE_COLUMNS, check_table

    check_table(df, SCORE_COLUMNS, "df", "a score table from geometry.score()")
    if df.empty:
        raise InputError("no scores to summarise")
    rows = df[df["level"] == "layer"]
    level = "layer"
    if rows.empty:
        rows, level = df[df["level"] == "head"], "head"
    out = []
    keys = ["model", "family", "stack"] + (["offset"] if "offset" in rows.columns else [])
    for key, grp in rows.groupby(keys, sort=False, dropna=False):
        rec: dict[str, Any] = dict(zip(keys, key))
        rec.update(level=level, n_layers=int(grp["layer"].nunique()), n_rows=len(grp))
        for col in ("symmetry", "directionality"):
            vals = grp[col].astype("float64")
            rec[f"{col}_median"] = vals.median()
            rec[f"{col}_q1"] = vals.quantile(0.25)
            rec[f"{col}_q3"] = vals.quantile(0.75)
        rec["n_nan"] = int(grp["symmetry"].isna().sum())
        out.append(rec)
    return pd.DataFrame(out)


def spectrum_values(
    source: Any, *, config: Any = None, levels: Sequence[str] = ("head",), stacks: Sequence[str] | None = None,
    name: str | None = None, fold_norms: bool | str = False,
) -> "pd.DataFrame":
    """Every eigenvalue of each form's symmetric part and every singular value of its antisymmetric part, as a
    long table: model, source, family, stack, level, layer, head, kv_head, ``part`` (``sym``: S's eigenvalues,
    signed, by decreasing magnitude; ``anti``: A's singular values, decreasing, in equal pairs), ``index`` (0..)
    and ``value``; 2 d_head values per head and part (fewer for a layer form taken explicitly: d). The values
    the ``spectra=True`` columns of :func:`score` summarise (:mod:`attnscope.geometry.spectra`); offset 0.
    """
    import pandas as pd

    from attnscope.families import get_family
    from attnscope.naming import model_names
    from attnscope.sources import open_source
    from attnscope.zoo.registry import resolve_spec

    from .spectra import head_spectra, layer_spectra

    lv = _check_levels(levels)
    fold = check_fold(fold_norms)
    src = open_source(resolve_spec(source), config=config)
    model, given = model_names(source, src.name, name, src.config)
    frames = []
    try:
        fam = get_family(src.config)
        for info in fam.stacks(src.config, src):
            if stacks is not None and info.stack not in ((stacks,) if isinstance(stacks, str) else tuple(stacks)):
                continue
            for layer in range(info.n_layers):
                f = fam.layer_factors(src, info, layer, fold)
                q, kk = np.asarray(f.q, np.float32), np.asarray(f.k, np.float32)
                for level in lv:
                    sp = head_spectra(q, kk) if level == "head" else layer_spectra(q, kk)
                    n, m = sp.sym.shape
                    heads = np.arange(n) if level == "head" else np.full(n, -1)
                    for part, vals in (("sym", sp.sym), ("anti", sp.anti)):
                        frames.append(pd.DataFrame({
                            "stack": info.stack, "level": level, "layer": layer, "head": np.repeat(heads, m),
                            "kv_head": np.repeat(f.kv_index[heads] if level == "head" else heads, m),
                            "part": part, "index": np.tile(np.arange(m), n), "value": vals.ravel()}))
    finally:
        if src is not source:
            src.close()
    df = pd.concat(frames, ignore_index=True)
    for col in ("head", "kv_head"):
        df[col] = pd.array([None if v < 0 else int(v) for v in df[col]], dtype="Int64")
    df.insert(0, "family", fam.name)
    df.insert(0, "source", given)
    df.insert(0, "model", model)
    return df


#: the per-layer columns of :func:`rank_cascade` (median and IQR over a layer's heads of each)
CASCADE_METRICS = ("anti_rank", "sym_rank", "sym_signature", "anti_top2")


def rank_cascade(df: "pd.DataFrame") -> "pd.DataFrame":
    """Per model, stack and layer of a ``score(..., spectra=True)`` table: the relative depth
    ``layer / n_layers`` and the median, 25th and 75th percentile over the layer's heads of
    :data:`CASCADE_METRICS` (``anti_rank``, ``anti_rank_q1``, ``anti_rank_q3``, ...), with ``d_head``.

    Head rows are used (the ranks are per head); a table of layer rows only gives the layer forms'
    values (``level`` says which). Offset tables: the offset-0 rows, else the smallest |offset|.
    """
    import pandas as pd

    from attnscope.tables import SCORE_COLUMNS, check_table

    from .spectra import SPECTRA_COLUMNS

    check_table(df, (*SCORE_COLUMNS, *SPECTRA_COLUMNS), "df", "a score table from geometry.score(..., spectra=True)")
    if df.empty:
        raise InputError("no scores to draw the rank cascade from", params="df")
    if "offset" in df.columns and df["offset"].notna().any():
        nearest = df["offset"].abs().min()
        df = df[df["offset"].abs() == nearest]
        df = df[df["offset"] == df["offset"].max()]  # +o before -o
    rows, level = df[df["level"] == "head"], "head"
    if rows.empty:
        rows, level = df[df["level"] == "layer"], "layer"
    out = []
    for (model, stack), grp in rows.groupby(["model", "stack"], sort=False):
        n_layers = int(grp["layer"].max()) + 1
        for layer, lay in grp.groupby("layer", sort=True):
            rec: dict[str, Any] = {"model": model, "stack": stack, "level": level, "layer": int(layer),
                                   "n_layers": n_layers, "relative_depth": int(layer) / n_layers,
                                   "d_head": int(lay["d_head"].iloc[0]) if "d_head" in lay else None,
                                   "n_rows": len(lay)}
            for col in CASCADE_METRICS:
                vals = lay[col].astype("float64")
                rec[col] = vals.median()
                rec[f"{col}_q1"], rec[f"{col}_q3"] = vals.quantile(0.25), vals.quantile(0.75)
            out.append(rec)
    return pd.DataFrame(out)


def wqk_block(source: Any, layer: int = 0, *, stack: str | None = None, n: int = 50) -> np.ndarray:
    """The explicit layer form M_L[:n, :n] (float32 numpy) of one layer: the paper's example heatmap."""
    from attnscope.families import get_family
    from attnscope.sources import open_source
    from attnscope.zoo.registry import resolve_spec

    src = open_source(resolve_spec(source))  # a zoo id: its installed copy
    try:
        fam = get_family(src.config)
        infos = [i for i in fam.stacks(src.config, src) if stack is None or i.stack == stack]
        if not infos:
            raise InputError(f"{src.name}: no {stack} stack")
        info = infos[0]
        if not 0 <= layer < info.n_layers:
            raise InputError(f"{src.name}: layer {layer} out of range (the {info.stack} stack has {info.n_layers})")
        f = fam.layer_factors(src, info, layer)
        return layer_matrix(f.q, f.k, n, n)
    finally:
        if src is not source:
            src.close()
