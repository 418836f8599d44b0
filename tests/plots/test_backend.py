"""Figures leave matplotlib's backend and pyplot alone, need no screen, and show as PNG in a notebook."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

from attnscope.plots import new_figure

SRC = Path(__file__).resolve().parents[2] / "src" / "attnscope"


def _scores() -> pd.DataFrame:
    rows = [{"model": "m", "family": "bert", "stack": "encoder", "level": lvl, "layer": layer, "head": head, "symmetry": 0.1 * layer,
             "directionality": 0.2, "n_heads": 2}
            for layer in range(3) for lvl, head in (("layer", -1), ("head", 0), ("head", 1))]
    return pd.DataFrame(rows)


def test_no_backend_switch_anywhere_in_the_library():
    offenders = [str(p) for p in SRC.rglob("*.py")
                 if "matplotlib.use(" in p.read_text() or "switch_backend" in p.read_text()]
    assert offenders == []


def test_a_figure_draws_without_pyplot_and_without_touching_the_backend():
    """In a fresh interpreter whose user picked a backend: drawing and saving keeps it, and never loads pyplot."""
    code = (
        "import sys, io, matplotlib; matplotlib.use('svg');"
        "from attnscope.plots import new_figure;"
        "fig = new_figure(); fig.add_subplot().plot([0, 1]);"
        "png = fig._repr_png_(); fig.savefig(io.BytesIO(), format='png');"
        "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules, png[:4] == b'\\x89PNG')"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("MPLBACKEND", "DISPLAY")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["svg", "False", "True"]


def test_the_users_pyplot_keeps_working_after_an_attnscope_figure():
    import matplotlib
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    n_before = len(plt.get_fignums())
    from attnscope.plots.geometry import plot_layer_curves

    fig = plot_layer_curves(_scores())
    assert matplotlib.get_backend() == before
    assert len(plt.get_fignums()) == n_before  # not registered with pyplot: nothing to close, no leak
    assert fig._repr_png_()[:4] == b"\x89PNG"  # what a notebook shows for a returned figure


def test_a_figure_is_a_matplotlib_figure():
    from matplotlib.figure import Figure

    assert isinstance(new_figure(), Figure)
