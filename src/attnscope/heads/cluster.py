"""Head clustering: z-scored metric features, Ward and k-means, silhouette per k, JS-distance MDS.

Einstein legend: n heads (rows of the metrics table, all layers), f features, k clusters.

The dense-vs-sparse byte-model study clustered ``[entropy, sparsity, distance]`` with Ward for k = 2..8 and hard-coded its
"best k"; here the best k per method is the one with the highest mean silhouette, read off the data.

Tables read back from disk are checked before use: every feature must be a finite number, and a
JS table must describe the same model and heads as the metrics table it is clustered with.
sklearn's ConvergenceWarnings (constant or duplicated features) are summarised as one warning line.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from attnscope.errors import FormatError, InputError
from attnscope.tables import numeric_columns

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

DEFAULT_FEATURES = ("entropy", "sparsity", "distance")
METHODS = ("ward", "kmeans")
ID_COLUMNS = ("model", "stack", "layer", "head")


#: the most clusters tried when ``k_max`` is not given (fewer for tables of fewer heads)
DEFAULT_K_MAX = 8


@dataclass
class ClusterResult:
    silhouette: "pd.DataFrame"  # method, k, silhouette
    labels: "pd.DataFrame"  # id columns + method, k, cluster, best (k is the method's best)
    best_k: dict[str, int]
    features: tuple[str, ...]


def zscore_features(df: "pd.DataFrame", features: Sequence[str]) -> "np.ndarray":
    """[n, f] z-scored features; constant columns become 0; missing columns / non-numbers / NaN are clear errors."""
    import numpy as np

    missing = [f for f in features if f not in df.columns]
    if missing:
        raise InputError(
            f"metrics table has no column(s) {', '.join(missing)} (it has: {', '.join(map(str, df.columns[:20]))}"
            f"{', ...' if len(df.columns) > 20 else ''})"
        )
    X = numeric_columns(df, list(features), "metrics table", finite=False).to_numpy()  # [n, f]
    if len(X) == 0:  # before any arithmetic: means of nothing would only print numpy warnings
        raise InputError("the metrics table has a header but no rows: no heads to cluster")
    bad = [f for f, col in zip(features, X.T) if not np.isfinite(col).all()]
    if bad:
        raise InputError(f"feature(s) {', '.join(bad)} have missing/NaN values; choose other features", params="features")
    mu, sd = X.mean(0), X.std(0)
    return np.where(sd > 0, (X - mu) / np.where(sd > 0, sd, 1.0), 0.0)


def fit_labels(X: "np.ndarray", k: int, method: str, seed: int = 0) -> "np.ndarray":
    """Cluster labels [n] for one k with ``ward`` (agglomerative, Ward linkage) or ``kmeans``."""
    if method == "ward":
        from sklearn.cluster import AgglomerativeClustering

        return AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(X)
    if method == "kmeans":
        from sklearn.cluster import KMeans

        return KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(X)
    raise InputError(f"unknown clustering method {method!r}; use ward, kmeans or both")


def cluster_heads(
    df: "pd.DataFrame",
    features: Sequence[str] = DEFAULT_FEATURES,
    k_min: int = 2,
    k_max: int | None = None,
    method: str = "both",
    seed: int = 0,
) -> ClusterResult:
    """Cluster the heads (rows) of a metrics table for every k in [k_min, k_max].

    ``k_max`` None: :data:`DEFAULT_K_MAX` (or ``k_min`` if larger), at most the number of heads - 1
    (silhouette needs k < n); a ``k_max`` given explicitly and too large is refused."""
    import numpy as np
    import pandas as pd
    from sklearn.metrics import silhouette_score

    methods = METHODS if method == "both" else (method,)
    for m in methods:
        if m not in METHODS:
            raise InputError(f"unknown clustering method {m!r}; use ward, kmeans or both")
    features = tuple(features.split(",")) if isinstance(features, str) else tuple(features)  # "a,b" as on the CLI
    if not features:
        raise InputError("choose at least one feature")
    if not {"layer", "head"} <= set(df.columns):
        raise InputError("not a heads metrics table (no layer/head columns): write one with `attnscope heads SOURCE --out`")
    X = zscore_features(df, features)  # the table's columns are checked before its size
    n = len(df)
    if k_min < 2:
        raise InputError(f"k_min must be at least 2, not {k_min}", params="k_min")
    if k_max is None:
        if n - 1 < k_min:
            raise InputError(f"{n} head{'s are' if n != 1 else ' is'} too few to cluster into at least {k_min} groups "
                             "(silhouette needs k <= number of heads - 1)", params="k_min")
        k_max = min(max(DEFAULT_K_MAX, k_min), n - 1)
    if k_max < k_min:
        raise InputError(f"k_max={k_max} is smaller than k_min={k_min}", params=("k_max", "k_min"))
    if k_max >= n:
        raise InputError(f"k_max={k_max} is too large for {n} heads (silhouette needs k <= number of heads - 1)",
                         params="k_max")
    ids = df[[c for c in ID_COLUMNS if c in df.columns]].reset_index(drop=True)
    sil_rows, label_frames = [], []
    short: dict[str, list[int]] = {}  # method -> k for which sklearn did not find k distinct clusters
    for m in methods:
        for k in range(k_min, k_max + 1):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                lab = fit_labels(X, k, m, seed)
            for w in caught:
                if type(w.message).__name__ == "ConvergenceWarning":
                    short.setdefault(m, []).append(k)
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            n_found = len(np.unique(lab))
            s = float(silhouette_score(X, lab)) if 2 <= n_found < n else float("nan")
            sil_rows.append({"method": m, "k": k, "silhouette": s, "n_clusters": n_found})
            fr = ids.copy()
            fr["method"], fr["k"], fr["cluster"] = m, k, lab
            label_frames.append(fr)
    for m, ks in short.items():
        warnings.warn(
            f"{m}: the features {', '.join(features)} have fewer distinct values than clusters for k = "
            f"{', '.join(map(str, sorted(set(ks))))} (constant or duplicated heads); those k find fewer clusters",
            stacklevel=2,
        )
    sil = pd.DataFrame(sil_rows)
    best_k: dict[str, int] = {}
    for m in methods:
        sub = sil[(sil["method"] == m) & sil["silhouette"].notna()]
        if sub.empty:
            raise InputError(f"{m}: no k in {k_min}..{k_max} gives a valid silhouette (are all heads identical?)")
        best_k[m] = int(sub.loc[sub["silhouette"].idxmax(), "k"])
    sil["best"] = [best_k.get(r.method) == r.k for r in sil.itertuples()]
    labels = pd.concat(label_frames, ignore_index=True)
    labels["best"] = [best_k.get(m) == k for m, k in zip(labels["method"], labels["k"])]
    return ClusterResult(silhouette=sil, labels=labels, best_k=best_k, features=features)


def cluster_profiles(df: "pd.DataFrame", labels: "pd.DataFrame", method: str, features: Sequence[str]) -> "pd.DataFrame":
    """Mean raw feature values and head count per cluster of the method's best k."""
    sub = labels[(labels["method"] == method) & labels["best"]].reset_index(drop=True)
    merged = df.reset_index(drop=True)[list(features)].copy()
    merged["cluster"] = sub["cluster"].to_numpy()
    prof = merged.groupby("cluster")[list(features)].mean()
    prof.insert(0, "n_heads", merged.groupby("cluster").size())
    return prof.reset_index()


