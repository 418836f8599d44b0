"""The rank cascade: its table from score records, and its figure (the lines hold the table's values)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import InputError
from attnscope.geometry import rank_cascade, records_frame
from attnscope.plots import save_figure
from attnscope.plots.spectra import plot_rank_cascade


def fake_spectra(model="org/model", n_layers=4, n_heads=3, seed=0, offsets=None):
    rng = np.random.default_rng(seed)
    recs = []
    for off in offsets or [None]:
        for layer in range(n_layers):
            for head in range(n_heads):
                recs.append(dict(model=model, family="llama", stack="decoder", level="head", layer=layer, head=head,
                                 symmetry=0.1, directionality=0.0, d_head=8, anti_rank=2 + layer + head + (off or 0),
                                 sym_rank=rng.uniform(1, 16), sym_signature=rng.uniform(-1, 1),
                                 anti_top2=rng.uniform(0, 1), **({"offset": off} if off is not None else {})))
            recs.append(dict(model=model, family="llama", stack="decoder", level="layer", layer=layer, symmetry=0.2,
                             directionality=0.0, d_head=8, anti_rank=50.0, sym_rank=50.0, sym_signature=0.0,
                             anti_top2=0.1, **({"offset": off} if off is not None else {})))
    return records_frame(recs)


def test_cascade_is_the_median_over_heads_at_relative_depth():
    casc = rank_cascade(fake_spectra())
    assert casc["level"].eq("head").all() and len(casc) == 4
    np.testing.assert_allclose(casc["relative_depth"], [0, 0.25, 0.5, 0.75])  # layer / layers
    np.testing.assert_allclose(casc["anti_rank"], [3, 4, 5, 6])  # median of 2 + layer + (0, 1, 2)
    np.testing.assert_allclose(casc["anti_rank_q1"], [2.5, 3.5, 4.5, 5.5])


def test_cascade_of_an_offset_table_uses_offset_zero():
    casc = rank_cascade(fake_spectra(offsets=[0, 100]))
    np.testing.assert_allclose(casc["anti_rank"], [3, 4, 5, 6])


def test_cascade_of_layer_rows_and_bad_tables():
    df = fake_spectra()
    casc = rank_cascade(df[df["level"] == "layer"])
    assert casc["level"].eq("layer").all() and (casc["anti_rank"] == 50).all()
    with pytest.raises(InputError, match="anti_rank"):
        rank_cascade(df.drop(columns="anti_rank"))


def test_figure_holds_one_line_per_model(tmp_path):
    df = pd.concat([fake_spectra(), fake_spectra("other/model", n_layers=2, seed=1)], ignore_index=True)
    casc = rank_cascade(df)
    fig = plot_rank_cascade(casc)
    for ax, col in zip(fig.axes[:2], ("anti_rank", "sym_rank")):
        curves = [ln for ln in ax.lines if len(ln.get_xdata()) > 1 and ln.get_linestyle() == "-"]
        assert len(curves) == 2
        for ln, (_, grp) in zip(curves, casc.groupby("model", sort=False)):
            np.testing.assert_allclose(ln.get_xdata(), grp["relative_depth"])
            np.testing.assert_allclose(ln.get_ydata(), grp[col])
    assert save_figure(fig, tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_figure_wants_a_cascade_table():
    with pytest.raises(InputError, match="relative_depth"):
        plot_rank_cascade(fake_spectra())


def test_one_model_gets_bands_and_draws_into_a_given_figure():
    from attnscope.plots import new_figure

    fig = new_figure()
    assert plot_rank_cascade(rank_cascade(fake_spectra()), fig=fig) is fig
    assert len(fig.axes[0].collections) == 1  # the IQR band


def test_relative_divides_by_the_largest_rank():
    casc = rank_cascade(fake_spectra())
    fig = plot_rank_cascade(casc, relative=True)
    line = next(ln for ln in fig.axes[0].lines if len(ln.get_xdata()) == 4)
    np.testing.assert_allclose(line.get_ydata(), casc["anti_rank"] / 16)  # d_head 8
    assert fig.axes[0].get_ylim()[1] <= 1.05
