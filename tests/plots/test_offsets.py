"""Figures of position-aware geometry: drawn from synthetic score / frequency tables, caller's fig / ax honoured."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnscope.plots import new_figure
from attnscope.plots.offsets import (
    frequency_figures,
    offset_figures,
    plot_frequency_usage,
    plot_offset_curves,
    plot_offset_heatmaps,
)


def scores(level: str = "layer") -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [{"model": "m/x", "stack": "decoder", "level": level, "layer": li, "head": None if level == "layer" else 0,
             "offset": o, "symmetry": rng.uniform(-1, 1), "directionality": rng.uniform(-1, 1)}
            for li in range(3) for o in (0, 1, 16, 256)]  # fmt: skip
    return pd.DataFrame(rows)


def freqs() -> pd.DataFrame:
    rows = [{"model": "m/x", "layer": li, "head": h, "pair": p, "wavelength": 2 * np.pi * 10 ** (p / 2),
             "energy_share": 1 / 4, "context_length": 512} for li in range(3) for h in range(2) for p in range(4)]
    return pd.DataFrame(rows)


def test_offset_curves_and_heatmaps_use_the_callers_figure() -> None:
    fig = new_figure()
    assert plot_offset_curves(scores(), fig=fig) is fig
    axes = [a for a in fig.axes if a.get_xscale() == "symlog"]
    assert len(axes) == 2 and axes[0].get_xlim() == (0.0, 256.0)
    assert len(axes[0].lines) == 3 + 1  # one line per layer, and the zero line
    heat = plot_offset_heatmaps(scores())
    img = heat.axes[0].images[0].get_array()
    assert img.shape == (3, 4)
    head_only = plot_offset_heatmaps(scores("head"))  # no layer rows: the median over heads stands in
    assert head_only.axes[0].images[0].get_array().shape == (3, 4)


def test_frequency_usage_on_the_callers_axes() -> None:
    fig = new_figure()
    ax = fig.add_subplot()
    assert plot_frequency_usage(freqs(), 1, context=512, ax=ax) is fig
    assert ax.get_xscale() == "log" and ax.get_legend() is not None
    assert ax.collections[0].get_array().size == 2 * 4  # heads x pairs


def test_figure_sets() -> None:
    assert [n for n, _ in offset_figures(scores())] == ["m_x_offsets.png", "m_x_offsets_heatmap.png"]
    assert [n for n, _ in frequency_figures(freqs())] == [f"m_x_frequencies_L{i}.png" for i in (0, 1, 2)]
