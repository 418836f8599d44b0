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


def test_the_sym_figure_plots_the_kept_fraction_and_its_labels_never_overlap():
    from attnscope.plots.interventions import MIN_CLEAN, sym_vs_symmetry

    rng = np.random.default_rng(1)
    rows = []
    for head in range(12):  # crowded: every head at nearly the same s and kept fraction
        clean = 0.05 if head == 11 else 0.6
        value = clean * (0.1 + 0.01 * head)
        rows.append(dict(model="m", layer=head % 3, head=head, intervention="sym", measure="sink_random", n=4,
                         clean=clean, value=value, delta=value - clean, ci_low=value - clean - 0.02,
                         ci_high=value - clean + 0.02, p=0.01, p_bh=0.01, symmetry=0.3 + 1e-3 * rng.normal()))
    rows.append({**rows[0], "measure": "induction_random", "clean": 0.01, "value": 0.0})  # no head shows it
    t = pd.DataFrame(rows)
    fig = sym_vs_symmetry(t)
    ax = [a for a in fig.axes if a.get_label() != "<colorbar>" and a.collections][0]
    assert ax.get_title() == "sink_random"  # induction (all clean < 0.1) gets no panel, the title says so
    assert "induction_random" in fig._suptitle.get_text()
    from matplotlib.collections import PathCollection

    drawn = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections if isinstance(c, PathCollection)])
    kept = (t["value"] / t["clean"])[(t["measure"] == "sink_random") & (t["clean"] >= MIN_CLEAN)]
    np.testing.assert_allclose(np.sort(drawn), np.sort(kept.to_numpy()))  # the kept fraction, not the change
    assert "kept fraction" in ax.get_ylabel() and "1 heads with clean < 0.1 not drawn" in ax.get_xlabel()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = [Text.get_window_extent(a, renderer) for a in ax.texts]  # the label itself, not its leader line
    assert len(boxes) == 3
    assert not any(b1.overlaps(b2) for i, b1 in enumerate(boxes) for b2 in boxes[i + 1:])


def test_the_sym_figures_collapse_line_is_the_interventions_own_threshold():
    import inspect

    from attnscope.interventions.summary import KEEP
    from attnscope.plots.interventions import sym_vs_symmetry

    assert inspect.signature(sym_vs_symmetry).parameters["collapse_at"].default == KEEP


def test_the_sym_figures_bar_is_the_deltas_interval_on_the_kept_scale():
    """clean 1, delta -0.5 [-0.6, -0.4]: the point at 0.5, the bar from 0.4 to 0.6 (it was drawn from -0.1 to
    0.9: the interval's bounds were used as distances from the point); no interval (NaN): no bar."""
    from matplotlib.collections import LineCollection

    from attnscope.plots.interventions import sym_vs_symmetry

    base = dict(model="m", intervention="sym", measure="sink_random", n=4, clean=1.0, p=0.01, p_bh=0.01)
    t = pd.DataFrame([{**base, "layer": 0, "head": 0, "value": 0.5, "delta": -0.5, "ci_low": -0.6, "ci_high": -0.4,
                       "symmetry": 0.2},
                      {**base, "layer": 1, "head": 0, "value": 0.8, "delta": -0.2, "ci_low": np.nan,
                       "ci_high": np.nan, "symmetry": 0.6}])
    ax = [a for a in sym_vs_symmetry(t).axes if a.get_title() == "sink_random"][0]
    segs = [np.asarray(g) for c in ax.collections if isinstance(c, LineCollection) for g in c.get_segments()]
    bars = sorted(tuple(np.round(g[:, 1], 6)) for g in segs if len(g) == 2 and np.isfinite(g).all())
    assert bars == [(0.4, 0.6)]