def check_js_matches(js: "pd.DataFrame", metrics: "pd.DataFrame", label: str = "JS table") -> None:
    """Refuse a JS table that is not of the metrics table's model and heads (FormatError, one line)."""
    for name, t in (("JS table", js), ("metrics table", metrics)):
        if "model" in t.columns and t["model"].nunique() > 1:
            raise InputError(f"the {name} holds {t['model'].nunique()} models; give one model's table")
    if "model" in js.columns and "model" in metrics.columns and len(js) and len(metrics):
        a, b = str(js["model"].iloc[0]), str(metrics["model"].iloc[0])
        if a != b:
            raise FormatError(f"{label} is of model {a!r}, the metrics table of {b!r}")
    _, heads = js_matrix(js)
    if {"layer", "head"} <= set(metrics.columns):
        ids = numeric_columns(metrics, ["layer", "head"], "metrics table").astype(int)
        known = set(zip(ids["layer"], ids["head"]))
        stray = [h for h in heads if h not in known]
        if stray:
            raise FormatError(f"{label} has heads the metrics table lacks (layer, head): {stray[:5]}")


def js_matrix(js: "pd.DataFrame") -> tuple["np.ndarray", list[tuple[int, int]]]:
    """Square symmetric JS matrix [n, n] and the (layer, head) label of each row from a pair table."""
    import numpy as np

    need = {"layer_a", "head_a", "layer_b", "head_b", "js"}
    missing = need - set(js.columns)
    if missing:
        raise InputError(f"JS table has no column(s) {', '.join(sorted(missing))}")
    js = numeric_columns(js, ["layer_a", "head_a", "layer_b", "head_b", "js"], "JS table")
    if (js["js"] < 0).any():
        raise FormatError("JS table holds negative divergences")
    labels = sorted(
        set(zip(js["layer_a"].astype(int), js["head_a"].astype(int))) | set(zip(js["layer_b"].astype(int), js["head_b"].astype(int)))
    )
    pos = {lab: n for n, lab in enumerate(labels)}
    D = np.zeros((len(labels), len(labels)))
    for la, ha, lb, hb, v in js[["layer_a", "head_a", "layer_b", "head_b", "js"]].itertuples(index=False):
        a, b = pos[(int(la), int(ha))], pos[(int(lb), int(hb))]
        D[a, b] = D[b, a] = float(v)
    return D, labels


def embed_js(js: "pd.DataFrame", seed: int = 0) -> "pd.DataFrame":
    """2-D MDS embedding of the heads from their pairwise JS divergences (distance = sqrt(JS))."""
    import numpy as np
    import pandas as pd
    from sklearn.manifold import MDS

    D, labels = js_matrix(js)
    if len(labels) < 3:
        raise InputError("MDS needs at least 3 heads in the JS table")
    import inspect

    params = inspect.signature(MDS).parameters
    kw = {"metric": "precomputed", "init": "classical_mds"} if "metric_mds" in params else {"dissimilarity": "precomputed"}
    mds = MDS(n_components=2, random_state=seed, n_init=1 if "init" in kw else 4, **kw)
    xy = mds.fit_transform(np.sqrt(np.clip(D, 0, None)))
    return pd.DataFrame({"layer": [l for l, _ in labels], "head": [h for _, h in labels], "x": xy[:, 0], "y": xy[:, 1]})
