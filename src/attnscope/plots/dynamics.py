"""Figures of the mean-field dynamics (matplotlib, Agg): one function per figure, each taking tidy
tables (see :mod:`attnscope.dynamics`) and writing the figure to ``path`` (returned).

* trajectory tables: columns t, beta_o, feature, mo_se
* bifurcation value table: one row per parameter value (regime, regime_distinct, lambda_1, ...);
  points table: kind (tail | section), the parameter, mo_se0..mo_se{M-1}
* phase table: the two parameters, lambda_1.., regime; finite table: N, rmse, max_abs_error
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import pyplot, save_figure

REGIME_COLORS = {"periodic": "tab:blue", "quasi-periodic": "tab:green", "chaotic": "tab:red",
                 "hyperchaotic": "tab:purple", "unknown": "tab:gray"}




def trajectory_frame(traj: dict) -> "pd.DataFrame":  # noqa: F821
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


def timeseries(df, path, *, feature: int = 0, last: int | None = 400) -> Path:
    """m^o_se,feature against t (the last ``last`` steps), one panel per beta_o."""
    plt = pyplot()
    groups = list(_series(df, feature))
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 1.8 * len(groups) + 0.6), squeeze=False)
    for ax, (b, t, y) in zip(axes[:, 0], groups):
        sl = slice(-last, None) if last else slice(None)
        ax.plot(t[sl], y[sl], lw=0.8, marker=".", ms=2)
        ax.set_ylabel(f"$m^o_{{se,{feature + 1}}}$")
        ax.set_title(f"beta_o = {b:g}", fontsize=9)
    axes[-1, 0].set_xlabel("t")
    fig.tight_layout()
    return save_figure(fig, path)


def _grid(n: int, w: float = 3.4, h: float = 2.8):
    plt = pyplot()
    ncol = min(3, n)
    nrow = int(np.ceil(n / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(w * ncol, h * nrow), squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    return fig, axes.ravel()


def power_spectrum(df, path, *, feature: int = 0) -> Path:
    """|rfft(x - mean)|^2 / n of m^o_se,feature (log scale), one panel per beta_o."""
    groups = list(_series(df, feature))
    fig, axes = _grid(len(groups))
    for ax, (b, _, y) in zip(axes, groups):
        y = y - y.mean()
        P = np.abs(np.fft.rfft(y)) ** 2 / y.size
        f = np.fft.rfftfreq(y.size)
        ax.semilogy(f[1:], P[1:] + 1e-300, lw=0.5)
        ax.set_title(f"beta_o = {b:g}", fontsize=9)
        ax.set_xlabel("frequency (1/step)")
        ax.set_ylabel("power")
    fig.tight_layout()
    return save_figure(fig, path)


def autocorrelation(df, path, *, feature: int = 0, max_lag: int = 200) -> Path:
    """Normalised autocorrelation of m^o_se,feature up to ``max_lag`` steps, one panel per beta_o."""
    groups = list(_series(df, feature))
    fig, axes = _grid(len(groups), h=2.4)
    for ax, (b, _, y) in zip(axes, groups):
        y = y - y.mean()
        n = y.size
        f = np.fft.rfft(y, 2 * n)
        ac = np.fft.irfft(f * np.conj(f))[: min(max_lag, n - 1) + 1]
        ac = ac / ac[0] if ac[0] > 0 else ac
        ax.plot(np.arange(ac.size), ac, lw=0.7)
        ax.axhline(0, color="k", lw=0.4)
        ax.set_title(f"beta_o = {b:g}", fontsize=9)
        ax.set_xlabel("lag (steps)")
    fig.tight_layout()
    return save_figure(fig, path)


def phase_plane(df, path, *, features: tuple[int, int] = (0, 1)) -> Path:
    """(m^o_se,f1, m^o_se,f2) scatter, one panel per beta_o."""
    f1, f2 = features
    betas = sorted(df["beta_o"].unique())
    fig, axes = _grid(len(betas), h=3.1)
    for ax, b in zip(axes, betas):
        g = df[df["beta_o"] == b]
        x = g[g["feature"] == f1].sort_values("t")["mo_se"].to_numpy()
        y = g[g["feature"] == f2].sort_values("t")["mo_se"].to_numpy()
        ax.plot(x, y, ".", ms=0.8, alpha=0.6)
        ax.set_title(f"beta_o = {b:g}", fontsize=9)
        ax.set_xlabel(f"$m^o_{{se,{f1 + 1}}}$")
        ax.set_ylabel(f"$m^o_{{se,{f2 + 1}}}$")
    fig.tight_layout()
    return save_figure(fig, path)


def bifurcation(values, points, path, *, param: str = "beta_o", feature: int = 0,
                regime_column: str | None = None) -> Path:
    """The paper-like diagram: saved points for periodic values, Poincare section otherwise,
    coloured by regime (Lyapunov regime when present, else the distinct-value one)."""
    plt = pyplot()
    col = regime_column or ("regime" if "regime" in values.columns else "regime_distinct")
    keys = [param] + (["direction"] if "direction" in values.columns else [])
    regime = values.set_index(keys)[col]
    fig, ax = plt.subplots(figsize=(9, 5))
    y = f"mo_se{feature}"
    pts = points.copy()
    pts["_regime"] = [regime.get(tuple(r) if len(keys) > 1 else r[0], "unknown")
                      for r in pts[keys].itertuples(index=False)]
    periodic = pts["_regime"] == "periodic"
    show = (periodic & (pts["kind"] == "tail")) | (~periodic & (pts["kind"] == "section"))
    # non-periodic values without any section point still show their saved points
    has_sec = set(pts.loc[pts["kind"] == "section", param])
    show |= ~periodic & (pts["kind"] == "tail") & ~pts[param].isin(has_sec)
    for name, g in pts[show].groupby("_regime"):
        ax.plot(g[param], g[y], ",", color=REGIME_COLORS.get(name, "k"), alpha=0.8)
        ax.plot([], [], "o", ms=4, color=REGIME_COLORS.get(name, "k"), label=name)
    ax.set_xlabel(param)
    ax.set_ylabel(f"$m^o_{{se,{feature + 1}}}$")
    ax.legend(fontsize=8, markerscale=1.5)
    return save_figure(fig, path)


def lyapunov_curve(values, path, *, param: str = "beta_o") -> Path:
    """lambda_1, lambda_2, ... against the swept parameter, with the 1e-4 regime threshold."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.5))
    v = values.sort_values(param)
    lams = sorted([c for c in v.columns if c.startswith("lambda_")], key=lambda c: int(c.split("_")[1]))
    for c in lams:
        for d, g in v.groupby("direction") if "direction" in v.columns else [("", v)]:
            ax.plot(g[param], g[c].clip(lower=-1.0), lw=0.8, label=f"$\\lambda_{c.split('_')[1]}$ {d}".strip())
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_xlabel(param)
    ax.set_ylabel("Lyapunov exponent (per step)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def phase_diagram(df, path, *, x: str, y: str, color: str = "lambda_1") -> Path:
    """A 2-D sweep coloured by lambda_1 (diverging map around 0) or by regime."""
    plt = pyplot()
    from matplotlib.colors import ListedColormap, TwoSlopeNorm

    xs, ys = np.sort(df[x].unique()), np.sort(df[y].unique())
    grid = df.pivot_table(index=y, columns=x, values=color, aggfunc="first") if color != "regime" else None
    fig, ax = plt.subplots(figsize=(7, 5))
    ext = [xs[0], xs[-1], ys[0], ys[-1]]
    if color == "regime":
        names = list(REGIME_COLORS)
        codes = df.assign(_c=df["regime"].map({n: i for i, n in enumerate(names)}).fillna(len(names) - 1))
        grid = codes.pivot_table(index=y, columns=x, values="_c", aggfunc="first").to_numpy()
        im = ax.imshow(grid, origin="lower", aspect="auto", extent=ext, interpolation="nearest",
                       cmap=ListedColormap([REGIME_COLORS[n] for n in names]), vmin=-0.5, vmax=len(names) - 0.5)
        cb = fig.colorbar(im, ax=ax, ticks=range(len(names)))
        cb.ax.set_yticklabels(names)
    else:
        z = np.clip(grid.to_numpy(), -0.5, None)
        lo, hi = float(np.nanmin(z)), float(np.nanmax(z))
        norm = TwoSlopeNorm(0.0, min(lo, -1e-6), max(hi, 1e-6))
        im = ax.imshow(z, origin="lower", aspect="auto", extent=ext, interpolation="nearest", cmap="RdBu_r", norm=norm)
        fig.colorbar(im, ax=ax, label=color)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    return save_figure(fig, path)


def finite_size(df, path) -> Path:
    """Error of the finite-N overlaps against the mean field vs N (log-log), with an N^-1/2 guide."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    d = df.sort_values("N")
    ax.loglog(d["N"], d["rmse"], "o-", label="RMS error")
    ax.loglog(d["N"], d["max_abs_error"], "s--", label="max error")
    if "rmse_first_step" in d.columns:
        ax.loglog(d["N"], d["rmse_first_step"], "^:", label="RMS error, first step")
    ref = d["rmse"].iloc[0] * np.sqrt(d["N"].iloc[0] / d["N"])
    ax.loglog(d["N"], ref, color="gray", lw=0.8, label="$\\propto N^{-1/2}$")
    ax.set_xlabel("N (bits per token)")
    ax.set_ylabel("|m_finite - m_mean-field|")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
