"""Emergence figures: a table in, a Figure out (into the caller's fig), one line for a table of the wrong kind."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope.emergence import formation
from attnscope.errors import InputError
from attnscope.plots.emergence import (emergence_figures, log_step_axis, plot_formation, plot_head_steps,
                                       plot_layer_trajectories, step_label)


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
    heat = plot_head_steps(table)
    img = heat.axes[0].images[0].get_array()
    assert img.shape == (6, 5) and np.isfinite(img).all()  # [heads, revisions]
    grid = plot_formation(formed).axes[0].images[0].get_array()
    assert grid.shape == (3, 2)


def test_into_the_callers_figure():
    from attnscope.plots import new_figure

    fig = new_figure()
    assert plot_head_steps(_table(stacks=("decoder",)), fig=fig, metrics=("induction_random",)) is fig


def test_step_axis_labels_the_revisions():
    from attnscope.plots import axes_for

    _, ax = axes_for(None)
    log_step_axis(ax, [0, 1, 10, 100, 1000, 2000, 5000, 10000, 20000, 143000], max_ticks=5)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) == 5 and labels[0] == "0" and labels[-1] == "143k"
    assert step_label(1500) == "1.5k" and step_label(2e6) == "2M" and step_label(7) == "7"


def test_not_an_emergence_table_is_one_line():
    with pytest.raises(InputError, match="emergence table"):
        plot_layer_trajectories(pd.DataFrame({"symmetry": [0.1]}))
    with pytest.raises(InputError, match="formation table"):
        plot_formation(_table())
