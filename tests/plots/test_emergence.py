"""Emergence figures: a table in, a Figure out (into the caller's fig), one line for a table of the wrong kind."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope.emergence import formation
from attnscope.errors import InputError
from attnscope.plots.emergence import (emergence_figures, log_step_axis, plot_formation, plot_head_steps,
                                       plot_layer_trajectories, step_label, step_ticks)


def _table(steps=(0, 1, 10, 100, 1000), stacks=("encoder", "decoder"), layers=3, heads=2):
    rng = np.random.default_rng(0)
    rows = []
    for i, step in enumerate(steps):
        for stack in stacks:
            for layer in range(layers):
                for head in range(heads):
                    rows.append({"model": "m", "revision": f"step{step}", "step": step, "tokens": step * 8,
                                 "stack": stack, "level": "head", "layer": layer, "head": head,
                                 "symmetry": min(1.0, i / 4 + rng.normal(0, 0.05)),
                                 "directionality": -i / 5, "induction_random": i / 5})
                rows.append({"model": "m", "revision": f"step{step}", "step": step, "tokens": step * 8, "stack": stack,
                             "level": "layer", "layer": layer, "head": None, "symmetry": 0.1 * i,
                             "directionality": 0.0, "induction_random": np.nan})
    return pd.DataFrame(rows)


def test_every_figure_is_drawn_with_data():
    table = _table()
    formed = formation(table)
    names = [name for name, _ in emergence_figures(table, formed)]
    assert names == ["emergence_layers.png", "emergence_heads.png", "emergence_formation.png",
                     "emergence_behaviour.png"]
    fig = plot_layer_trajectories(table)
    assert len(fig.axes) == 4 and all(len(ax.lines) >= 3 for ax in fig.axes)  # one line per layer (+ the 0 line)
    assert "no training loss recorded" in fig.get_supxlabel()  # no loss given: said so
    heat = plot_head_steps(table)
    img = heat.axes[0].images[0].get_array()
    assert img.shape == (6, 5) and np.isfinite(img).all()  # [heads, revisions]
    grid = plot_formation(formed).axes[0].images[0].get_array()
    assert grid.shape == (3, 2)


def test_into_the_callers_figure():
    from attnscope.plots import new_figure

    fig = new_figure()
    assert plot_head_steps(_table(stacks=("decoder",)), fig=fig, metrics=("induction_random",)) is fig


def test_layer_curves_plot_the_tables_layer_form_on_its_own_scale():
    table = _table()
    formed = formation(table, level="layer", noise_factor=0)
    fig = plot_layer_trajectories(table, formed=formed)
    ax = fig.axes[0]  # encoder s: the layer form 0.1 * i, not the heads' median
    data = [line for line in ax.lines if len(line.get_xdata()) == 5]
    assert len(data) == 3 and np.allclose(data[0].get_ydata(), [0.0, 0.1, 0.2, 0.3, 0.4])
    low, high = ax.get_ylim()
    assert -0.2 < low < 0 and 0.4 < high < 0.6  # autoscaled, not [-1, 1]
    stars = [line for line in ax.lines if line.get_marker() == "*"]
    assert len(stars) == 3 and stars[0].get_xdata()[0] == 10  # each layer reaches half of 0.4 at step 10
    assert "layer form M_L" in ax.get_ylabel()
    med = plot_layer_trajectories(table, curves="head-median").axes[0]
    assert "median over heads" in med.get_ylabel()
    with pytest.raises(InputError, match="curves must be"):
        plot_layer_trajectories(table, curves="mean")


def test_loss_panels_share_the_step_axis():
    loss = pd.DataFrame({"step": [0, 1, 5, 10, 100, 1000], "loss": [5, 4.9, 4.5, 4, 3, 2.5],
                         "eval_loss": [np.nan, np.nan, np.nan, 3.9, 3.1, 2.6]})
    fig = plot_layer_trajectories(_table(stacks=("decoder",)), loss=loss)
    assert len(fig.axes) == 4 and not fig.get_supxlabel()
    train_ax, eval_ax = fig.axes[2], fig.axes[3]
    assert list(train_ax.lines[0].get_ydata()) == [5, 4.9, 4.5, 4, 3, 2.5] and len(eval_ax.lines[0].get_xdata()) == 3
    assert train_ax.get_xlim() == fig.axes[0].get_xlim() and eval_ax.get_xlim() == fig.axes[1].get_xlim()


def test_step_ticks_never_collide():
    from attnscope.plots import axes_for

    # the case: a linear grid of 100-step checkpoints gave 400 and 500 side by side ("400500")
    assert step_ticks([0, 100, 200, 300, 400, 500]) == [0, 100, 200, 500]
    assert step_ticks([0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150]) == [0, 10, 20, 50, 100]
    pythia = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512] + list(range(1000, 143001, 1000))
    assert step_ticks(pythia) == [0, 10, 100, 1000, 10000, 100000]  # five decades: powers of ten (1 sits on 0)
    assert step_ticks([100, 110, 120, 130, 150]) == [100, 110, 120, 130, 150]  # no round step inside: its own
    _, ax = axes_for(None)
    log_step_axis(ax, [0, 1, 10, 100, 1000, 2000, 5000, 10000, 20000, 143000], max_ticks=5)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["0", "10", "1k", "100k"]  # at most 1/5 of the axis apart
    assert step_label(1500) == "1.5k" and step_label(2e6) == "2M" and step_label(7) == "7"


def test_not_an_emergence_table_is_one_line():
    with pytest.raises(InputError, match="emergence table"):
        plot_layer_trajectories(pd.DataFrame({"symmetry": [0.1]}))
    with pytest.raises(InputError, match="formation table"):
        plot_formation(_table())


def test_layer_curves_draw_each_layers_noise_band_and_mark_borderline_formations():
    """Issue 49 item 10: the margin (noise band) was in formation.csv only; a formation at 1.001x its margin looked
    like any other."""
    table = _table()
    formed = formation(table, level="layer", noise_factor=0)
    fig = plot_layer_trajectories(table, formed=formed)
    sym = fig.axes[0]
    spans = [p for p in sym.patches if p.get_alpha() == pytest.approx(0.07)]
    assert len(spans) == 3  # one band per layer of the encoder
    labels = fig.axes[1].get_legend_handles_labels()[1] if fig.axes[1].get_legend() is None else \
        [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "noise band: initial +- margin" in labels and "borderline (within 10% of its margin)" in labels
    border = formed.assign(borderline=True)
    fig = plot_layer_trajectories(table, formed=border)
    stars = [ln for ln in fig.axes[0].lines if ln.get_marker() == "*"]
    assert stars and all(ln.get_markerfacecolor() == "white" for ln in stars)
