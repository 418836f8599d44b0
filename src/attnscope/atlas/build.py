"""The atlas of one model: per head, the geometry of its W_qk beside what it does on the probes.

:func:`atlas` joins :func:`attnscope.geometry.score` (per-head symmetry s and directionality d at
offset 0, at offset 1 and their mean over :func:`summary_offsets`: the position-aware scores of rotary
models) with :func:`attnscope.heads.probes.run_probes` (behaviour per probe) and the heads' cluster
(Ward on the z-scored behaviour columns, k chosen by silhouette), then correlates every geometry score
with every behaviour across heads (:mod:`attnscope.atlas.stats`).

The table has one row per (model, stack, layer, head); each behaviour column is named
``<metric>_<probe>`` (``induction_random``, ``sink_text``, ...): the suffix is the probe it came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attnscope.errors import ArgumentTypeError, InputError, UnsupportedError, check_type

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

GEOMETRY = ("symmetry", "directionality")  # offset 0: the form W_q W_k^T itself, as `attnscope geometry`
#: position-aware geometry (rotary models): s and d of the form a query applies to the key one step behind
#: it, and their mean over :func:`summary_offsets` (equal to offset 0 where positions are no rotation)
POSITION_GEOMETRY = ("symmetry_at_1", "directionality_at_1", "symmetry_over_offsets", "directionality_over_offsets")
#: every geometry column of the table, correlated with every behaviour
GEOMETRY_COLUMNS = GEOMETRY + POSITION_GEOMETRY
#: behaviour metrics kept per probe (columns ``<metric>_<probe>``)
BEHAVIOUR_METRICS = ("induction", "previous_token", "sink", "entropy_norm", "distance")
ID_COLUMNS = ("model", "stack", "layer", "head", "kv_head")


@dataclass
class AtlasResult:
    """What :func:`atlas` returns: the per-head table, the correlations across heads, and how it was made."""

    table: "pd.DataFrame"  # one row per (model, stack, layer, head)
    correlations: "pd.DataFrame"  # x, y, n, unit, n_units, rho, ci_low, ci_high, interval, p, q, q_run, test, relation
    info: dict[str, Any] = field(default_factory=dict)
    #: (layer, head) -> [n, n] float16 example map: the whole first window of ``info["map_probe"]``
    #: (``info["map_length"]`` tokens), each cell the largest weight of a ``info["map_block"]``-square
    #: block of (query, key) positions (n <= 64); drawn by the HTML page on click; empty for a pooled atlas
    maps: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    #: every head's attention on the text probe's first windows (top-k keys per query), drawn by the head
    #: view; None without the text probe and for a pooled atlas (:class:`attnscope.heads.text.TextViews`)
    views: Any = None

    @property
    def behaviours(self) -> list[str]:
        return behaviour_columns(self.table)

    def view(self, layer: int, head: int) -> Any:
        """Head ``layer``, ``head`` on the text windows, shown inline in a notebook (``_repr_html_``); its
        ``.table`` holds the weights shown (:class:`attnscope.pages.head_view.HeadView`)."""
        from attnscope.pages.head_view import HeadView

        return HeadView.of(self, layer, head)


def behaviour_columns(table: "pd.DataFrame") -> list[str]:
    """The ``<metric>_<probe>`` columns of an atlas table, probe by probe."""
    from attnscope.heads.probes import PROBES

    return [f"{m}_{p}" for p in PROBES for m in BEHAVIOUR_METRICS if f"{m}_{p}" in table.columns]


def atlas_columns(probes: str | Sequence[str] = "both") -> list[str]:
    """The numeric per-head columns an atlas of ``probes`` will hold (geometry, ``<metric>_<probe>``, cluster),
    known before any work: e.g. to check ``--top``'s columns first."""
    from attnscope.heads.probes import PROBES, check_probes

    chosen = check_probes(probes)
    return [*GEOMETRY_COLUMNS, *(f"{m}_{p}" for p in PROBES if p in chosen for m in BEHAVIOUR_METRICS), "cluster"]


