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


def _spread(n_layers=5, kept=None):
    """One head per layer on sink_random, clean 0.8, kept fractions ``kept`` (default spread out), s apart."""
    kept = kept if kept is not None else [0.1 + 0.2 * i for i in range(n_layers)]
    base = dict(model="m", intervention="sym", measure="sink_random", n=4, clean=0.8, p=0.01, p_bh=0.01)
    rows = []
    for layer, k in enumerate(kept):
        value = 0.8 * k
        rows.append({**base, "layer": layer, "head": 0, "value": value, "delta": value - 0.8,
                     "ci_low": value - 0.8 - 0.1, "ci_high": value - 0.8 + 0.1, "symmetry": 0.1 * layer})
    return pd.DataFrame(rows)


def test_the_sym_figures_layer_colours_are_one_per_layer_with_integer_ticks():
    from matplotlib.colors import BoundaryNorm

    from attnscope.plots.interventions import sym_vs_symmetry

    fig = sym_vs_symmetry(_spread(n_layers=7))
    bars = [a for a in fig.axes if a.get_label() == "<colorbar>"]
    assert len(bars) == 1
    cb = bars[0]
    mappable = cb._colorbar.mappable  # the filled points of the panels
    assert len(mappable.get_offsets()) == 7
    assert isinstance(mappable.norm, BoundaryNorm)  # discrete: one block per layer, not a continuous scale
    np.testing.assert_allclose(mappable.norm.boundaries, np.arange(-0.5, 7.0, 1.0))
    assert mappable.cmap.N == 7
    ticks = cb.get_yticks()
    assert len(ticks) >= 2 and np.all(ticks == np.round(ticks)) and set(ticks) <= set(range(7))
    colours = mappable.get_facecolors()  # every layer its own colour
    assert len({tuple(np.round(c, 4)) for c in colours}) == 7


def test_the_sym_figure_clips_kept_fractions_to_its_range_and_counts_what_it_clipped():
    from matplotlib.collections import LineCollection, PathCollection

    from attnscope.plots.interventions import KEPT_RANGE, sym_vs_symmetry

    lo, hi = KEPT_RANGE
    t = _spread(kept=[2.6, -0.9, 0.5, 1.9, 0.8])  # two above the range, one below
    ax = [a for a in sym_vs_symmetry(t).axes if a.get_title() == "sink_random"][0]
    ys = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections if isinstance(c, PathCollection)])
    assert ys.min() >= lo and ys.max() <= hi
    assert sorted(np.round(ys, 6)) == sorted(np.round([hi, lo, 0.5, hi, 0.8], 6))  # clipped ones at the edge
    markers = {c.get_paths()[0].vertices.round(3).tobytes() for c in ax.collections
               if isinstance(c, PathCollection) and len(c.get_offsets())}
    assert len(markers) == 3  # circles inside, triangles up at the top edge and down at the bottom
    segs = [np.asarray(g) for c in ax.collections if isinstance(c, LineCollection) for g in c.get_segments()]
    ends = np.concatenate([g[:, 1] for g in segs])
    assert ends.min() >= lo and ends.max() <= hi
    lo_y, hi_y = ax.get_ylim()
    assert lo_y < lo and hi_y > hi and hi_y - lo_y < 1.2 * (hi - lo)  # the range and a margin, not the data's
    label = ax.get_ylabel()
    assert f"2 above {hi:g}" in label and f"1 below {lo:g}" in label
    inside = _spread(kept=[0.2, 0.5, 0.9, 1.1, 0.4])
    label = [a for a in sym_vs_symmetry(inside).axes if a.get_title() == "sink_random"][0].get_ylabel()
    assert "above" not in label and "below" not in label


def test_the_sym_figures_names_sit_beside_their_own_points_and_never_overlap():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from attnscope.plots.interventions import KEPT_RANGE, LABELLED, sym_vs_symmetry

    # crowded at the bottom left (the heads that keep least), one clipped below the range
    t = _spread(n_layers=6, kept=[0.05, 0.06, 0.07, -1.0, 0.9, 1.0]).assign(symmetry=[0.0, 0.002, 0.004, 0.001, 0.5, 0.7])
    fig = sym_vs_symmetry(t)
    ax = [a for a in fig.axes if a.get_title() == "sink_random"][0]
    names = {a.get_text(): a for a in ax.texts}
    assert set(names) == {"L3H0", "L0H0", "L1H0"} and len(names) == LABELLED
    point = {f"L{r.layer}H{r.head}": (r.symmetry, max(r.value / r.clean, KEPT_RANGE[0])) for r in t.itertuples()}
    for name, a in names.items():
        np.testing.assert_allclose(a.xy, point[name])  # anchored at its own (drawn) point
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = {n: Text.get_window_extent(a, renderer) for n, a in names.items()}
    assert not any(b1.overlaps(b2) for i, b1 in enumerate(boxes.values()) for b2 in list(boxes.values())[i + 1:])
    frame = ax.get_window_extent(renderer)
    for name, box in boxes.items():  # beside its point: within ~50 points, and inside the panel
        px, py = ax.transData.transform(names[name].xy)
        gap = np.hypot(max(box.x0 - px, 0, px - box.x1), max(box.y0 - py, 0, py - box.y1))
        assert gap <= 50 * fig.dpi / 72, (name, gap)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
