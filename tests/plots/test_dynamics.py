"""Dynamics figures on tiny tables: lines and points are the input columns; the bifurcation diagram's
vectorised regime join agrees with a per-point dictionary lookup."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from attnscope.plots import dynamics as dp
from attnscope.plots import new_figure


def traj_table(betas=(1.2, 1.3), n=50, M=3, seed=0):
    rng = np.random.default_rng(seed)
    traj = {"mo_se": rng.standard_normal((len(betas), n, M)), "A": rng.random((len(betas), n, M)),
            "t": np.arange(n) + 10, "beta_o": np.array(betas)}
    return traj, dp.trajectory_frame(traj)


def test_trajectory_frame_is_the_long_form_of_the_arrays():
    traj, df = traj_table()
    assert len(df) == 2 * 50 * 3
    row = df[(df["beta_o"] == 1.3) & (df["t"] == 17) & (df["feature"] == 2)].iloc[0]
    assert row["mo_se"] == traj["mo_se"][1, 7, 2] and row["A"] == traj["A"][1, 7, 2]


def test_timeseries_panels_hold_the_last_steps():
    traj, df = traj_table()
    fig = dp.timeseries(df, feature=1, last=20)
    assert len(fig.axes) == 2
    line = fig.axes[1].lines[0]
    np.testing.assert_array_equal(line.get_xdata(), traj["t"][-20:])
    np.testing.assert_array_equal(line.get_ydata(), traj["mo_se"][1, -20:, 1])


def test_spectrum_autocorrelation_and_phase_plane_hold_the_series():
    traj, df = traj_table(betas=(1.2, 1.3, 1.4, 1.5))
    y = traj["mo_se"][2, :, 0] - traj["mo_se"][2, :, 0].mean()
    spec = dp.power_spectrum(df)
    assert len(spec.axes) == 6 and sum(ax.axison for ax in spec.axes) == 4  # 3 a row, spare panels off
    np.testing.assert_allclose(spec.axes[2].lines[0].get_ydata(), (np.abs(np.fft.rfft(y)) ** 2 / y.size)[1:] + 1e-300)
    ac = dp.autocorrelation(df, max_lag=5).axes[2].lines[0].get_ydata()
    explicit = np.array([np.dot(y[: y.size - k], y[k:]) for k in range(6)]) / np.dot(y, y)
    np.testing.assert_allclose(ac, explicit, atol=1e-12)
    pp = dp.phase_plane(df, features=(0, 2)).axes[3].lines[0]
    np.testing.assert_array_equal(pp.get_xdata(), traj["mo_se"][3, :, 0])
    np.testing.assert_array_equal(pp.get_ydata(), traj["mo_se"][3, :, 2])


def sweep_tables(direction=False):
    values = pd.DataFrame({"beta_o": [1.0, 1.1, 1.2, 1.3], "regime": ["periodic", "chaotic", "quasi-periodic", "periodic"],
                           "lambda_1": [-0.1, 0.02, 0.0, -0.05], "lambda_2": [-0.3, -0.1, -0.2, -0.4]})
    rows = []
    for b in [1.0, 1.1, 1.2, 1.3, 1.4]:  # 1.4: no row in the value table -> unknown
        for i in range(3):
            rows.append({"kind": "tail", "beta_o": b, "mo_se0": b + i / 10, "mo_se1": 0.0})
        if b in (1.0, 1.1, 1.4):  # 1.2 has no section point: its tail is shown
            rows.append({"kind": "section", "beta_o": b, "mo_se0": -b, "mo_se1": 0.0})
    points = pd.DataFrame(rows)
    if direction:
        values = pd.concat([values.assign(direction="up"), values.assign(direction="down", regime="chaotic")])
        points = pd.concat([points.assign(direction="up"), points.assign(direction="down")], ignore_index=True)
    return values, points


@pytest.mark.parametrize("direction", [False, True])
def test_point_regimes_agree_with_a_per_point_lookup(direction):
    values, points = sweep_tables(direction)
    keys = ["beta_o"] + (["direction"] if direction else [])
    lookup = {tuple(r[:-1]): r[-1] for r in values[keys + ["regime"]].itertuples(index=False)}
    expected = [lookup.get(tuple(r), "unknown") for r in points[keys].itertuples(index=False)]
    got = dp.point_regimes(values, points.iloc[::-1], keys, "regime")  # any row order, aligned by index
    assert list(got.sort_index()) == expected


def test_bifurcation_shows_tail_for_periodic_and_section_otherwise():
    values, points = sweep_tables()
    fig = dp.bifurcation(values, points)
    ax = fig.axes[0]
    drawn = {ln.get_color(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines if len(ln.get_xdata())}
    periodic = drawn[dp.REGIME_COLORS["periodic"]]
    assert periodic[0] == [1.0] * 3 + [1.3] * 3 and periodic[1] == pytest.approx([1.0, 1.1, 1.2, 1.3, 1.4, 1.5])
    assert drawn[dp.REGIME_COLORS["chaotic"]] == ([1.1], [-1.1])  # its section point only
    assert drawn[dp.REGIME_COLORS["quasi-periodic"]][1] == pytest.approx([1.2, 1.3, 1.4])  # no section: tail
    assert drawn[dp.REGIME_COLORS["unknown"]] == ([1.4], [-1.4])
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"periodic", "chaotic", "quasi-periodic", "unknown"}


def test_lyapunov_curve_lines_are_the_exponents():
    values, _ = sweep_tables()
    fig = new_figure()
    ax = fig.add_subplot()
    assert dp.lyapunov_curve(values.assign(lambda_1_stderr=0.0), ax=ax) is fig  # non-exponent columns ignored
    lines = [ln for ln in ax.lines if ln.get_label().startswith("$")]
    assert [ln.get_label() for ln in lines] == ["$\\lambda_1$", "$\\lambda_2$"]
    np.testing.assert_array_equal(lines[0].get_ydata(), values["lambda_1"].to_numpy())
    both, _ = sweep_tables(direction=True)
    labels = [ln.get_label() for ln in dp.lyapunov_curve(both).axes[0].lines if ln.get_label().startswith("$")]
    assert labels == ["$\\lambda_1$ down", "$\\lambda_1$ up", "$\\lambda_2$ down", "$\\lambda_2$ up"]


def test_phase_diagram_image_is_the_grid():
    df = pd.DataFrame({"beta_o": [1.0, 2.0, 1.0, 2.0, 1.0, 2.0], "gamma": [0.1, 0.1, 0.2, 0.2, 0.3, 0.3],
                       "lambda_1": [-0.2, 0.1, 0.0, 0.3, -0.1, 0.05],
                       "regime": ["periodic", "chaotic", "quasi-periodic", "chaotic", "periodic", "hyperchaotic"]})
    img = dp.phase_diagram(df, x="beta_o", y="gamma").axes[0].get_images()[0]
    np.testing.assert_array_equal(img.get_array(), df["lambda_1"].to_numpy().reshape(3, 2))
    img = dp.phase_diagram(df, x="beta_o", y="gamma", color="regime").axes[0].get_images()[0]
    names = list(dp.REGIME_COLORS)
    np.testing.assert_array_equal(img.get_array(), df["regime"].map(names.index).to_numpy().reshape(3, 2))
    assert to_rgba(img.cmap(names.index("chaotic"))) == to_rgba(dp.REGIME_COLORS["chaotic"])


def test_finite_size_lines_are_the_errors():
    df = pd.DataFrame({"N": [1000, 10, 100], "rmse": [0.01, 0.1, 0.03], "max_abs_error": [0.02, 0.3, 0.09]})
    ax = dp.finite_size(df).axes[0]
    rms = next(ln for ln in ax.lines if ln.get_label() == "RMS error")
    np.testing.assert_array_equal(rms.get_xdata(), [10, 100, 1000])
    np.testing.assert_array_equal(rms.get_ydata(), [0.1, 0.03, 0.01])