def behaviour_wide(probes: "pd.DataFrame") -> "pd.DataFrame":
    """run_probes' long table (one row per probe, layer, head) -> one row per (layer, head), ``<metric>_<probe>``."""
    import pandas as pd

    parts = []
    for probe, sub in probes.groupby("probe", sort=False):
        cols = sub.set_index(["layer", "head"])[list(BEHAVIOUR_METRICS)]
        parts.append(cols.rename(columns={m: f"{m}_{probe}" for m in BEHAVIOUR_METRICS}))
    return pd.concat(parts, axis=1).reset_index()


def summary_offsets(window: int) -> list[int]:
    """The offsets the position-aware summary averages: 0, 1, 2, 4, ... (powers of 2) and ``window - 1``,
    the longest distance a probe window of ``window`` tokens (>= 2) holds (a key behind the query: >= 0)."""
    from numbers import Integral

    check_type(window, Integral, "window", "a whole number of tokens")
    if not 2 <= window <= 2**31:
        raise InputError(f"window must be 2 to 2^31 tokens, not {window}", params="window")
    last = int(window) - 1
    offs = {0, 1, last} | {2**k for k in range(1, last.bit_length()) if 2**k < last}
    return sorted(offs)


def geometry_rows(scores: "pd.DataFrame", stack: str) -> "pd.DataFrame":
    """The per-head geometry rows of the stack the probes ran on: layer, head, kv_head, s and d at offset 0
    and, when ``scores`` has an ``offset`` column (offsets 0 and 1 among them), :data:`POSITION_GEOMETRY`
    (the mean over offsets leaves out those beyond a sliding-window layer's window)."""
    import pandas as pd

    heads = scores[scores["level"] == "head"]
    stacks = list(heads["stack"].unique())
    if stack not in stacks:
        if len(stacks) != 1:
            raise UnsupportedError(f"the model has stacks {', '.join(stacks)}; the maps come from one {stack} stack")
        stack = stacks[0]
    sub = heads[heads["stack"] == stack]
    keys = ["layer", "head", "kv_head"]
    if "offset" not in sub.columns:
        out = sub[[*keys, *GEOMETRY]].copy()
    else:
        at = {o: sub[sub["offset"] == o].set_index(keys)[list(GEOMETRY)] for o in (0, 1)}
        if "beyond_window" in sub.columns:  # a sliding-window layer: only the offsets it attends to
            sub = sub[~sub["beyond_window"].astype("boolean").fillna(False).astype(bool)]
        mean = sub.groupby(keys)[list(GEOMETRY)].mean().reindex(at[0].index)
        out = pd.concat([at[0], at[1].add_suffix("_at_1"), mean.add_suffix("_over_offsets")], axis=1).reset_index()
    for col in keys:
        out[col] = out[col].astype(int)
    return out


def add_clusters(table: "pd.DataFrame", features: Sequence[str], seed: int = 0) -> tuple["pd.DataFrame", int | None]:
    """``cluster`` column: Ward clusters of the z-scored ``features`` at the best-silhouette k (2..8)."""
    import warnings

    from attnscope.heads.cluster import cluster_heads

    feats = [f for f in features if table[f].notna().all() and table[f].nunique() > 1]
    n = len(table)
    out = table.copy()
    out["cluster"] = -1
    if n < 4 or not feats:
        return out, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = cluster_heads(table[["layer", "head", *feats]].reset_index(drop=True), feats,
                            k_min=2, method="ward", seed=seed)
    k = res.best_k["ward"]
    best = res.labels[(res.labels["k"] == k)]
    out["cluster"] = best["cluster"].to_numpy()
    return out, k


