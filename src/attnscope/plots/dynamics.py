"""Figures of the mean-field dynamics (matplotlib, Agg): one function per figure, each taking tidy
tables (see :mod:`attnscope.dynamics`) and an optional ``ax`` (single panel) or ``fig`` (one panel per
beta_o) and returning the Figure; the caller saves it (:func:`attnscope.plots.save_figure`).

* trajectory tables: columns t, beta_o, feature, mo_se
* bifurcation value table: one row per parameter value (regime, regime_distinct, lambda_1, ...);
  points table: kind (tail | section), the parameter, mo_se0..mo_se{M-1}
* phase table: the two parameters, lambda_1.., regime; finite table: N, rmse, max_abs_error
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from .base import axes_for, figure_for

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

REGIME_COLORS = {"periodic": "tab:blue", "quasi-periodic": "tab:green", "chaotic": "tab:red",
                 "hyperchaotic": "tab:purple", "uncertain": "tab:orange", "unknown": "tab:gray"}
#: axis labels of the swept parameters
PARAM_LABELS = {"beta_o": r"$\beta_o$", "gamma": r"$\gamma$", "eps": r"$\varepsilon$"}
#: labels of the quantities a figure is coloured by (mathtext, never ``lambda_1`` as plain text)
COLOR_LABELS = {"lambda_1": r"largest Lyapunov exponent $\lambda_1$ (per step)", "regime": "regime"}


def _param(name: str) -> str:
    return PARAM_LABELS.get(name, name)


def _lambda_label(column: str) -> str:
    """``lambda_3`` -> ``$\lambda_3$``; anything else unchanged."""
    m = re.fullmatch(r"lambda_(\d+)", column)
    if not m:
        return column
    k = m.group(1)
    return rf"$\lambda_{k}$" if len(k) == 1 else rf"$\lambda_{{{k}}}$"


def trajectory_frame(traj: dict) -> "pd.DataFrame":
    """Tidy long table (t, beta_o, feature, mo_se, A) from :func:`attnscope.dynamics.trajectory`."""
    import pandas as pd

    mo, A, t = traj["mo_se"], traj["A"], traj["t"]
    B, n, M = mo.shape
    return pd.DataFrame({
        "t": np.tile(np.repeat(t, M), B), "beta_o": np.repeat(traj["beta_o"], n * M),
        "feature": np.tile(np.arange(M), B * n), "mo_se": mo.reshape(-1), "A": A.reshape(-1)})


def _series(df, feature: int):
    for b, g in df[df["feature"] == feature].groupby("beta_o", sort=True):
        g = g.sort_values("t")
        yield b, g["t"].to_numpy(), g["mo_se"].to_numpy()


def timeseries(df: "pd.DataFrame", *, feature: int = 0, last: int | None = 400, fig: "Figure | None" = None) -> "Figure":
    """m^o_se,feature against t (the last ``last`` steps), one panel per beta_o."""
    groups = list(_series(df, feature))
    fig = figure_for(fig, figsize=(8, 1.8 * len(groups) + 0.6))
    axes = fig.subplots(len(groups), 1, squeeze=False)
    for ax, (b, t, y) in zip(axes[:, 0], groups):
        sl = slice(-last, None) if last else slice(None)
        ax.plot(t[sl], y[sl], lw=0.8, marker=".", ms=2)
        ax.set_ylabel(f"$m^o_{{se,{feature + 1}}}$")
        ax.set_title(f"{PARAM_LABELS['beta_o']} = {b:g}", fontsize=9)
    axes[-1, 0].set_xlabel("t")
    fig.suptitle(f"time series of $m^o_{{se,{feature + 1}}}$" + (f" (last {last} steps)" if last else ""), fontsize=10)
    return fig


def _grid(fig: "Figure | None", n: int, w: float = 3.4, h: float = 2.8) -> tuple["Figure", np.ndarray]:
    """Up to three panels a row for ``n`` beta_o values; the spare panels switched off."""
    ncol = max(1, min(3, n))
    nrow = max(1, int(np.ceil(n / ncol)))
    fig = figure_for(fig, figsize=(w * ncol, h * nrow))
    axes = fig.subplots(nrow, ncol, squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    return fig, axes.ravel()


def power_spectrum(df: "pd.DataFrame", *, feature: int = 0, fig: "Figure | None" = None) -> "Figure":
    """|rfft(x - mean)|^2 / n of m^o_se,feature (log scale), one panel per beta_o."""
    groups = list(_series(df, feature))
    fig, axes = _grid(fig, len(groups))
    for ax, (b, _, y) in zip(axes, groups):
        y = y - y.mean()
        P = np.abs(np.fft.rfft(y)) ** 2 / y.size
        f = np.fft.rfftfreq(y.size)
        ax.semilogy(f[1:], P[1:] + 1e-300, lw=0.5)
        ax.set_title(f"{PARAM_LABELS['beta_o']} = {b:g}", fontsize=9)
        ax.set_xlabel("frequency (1/step)")
        ax.set_ylabel("power")
    fig.suptitle(f"power spectrum of $m^o_{{se,{feature + 1}}}$ (mean removed)", fontsize=10)
    return fig


def autocorrelation(df: "pd.DataFrame", *, feature: int = 0, max_lag: int = 200, fig: "Figure | None" = None) -> "Figure":
    """Normalised autocorrelation of m^o_se,feature up to ``max_lag`` steps, one panel per beta_o."""
    groups = list(_series(df, feature))
    fig, axes = _grid(fig, len(groups), h=2.4)
    for ax, (b, _, y) in zip(axes, groups):
        y = y - y.mean()
        n = y.size
        f = np.fft.rfft(y, 2 * n)
        ac = np.fft.irfft(f * np.conj(f))[: min(max_lag, n - 1) + 1]
        ac = ac / ac[0] if ac[0] > 0 else ac
        ax.plot(np.arange(ac.size), ac, lw=0.7)
        ax.axhline(0, color="k", lw=0.4)
        ax.set_title(f"{PARAM_LABELS['beta_o']} = {b:g}", fontsize=9)
        ax.set_xlabel("lag (steps)")
        ax.set_ylabel("autocorrelation")
    fig.suptitle(f"autocorrelation of $m^o_{{se,{feature + 1}}}$", fontsize=10)
    return fig


def phase_plane(
    df: "pd.DataFrame", *, features: tuple[int, int] = (0, 1), fig: "Figure | None" = None
) -> "Figure":
    """(m^o_se,f1, m^o_se,f2) scatter, one panel per beta_o."""
    f1, f2 = features
    betas = sorted(df["beta_o"].unique())
    fig, axes = _grid(fig, len(betas), h=3.1)
    for ax, b in zip(axes, betas):
        g = df[df["beta_o"] == b]
        x = g[g["feature"] == f1].sort_values("t")["mo_se"].to_numpy()
        y = g[g["feature"] == f2].sort_values("t")["mo_se"].to_numpy()
        ax.plot(x, y, ".", ms=0.8, alpha=0.6)
        ax.locator_params(axis="x", nbins=4)  # a small orbit's labels (-0.050) run together at the default count
        ax.set_title(f"{PARAM_LABELS['beta_o']} = {b:g}", fontsize=9)
        ax.set_xlabel(f"$m^o_{{se,{f1 + 1}}}$")
        ax.set_ylabel(f"$m^o_{{se,{f2 + 1}}}$")
    fig.suptitle(f"phase plane: $m^o_{{se,{f2 + 1}}}$ against $m^o_{{se,{f1 + 1}}}$, one panel per {_param('beta_o')}",
                 fontsize=10)
    return fig


def point_regimes(values: "pd.DataFrame", points: "pd.DataFrame", keys: list[str], column: str) -> "pd.Series":
    """The regime of each point's parameter value (a join on ``keys``; ``unknown`` where the value table
    has no row), aligned with ``points``."""
    regime = values[keys + [column]].drop_duplicates(keys).rename(columns={column: "_regime"})
    joined = points[keys].merge(regime, on=keys, how="left", validate="many_to_one")
    return joined["_regime"].fillna("unknown").set_axis(points.index)


def bifurcation(
    values: "pd.DataFrame", points: "pd.DataFrame", *, param: str = "beta_o", feature: int = 0,
    regime_column: str | None = None, title: str | None = None, ax: "Axes | None" = None,
) -> "Figure":
    """The paper-like diagram: saved points for periodic values, Poincare section otherwise,
    coloured by regime (Lyapunov regime when present, else the distinct-value one)."""
    col = regime_column or ("regime" if "regime" in values.columns else "regime_distinct")
    keys = [param] + (["direction"] if "direction" in values.columns else [])
    fig, ax = axes_for(ax, figsize=(9, 5))
    y = f"mo_se{feature}"
    pts = points[list(dict.fromkeys(keys + ["kind", y]))].copy()
    pts["_regime"] = point_regimes(values, pts, keys, col)
    periodic = pts["_regime"] == "periodic"
    show = (periodic & (pts["kind"] == "tail")) | (~periodic & (pts["kind"] == "section"))
    # non-periodic values without any section point still show their saved points
    has_sec = pts.loc[pts["kind"] == "section", param].unique()
    show |= ~periodic & (pts["kind"] == "tail") & ~pts[param].isin(has_sec)
    order = {name: i for i, name in enumerate(REGIME_COLORS)}
    groups = sorted(pts[show].groupby("_regime"), key=lambda kv: order.get(kv[0], len(order)))
    for name, g in groups:
        # 1-point dots (a few pixels at print resolution; "," would be one pixel, invisible on paper)
        ax.plot(g[param], g[y], ".", ms=1.0, mew=0, color=REGIME_COLORS.get(name, "k"), alpha=0.8, rasterized=True)
        ax.plot([], [], "o", ms=4, color=REGIME_COLORS.get(name, "k"), label=name)
    ax.set_xlabel(_param(param))
    ax.set_ylabel(f"$m^o_{{se,{feature + 1}}}$")
    ax.legend(fontsize=8, markerscale=1.5, title="regime", title_fontsize=8)
    ax.set_title(title if title is not None else
                 f"bifurcation diagram: $m^o_{{se,{feature + 1}}}$ against {_param(param)} "
                 "(periodic: saved points; otherwise: Poincare section)", fontsize=10)
    return fig


def lyapunov_curve(
    values: "pd.DataFrame", *, param: str = "beta_o", title: str | None = None, ax: "Axes | None" = None
) -> "Figure":
    """lambda_1, lambda_2, ... against the swept parameter (clipped below at -1), with the zero line."""
    fig, ax = axes_for(ax, figsize=(9, 3.5))
    v = values.sort_values(param)
    lams = sorted([c for c in v.columns if re.fullmatch(r"lambda_\d+", c)], key=lambda c: int(c.split("_")[1]))
    several = "direction" in v.columns and v["direction"].nunique() > 1  # name the direction only then
    for c in lams:
        for d, g in v.groupby("direction") if several else [("", v)]:
            ax.plot(g[param], g[c].clip(lower=-1.0), lw=0.8, label=f"{_lambda_label(c)} {d}".strip())
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_xlabel(_param(param))
    ax.set_ylabel("Lyapunov exponent (per step)")
    ax.legend(fontsize=7)
    ax.set_title(title if title is not None else
                 f"Lyapunov spectrum against {_param(param)} (clipped below at -1; > 0: chaotic)", fontsize=10)
    return fig


def phase_diagram(
    df: "pd.DataFrame", *, x: str, y: str, color: str = "lambda_1", title: str | None = None,
    ax: "Axes | None" = None,
) -> "Figure":
    """A 2-D sweep coloured by lambda_1 (diverging map around 0) or by regime."""
    from matplotlib.colors import ListedColormap, TwoSlopeNorm

    xs, ys = np.sort(df[x].unique()), np.sort(df[y].unique())
    grid = df.pivot_table(index=y, columns=x, values=color, aggfunc="first") if color != "regime" else None
    fig, ax = axes_for(ax, figsize=(7, 5))
    ext = [xs[0], xs[-1], ys[0], ys[-1]]
    if color == "regime":
        names = list(REGIME_COLORS)
        codes = df.assign(_c=df["regime"].map({n: i for i, n in enumerate(names)}).fillna(len(names) - 1))
        grid = codes.pivot_table(index=y, columns=x, values="_c", aggfunc="first").to_numpy()
        im = ax.imshow(grid, origin="lower", aspect="auto", extent=ext, interpolation="nearest",
                       cmap=ListedColormap([REGIME_COLORS[n] for n in names]), vmin=-0.5, vmax=len(names) - 0.5)
        cb = fig.colorbar(im, ax=ax, ticks=range(len(names)))
        cb.ax.set_yticklabels(names)
        cb.set_label("regime")
    else:
        z = np.clip(grid.to_numpy(), -0.5, None)
        lo, hi = float(np.nanmin(z)), float(np.nanmax(z))
        norm = TwoSlopeNorm(0.0, min(lo, -1e-6), max(hi, 1e-6))
        im = ax.imshow(z, origin="lower", aspect="auto", extent=ext, interpolation="nearest", cmap="RdBu_r", norm=norm)
        cb = fig.colorbar(im, ax=ax)
        cb.set_label(COLOR_LABELS.get(color, _lambda_label(color)) + (" (clipped below at -0.5)" if lo <= -0.5 else ""))
    ax.set_xlabel(_param(x))
    ax.set_ylabel(_param(y))
    what = "regime" if color == "regime" else _lambda_label(color)
    ax.set_title(title if title is not None else f"phase diagram over {_param(x)} and {_param(y)}: {what}", fontsize=10)
    return fig


def finite_size(df: "pd.DataFrame", *, ax: "Axes | None" = None) -> "Figure":
    """Error of the finite-N overlaps against the mean field vs N (log-log), with an N^-1/2 guide."""
    fig, ax = axes_for(ax, figsize=(6, 4))
    d = df.sort_values("N")
    ax.loglog(d["N"], d["rmse"], "o-", label="RMS error")
    ax.loglog(d["N"], d["max_abs_error"], "s--", label="max error")
    if "rmse_first_step" in d.columns:
        ax.loglog(d["N"], d["rmse_first_step"], "^:", label="RMS error, first step")
    ref = d["rmse"].iloc[0] * np.sqrt(d["N"].iloc[0] / d["N"])
    ax.loglog(d["N"], ref, color="gray", lw=0.8, label="$\\propto N^{-1/2}$")
    ax.set_xlabel("N (bits per token)")
    ax.set_ylabel(r"$|m_{\mathrm{finite}\ N} - m_{\mathrm{mean\ field}}|$")
    ax.set_title("finite-N overlaps against the mean field", fontsize=10)
    ax.legend(fontsize=8)
    return fig
