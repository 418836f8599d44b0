"""The atlas figures draw what correlations.csv holds: an interval that misses its own rho (a percentile
bootstrap with ties can), an undefined rho, an interval over too few layers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnscope.atlas.stats import correlation_table
from attnscope.plots.atlas import correlation_forest, geometry_vs_behaviour


def _row(rho: float, low: float, high: float, few: bool = False, relation: str = "no relation") -> dict:
    return {"x": "symmetry", "y": "sink_text", "n": 12, "unit": "layer", "n_units": 3 if few else 6,
            "few_units": few, "rho": rho, "ci_low": low, "ci_high": high, "q_run": 0.5, "relation": relation,
            "interval": "percentile bootstrap 95% CI over layers (100 resamples)"}


def test_the_forest_draws_an_interval_that_misses_its_own_rho_where_it_lies():
    """rho 0.71 with the percentile interval [0.72, 1.0]: errorbar refused it (negative xerr); the bar is
    drawn from 0.72 to 1.0 and the dot at 0.71."""
    corr = pd.DataFrame([_row(0.7071, 0.7227, 1.0), _row(0.1, -0.4, 0.5, few=True), _row(*[float("nan")] * 3)])
    ax = correlation_forest(corr).axes[0]
    segs = [np.asarray(g) for c in ax.collections if hasattr(c, "get_segments") for g in c.get_segments()]
    spans = sorted((round(g[0][0], 4), round(g[1][0], 4)) for g in segs if len(g) == 2 and np.isfinite(g).all())
    assert spans == [(-0.4, 0.5), (0.7227, 1.0)]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any("(few layers)" in t for t in labels) and sum("(few" in t for t in labels) == 1
    assert labels[2].endswith("(rho undefined)")


def test_an_undefined_rho_is_titled_undefined_and_few_layers_are_named():
    rng = np.random.default_rng(0)
    t = pd.DataFrame([{"layer": li, "head": h} for li in range(3) for h in range(4)])
    t["symmetry"], t["induction_random"], t["sink_text"] = rng.normal(size=12), rng.normal(size=12), 0.5
    corr = correlation_table(t, ["symmetry"], ["induction_random", "sink_text"], n_boot=50)
    fig = geometry_vs_behaviour(t, "symmetry", ["induction_random", "sink_text"], correlations=corr, hue="layer")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[1] == "rho undefined (-), n = 12" and "nan" not in " ".join(titles)
    assert "in 3 layers (few)" in titles[0]