def check_atlas_options(source: Any, **opts: Any) -> None:
    """Types and ranges of :func:`atlas`'s options, before any model is loaded: an ArgumentTypeError
    (``windows="2"``, ``seed=None``) or InputError (``batch_size=0``) naming the parameter."""
    from attnscope.devices import check_device
    from attnscope.heads.probes import MAX_RANDOM_WINDOWS, check_probes

    from .stats import MAX_BOOT

    from attnscope.heads.maps import MapModel

    if not isinstance(source, (str, os.PathLike, MapModel)) and not hasattr(source, "config"):
        raise ArgumentTypeError("source must be a GGUF file, an HF directory / hub id or a loaded model, not "
                                f"{type(source).__name__} {source!r:.40}", params="source")
    integer = (int, np.integer)
    for param, least in (("windows", 1), ("random_windows", 1), ("n_boot", 1), ("batch_size", 1), ("seed", 0),
                         ("length", 2), ("random_length", 2)):  # fmt: skip
        value = opts[param]
        if value is None and param in ("length", "random_length"):
            continue
        check_type(value, integer, param, "an integer")
        if value < least:
            raise InputError(f"{param} must be at least {least}, not {value}", params=param)
    if opts["random_windows"] > MAX_RANDOM_WINDOWS:  # the probe's ids are allocated at once
        raise InputError(f"random_windows must be at most {MAX_RANDOM_WINDOWS:,}, not {opts['random_windows']:,}",
                         params="random_windows")
    if opts["n_boot"] > MAX_BOOT:  # resamples and permutations: time grows with n_boot x heads
        raise InputError(f"n_boot must be at most {MAX_BOOT:,}, not {opts['n_boot']:,}", params="n_boot")
    check_type(opts["probes"], (str, list, tuple), "probes", "'both', 'random', 'text' or a list of them")
    check_probes(opts["probes"])
    check_type(opts["data"], (str, os.PathLike), "data", "a corpus name or path (builtin, a text file, hf:NAME)")
    check_type(opts["device"], str, "device", "a torch device name such as cpu or cuda")
    check_device(opts["device"])


