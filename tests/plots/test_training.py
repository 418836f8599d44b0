"""Training figures on tiny run tables: the curves are the table's columns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnscope.plots import new_figure
from attnscope.plots import training as tp


def test_loss_curves_train_and_held_out():
    losses = pd.DataFrame({"run": ["a"] * 4 + ["b"] * 4, "objective": ["clm"] * 4 + ["mlm"] * 4,
                           "init": "default", "step": [0, 10, 20, 30] * 2,
                           "loss": [5.0, 4.0, 3.0, 2.5, 6.0, 5.5, 5.0, 4.5],
                           "eval_loss": [np.nan, np.nan, 3.2, 2.8, np.nan, 5.7, np.nan, 4.9]})
    fig = tp.loss_curves(losses)
    assert [ax.get_title() for ax in fig.axes] == ["clm loss", "mlm loss"]
    train, held = fig.axes[1].lines[:2]
    np.testing.assert_array_equal(train.get_xdata(), [10, 20, 30])  # step 0 is not a training loss
    np.testing.assert_array_equal(train.get_ydata(), [5.5, 5.0, 4.5])
    np.testing.assert_array_equal(held.get_ydata(), [5.7, 4.9])


def test_score_medians_and_layers_into_a_given_figure():
    summ = pd.DataFrame({"run": "a", "init": "symmetric", "stack": "decoder", "step": [0, 100, 200],
                         "symmetry_median": [0.1, 0.3, 0.5], "symmetry_q1": [0.0, 0.2, 0.4], "symmetry_q3": [0.2, 0.4, 0.6],
                         "directionality_median": [0.0, -0.2, -0.4], "directionality_q1": [-0.1, -0.3, -0.5],
                         "directionality_q3": [0.1, -0.1, -0.3]})
    fig = new_figure()
    assert tp.score_medians(summ, fig=fig) is fig
    line = fig.axes[1].lines[0]
    np.testing.assert_array_equal(line.get_ydata(), [0.0, -0.2, -0.4])
    assert line.get_linestyle() == "--"  # symmetric init
    scores = pd.DataFrame({"run": "a", "stack": "decoder", "level": "layer", "step": [0, 100] * 2,
                           "layer": [0, 0, 1, 1], "symmetry": [0.1, 0.2, 0.3, 0.4], "directionality": [0.0, 0.1, 0.2, 0.3]})
    lay = tp.score_layers(scores)
    np.testing.assert_array_equal(lay.axes[0].lines[1].get_ydata(), [0.3, 0.4])
