"""Figures of head interventions: one panel per named behaviour / per intervention; empty inputs say why."""

from __future__ import annotations

import numpy as np
import pandas as pd


def _table(encoder: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for layer in range(3):
        for head in range(4):
            for kind in ("sym", "anti", "ablate"):
                measures = (["loss"] if kind == "ablate" else ["loss", "induction_random", "sink_random"])
                for m in measures:
                    d = np.nan if (encoder and m == "loss") else float(rng.normal(scale=0.1))
                    rows.append(dict(model="m", layer=layer, head=head, intervention=kind, measure=m, n=4, clean=0.5,
                                     value=0.5 + d, delta=d, ci_low=d - 0.05, ci_high=d + 0.05, p=0.01, p_bh=0.04,
                                     symmetry=float(rng.uniform(-0.2, 0.8))))
    return pd.DataFrame(rows)


def test_sym_panels_and_loss_heatmaps():
    from matplotlib.figure import Figure

    from attnscope.plots.interventions import loss_heatmap, named_measures, sym_vs_symmetry

    t = _table()
    assert named_measures(t) == ["induction_random", "sink_random"]
    fig = sym_vs_symmetry(t, title="x")
    assert isinstance(fig, Figure) and len([a for a in fig.axes if a.get_label() != "<colorbar>"]) >= 2
    fig = loss_heatmap(t)
    titles = [a.get_title() for a in fig.axes if a.get_title()]
    assert titles == ["sym", "anti", "ablate"]  # the interventions' order, not alphabetical
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape == (3, 4)


def test_an_encoder_without_loss_draws_a_note():
    from attnscope.plots.interventions import loss_heatmap

    fig = loss_heatmap(_table(encoder=True))
    assert any("no loss" in t.get_text() for a in fig.axes for t in a.texts)