def atlas(
    source: Any,
    *,
    tokenizer: Any = None,
    probes: str | Sequence[str] = "both",
    data: str = "builtin",
    windows: int = 8,
    length: int | None = None,
    random_windows: int = 8,
    random_length: int | None = None,
    seed: int = 0,
    n_boot: int = 2000,
    batch_size: int = 1,
    device: str = "cpu",
    name: str | None = None,
    progress: bool = False,
) -> AtlasResult:
    """Geometry beside behaviour for every head of ``source`` (a GGUF file, an HF directory / hub id, or
    a loaded transformers model with ``tokenizer=``).

    Text probe: ``windows`` x ``length`` tokens of ``data``; random probe: ``random_windows`` sequences
    of ``random_length`` tokens, repeated (defaults: 256 and 127, shortened for short models; see
    :func:`attnscope.heads.probes.run_probes`). Correlations: Spearman across heads with a percentile
    bootstrap 95% CI over layers and a permutation test of whole layers (``n_boot`` resamples and
    permutations, seeded by ``seed``); the verdict reads the Benjamini-Hochberg q over the model's tests
    (:mod:`attnscope.atlas.stats`).
    """
    import warnings

    from attnscope.geometry import PositionNote, score
    from attnscope.heads.probes import MAP_SIDE, as_map_model, check_probes, probe_plan, run_probes

    from .stats import correlation_table, statistics_info

    check_atlas_options(source, probes=probes, data=data, windows=windows, length=length,
                        random_windows=random_windows, random_length=random_length, seed=seed, n_boot=n_boot,
                        batch_size=batch_size, device=device)
    if isinstance(source, (str, os.PathLike)) and tokenizer is not None:
        raise InputError(f"{source}: tokenizer= is for a model loaded in memory; a directory or file brings its own")
    from attnscope.heads.maps import MapModel
    from attnscope.progress import phase

    if isinstance(source, MapModel) and not source.source:
        raise InputError("source: a MapModel made from a model in memory has no weight file to read the geometry "
                         "from; give the loaded model itself with tokenizer=", params="source")
    plan = probe_plan(check_probes(probes), data, windows, length, random_length)  # checked before the weights load
    shown = source.source if isinstance(source, MapModel) else source if isinstance(source, (str, os.PathLike)) else None
    with phase(f"atlas: loading {shown or 'the model'}", enabled=progress and not isinstance(source, MapModel)):
        model = as_map_model(source, device=device, tokenizer=tokenizer, plan=plan)
    label = name or model.name
    examples: dict[str, dict[int, np.ndarray]] = {}
    views: dict[str, Any] = {}
    beh = run_probes(model, probes, data=data, windows=windows, length=length, random_windows_n=random_windows,
                     random_length=random_length, seed=seed, batch_size=batch_size, progress=progress,
                     examples=examples, views=views)
    stack = str(beh["stack"].iloc[0])
    lengths = beh.groupby("probe")["length"].first().to_dict()
    offsets = summary_offsets(max(lengths.values()))
    src = source.source if isinstance(source, MapModel) else str(source) if isinstance(source, os.PathLike) else source
    position_notes: list[str] = []
    with warnings.catch_warnings(record=True) as seen:  # "positions are no rotation here": kept in info
        warnings.simplefilter("always", PositionNote)
        try:
            scores = score(src, levels="head", offsets=offsets, progress=progress)
        except UnsupportedError as exc:  # e.g. a rotary scaling the offsets code refuses: offset 0 only
            scores, offsets = score(src, levels="head", progress=progress), []
            position_notes.append(f"no position-aware columns: {exc}")
    for w in seen:
        if issubclass(w.category, PositionNote):
            position_notes.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    geo = geometry_rows(scores, stack)
    for col in POSITION_GEOMETRY:
        if col not in geo.columns:
            geo[col] = np.nan
    wide = behaviour_wide(beh)
    table = geo.merge(wide, on=["layer", "head"], how="inner", validate="one_to_one")
    if len(table) != len(wide):
        raise UnsupportedError(f"{label}: the weights have {len(geo)} heads but the maps {len(wide)}; cannot pair them")
    given = model.source or label
    table.insert(0, "model", label)
    table.insert(1, "source", given)
    table.insert(2, "stack", stack)
    table = table.sort_values(["layer", "head"]).reset_index(drop=True)
    behaviours = behaviour_columns(table)
    with phase(f"atlas {label}: clusters and statistics ({n_boot} resamples)", enabled=progress):
        table, k = add_clusters(table, behaviours, seed=seed)
        corr = correlation_table(table, GEOMETRY_COLUMNS, behaviours, n_boot=n_boot, seed=seed)
    corr.insert(0, "model", label)
    info = {"model": label, "source": given, "stack": stack, "causal": bool(model.causal), "n_layers": model.n_layers,
            "n_heads": model.n_heads, "probes": list(beh["probe"].unique()), "data": data,
            "windows": {"text": windows, "random": random_windows}, "lengths": lengths,
            "cluster_k": k, "n_boot": n_boot, "seed": seed, "offsets": offsets,
            "position_notes": position_notes, **statistics_info()}
    map_probe = "random" if "random" in examples else next(iter(examples))
    length = int(lengths[map_probe])
    info.update(map_probe=map_probe, map_length=length, map_block=-(-length // MAP_SIDE))  # ceil(L / side)
    maps = {(layer, h): a[h] for layer, a in examples[map_probe].items() for h in range(a.shape[0])}
    text = views.get("text")
    if text is not None:
        text.info.update(model=label, data=str(data), probe="text")
        info["head_views"] = {"windows": text.n_windows, "length": text.length, "k": min(text.k, text.length),
                              "exact": text.exact}
    return AtlasResult(table=table, correlations=corr, info=info, maps=maps, views=text)
