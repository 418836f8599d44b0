"""Head-anatomy figures on tiny tables: every panel's image / points are the input data, integer head ticks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope.plots import heads as hp
from attnscope.plots import new_figure


def metrics_table(n_layers=3, n_heads=5, model="org/tiny", seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    layer, head = np.divmod(np.arange(n_layers * n_heads), n_heads)
    df = pd.DataFrame({"model": model, "layer": layer, "head": head})
    for m in ("entropy", "sparsity", "distance", "confidence", "sink_first"):
        df[m] = rng.random(len(df))
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # row order must not matter


def explicit_grid(df, col):
    g = np.full((df["layer"].max() + 1, df["head"].max() + 1), np.nan)
    for r in df.itertuples():
        g[r.layer, r.head] = getattr(r, col)
    return g


def test_layer_head_grid_is_the_explicit_grid_with_gaps():
    df = metrics_table().iloc[:-2]  # two heads missing -> NaN there
    np.testing.assert_array_equal(hp.layer_head_grid(df, "entropy"), explicit_grid(df, "entropy"))
    assert np.isnan(hp.layer_head_grid(df, "entropy")).sum() == 2


def test_metric_heatmaps_images_and_integer_ticks():
    df = metrics_table(n_layers=3, n_heads=7)
    fig = hp.metric_heatmaps(df, metrics=("entropy", "distance", "not_a_column"), title="t")
    images = [ax for ax in fig.axes if ax.get_images()]
    assert [ax.get_title() for ax in images] == ["entropy", "distance"]
    for ax, col in zip(images, ("entropy", "distance")):
        np.testing.assert_array_equal(ax.get_images()[0].get_array(), explicit_grid(df, col))
        xt, yt = ax.get_xticks(), ax.get_yticks()
        for t, n in ((xt, 7), (yt, 3)):  # integer indices inside the grid, evenly spaced from 0 (not 2.5)
            assert t[0] == 0 and t[-1] <= n - 1 and np.all(t == np.round(t)) and len(set(np.diff(t))) <= 1
        assert ax.get_ylim()[0] < ax.get_ylim()[1]  # layer 0 at the bottom, as in the geometry heatmaps
    assert fig.get_suptitle() == "t"


def test_metric_scatter_one_point_per_head_per_model():
    df = pd.concat([metrics_table(model="/x/y/site-packages/pkg/model"), metrics_table(model="gpt2", seed=1)])
    fig = hp.metric_scatter(df, pairs=(("distance", "entropy"),), hue="model")
    ax = fig.axes[0]
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(df)
    assert ax.get_legend() is None and len(fig.legends) == 1  # the legend sits below the panels, off the data
    by_label = {t.get_text() for t in fig.legends[0].get_texts()}
    assert by_label == {"pkg", "gpt2"}  # model names, not truncated paths
    gpt2 = next(c for c in ax.collections if c.get_label() == "gpt2")
    sub = df[df["model"] == "gpt2"]
    np.testing.assert_array_equal(gpt2.get_offsets(), sub[["distance", "entropy"]].to_numpy())


def test_metric_scatter_by_layer_is_a_sequential_map_with_a_colour_bar():
    df = metrics_table(n_layers=30, n_heads=3)
    fig = hp.metric_scatter(df, pairs=(("distance", "entropy"), ("sparsity", "entropy")), hue="layer")
    ax = fig.axes[0]
    assert ax.get_legend() is None and not fig.legends  # nothing drawn over the points
    (points,) = ax.collections
    np.testing.assert_array_equal(points.get_offsets(), df[["distance", "entropy"]].to_numpy())
    np.testing.assert_array_equal(points.get_array(), df["layer"].to_numpy(float))  # colour = the head's layer
    assert points.get_cmap().name == "viridis" and points.norm.vmin == 0 and points.norm.vmax == 29
    colours = points.to_rgba(np.arange(30.0))
    assert len({tuple(np.round(c, 6)) for c in colours}) == 30  # layers 0, 10, 20 no longer share a colour
    bars = [a for a in fig.axes if a.get_ylabel() == "layer"]
    assert len(bars) == 1  # one colour bar for both panels
    ticks = bars[0].get_yticks()
    assert np.all(ticks == np.round(ticks))


def test_example_maps_images_are_sqrt_of_the_maps():
    rng = np.random.default_rng(0)
    ex = {0: rng.random((2, 4, 4)), 3: rng.random((2, 4, 4))}
    fig = hp.example_maps(ex)
    images = [ax.get_images()[0].get_array() for ax in fig.axes if ax.get_images()]
    assert len(images) == 4
    np.testing.assert_allclose(images[1], ex[0][1] ** 0.5)
    np.testing.assert_allclose(images[2], ex[3][0] ** 0.5)


def test_silhouette_curve_lines_and_best_k_into_given_axes():
    sil = pd.DataFrame({"method": ["ward"] * 3 + ["kmeans"] * 3, "k": [2, 3, 4] * 2,
                        "silhouette": [0.2, 0.5, 0.3, 0.4, 0.1, 0.2]})
    fig = new_figure()
    ax = fig.add_subplot()
    assert hp.silhouette_curve(sil, ax=ax) is fig
    lines = {ln.get_label(): ln for ln in ax.lines}
    np.testing.assert_array_equal(lines["ward"].get_ydata(), [0.2, 0.5, 0.3])
    notes = sorted(t.get_text() for t in ax.texts)
    assert notes == ["best k=2", "best k=3"]


def test_cluster_map_is_the_label_grid():
    df = metrics_table(n_layers=2, n_heads=4)
    labels = df[["model", "layer", "head"]].assign(cluster=(df["layer"] * 4 + df["head"]) % 3)
    fig = hp.cluster_map(labels, title="ward, k = 3")
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), explicit_grid(labels, "cluster"))
    assert ax.get_title() == "org/tiny"
    colours = {tuple(im) for im in fig.axes[0].get_images()[0].cmap(np.arange(3))}
    assert len(colours) == 3  # one distinct colour per cluster
    assert np.array_equal(ax.get_xticks(), np.arange(4))


def test_js_mds_points():
    emb = pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 0], "x": [0.1, 0.2, 0.3], "y": [1.0, 2.0, 3.0]})
    fig = hp.js_mds(emb)
    np.testing.assert_array_equal(fig.axes[0].collections[0].get_offsets(), emb[["x", "y"]].to_numpy())
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["L0H0", "L0H1", "L1H0"]  # far apart: all named


@pytest.mark.parametrize("n", [1, 12, 13, 40])
def test_integer_ticks_stay_integers(n):
    from attnscope.plots import integer_ticks

    ax = new_figure().add_subplot()
    integer_ticks(ax.xaxis, n)
    t = ax.get_xticks()
    assert t[0] == 0 and t[-1] < n and len(t) <= 12 and np.all(np.diff(t) == np.diff(t)[0] if len(t) > 1 else True)
    assert np.all(t == np.round(t))
