"""Every public figure function, drawn on plausible data at the size it is saved: the convention
(``ax=`` for one panel, ``fig=`` for several) and what a reader needs (a title, labelled colour bars,
tick labels that do not run together, signed quantities on a diverging map centred at 0)."""

from __future__ import annotations

import inspect
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from attnscope.plots import base, new_figure
from attnscope.plots import dynamics as dp
from attnscope.plots import geometry as gp
from attnscope.plots import heads as hp
from attnscope.plots import survey as sp
from attnscope.plots import training as tp

DIVERGING = {"RdBu_r", "RdBu", "coolwarm", "bwr", "seismic", "PuOr", "PiYG"}


def _heads(n_layers=6, n_heads=12, seed=0):
    rng = np.random.default_rng(seed)
    n = n_layers * n_heads
    return pd.DataFrame({
        "model": "org/m", "stack": "encoder", "layer": np.repeat(np.arange(n_layers), n_heads),
        "head": np.tile(np.arange(n_heads), n_layers), "entropy": rng.uniform(0.5, 5, n),
        "sparsity": rng.uniform(0, 1, n), "distance": rng.uniform(1, 150, n), "confidence": rng.uniform(0, 1, n),
        "sink_first": rng.uniform(0, 0.4, n), "prev_mass": rng.uniform(0, 0.8, n), "lookback": rng.uniform(-40, 60, n)})


def _scores(n_layers=6, n_heads=12, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for layer in range(n_layers):
        rows += [dict(model="org/m", family="bert", stack="encoder", level="head", layer=layer, head=h,
                      symmetry=rng.uniform(-1, 1), directionality=rng.uniform(-1, 1)) for h in range(n_heads)]
        rows.append(dict(model="org/m", family="bert", stack="encoder", level="layer", layer=layer, head=np.nan,
                         symmetry=rng.uniform(-1, 1), directionality=rng.uniform(-1, 1)))
    return pd.DataFrame(rows)


def _traj():
    t = np.arange(300)
    return pd.DataFrame([dict(t=i, beta_o=b, feature=f, mo_se=np.sin(0.1 * i * (f + 1) * b)) for b in (1.1, 1.3)
                         for f in (0, 1) for i in t])


def _sweep():
    vals = np.linspace(1.0, 1.5, 60)
    values = pd.DataFrame({"beta_o": vals, "regime": np.where(vals < 1.25, "periodic", "chaotic"),
                           "lambda_1": np.where(vals < 1.25, -0.1, 0.05), "lambda_2": -0.3})
    rep = np.repeat(vals, 20)
    points = pd.DataFrame({"beta_o": rep, "kind": np.where(rep < 1.25, "tail", "section"),
                           "mo_se0": np.sin(np.arange(rep.size))})
    return values, points


def _phase():
    X, Y = np.meshgrid(np.linspace(1, 1.5, 12), np.linspace(0, 1, 8))
    df = pd.DataFrame({"beta_o": X.ravel(), "gamma": Y.ravel(), "lambda_1": np.sin(3 * X.ravel()) * Y.ravel() - 0.2})
    return df.assign(regime=np.where(df["lambda_1"] > 0, "chaotic", "periodic"))


def _summary():
    recs = []
    for model, stack, mod, typ, params in (("gpt2", "decoder", "text", "decoder", 124e6),
                                           ("bert", "encoder", "text", "encoder", 110e6),
                                           ("w", "encoder", "audio", "encoder-decoder", 39e6),
                                           ("w", "decoder", "audio", "encoder-decoder", 39e6),
                                           ("w", "cross", "audio", "encoder-decoder", 39e6)):
        rec = dict(model=model, stack=stack, modality=mod, type=typ, params=params)
        for col in ("symmetry", "directionality"):
            rec.update({f"{col}_median": 0.2, f"{col}_q1": 0.1, f"{col}_q3": 0.3})
        recs.append(rec)
    return pd.DataFrame(recs)


def _curves(metrics, objectives=("clm", "mlm")):
    steps = np.arange(0, 50, 10)
    return pd.DataFrame([dict(group=g, objective=o, metric=m, step=s, mean=5 - s / 20 + k, ci_low=4.8 - s / 20 + k,
                              ci_high=5.2 - s / 20 + k, n=2) for o in objectives
                         for k, g in enumerate(("default", "symmetric")) for m in metrics for s in steps])


def _cluster_labels():
    df = pd.concat([_heads().assign(model="org/a"), _heads().assign(model="org/b")])  # one panel per model
    return df[["model", "layer", "head"]].assign(method="ward", k=3, cluster=np.arange(len(df)) % 3, best=True)


def _mds(n_layers=6, n_heads=12, seed=1):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"layer": np.repeat(np.arange(n_layers), n_heads), "head": np.tile(np.arange(n_heads), n_layers),
                         "x": rng.normal(0, 0.2, n_layers * n_heads), "y": rng.normal(0, 0.2, n_layers * n_heads)})


SAMPLES = {
    "geometry.plot_layer_curves": lambda **kw: gp.plot_layer_curves(_scores(), **kw),
    "geometry.plot_head_heatmaps": lambda **kw: gp.plot_head_heatmaps(_scores(), **kw),
    "geometry.plot_wqk_block": lambda **kw: gp.plot_wqk_block(np.random.default_rng(0).standard_normal((50, 50)), **kw),
    "heads.metric_heatmaps": lambda **kw: hp.metric_heatmaps(_heads(), **kw),
    "heads.metric_scatter": lambda **kw: hp.metric_scatter(_heads(), **kw),
    "heads.example_maps": lambda **kw: hp.example_maps(
        {l: np.random.default_rng(l).dirichlet(np.ones(96), size=(12, 96)) for l in (0, 3, 5)}, **kw),
    "heads.silhouette_curve": lambda **kw: hp.silhouette_curve(pd.DataFrame(
        {"method": ["ward"] * 4 + ["kmeans"] * 4, "k": [2, 3, 4, 5] * 2,
         "silhouette": [0.5, 0.4, 0.3, 0.35, 0.55, 0.45, 0.3, 0.2]}), **kw),
    "heads.cluster_map": lambda **kw: hp.cluster_map(_cluster_labels(), **kw),
    "heads.js_mds": lambda **kw: hp.js_mds(_mds(), **kw),
    "dynamics.timeseries": lambda **kw: dp.timeseries(_traj(), **kw),
    "dynamics.power_spectrum": lambda **kw: dp.power_spectrum(_traj(), **kw),
    "dynamics.autocorrelation": lambda **kw: dp.autocorrelation(_traj(), **kw),
    "dynamics.phase_plane": lambda **kw: dp.phase_plane(_traj(), **kw),
    "dynamics.bifurcation": lambda **kw: dp.bifurcation(*_sweep(), **kw),
    "dynamics.lyapunov_curve": lambda **kw: dp.lyapunov_curve(_sweep()[0], **kw),
    "dynamics.phase_diagram": lambda **kw: dp.phase_diagram(_phase(), x="beta_o", y="gamma", **kw),
    "dynamics.finite_size": lambda **kw: dp.finite_size(pd.DataFrame(
        {"N": [1, 10, 100, 1000], "rmse": [0.5, 0.16, 0.05, 0.016], "max_abs_error": [1, 0.4, 0.12, 0.04]}), **kw),
    "survey.plot_scores_vs_params": lambda **kw: sp.plot_scores_vs_params(_summary(), **kw),
    "survey.plot_encoder_decoder": lambda **kw: sp.plot_encoder_decoder(_summary(), **kw),
    "training.loss_curves": lambda **kw: tp.loss_curves(pd.DataFrame(
        {"run": ["a"] * 3 + ["b"] * 3, "objective": ["clm"] * 3 + ["mlm"] * 3, "init": "default",
         "step": [0, 10, 20] * 2, "loss": [5.0, 4.0, 3.0] * 2, "eval_loss": [np.nan, 4.2, 3.1] * 2}), **kw),
    "training.score_medians": lambda **kw: tp.score_medians(pd.DataFrame(
        {"run": "a", "init": "default", "stack": "decoder", "step": [0, 100], "symmetry_median": [0.1, 0.3],
         "symmetry_q1": [0.0, 0.2], "symmetry_q3": [0.2, 0.4], "directionality_median": [0.0, -0.2],
         "directionality_q1": [-0.1, -0.3], "directionality_q3": [0.1, -0.1]}), **kw),
    "training.score_layers": lambda **kw: tp.score_layers(pd.DataFrame(
        {"run": "a", "stack": "decoder", "level": "layer", "step": [0, 100] * 2, "layer": [0, 0, 1, 1],
         "symmetry": [0.1, 0.2, 0.3, 0.4], "directionality": [0.0, 0.1, 0.2, 0.3]}), **kw),
    "training.loss_bands": lambda **kw: tp.loss_bands(_curves(("loss", "eval_loss")), **kw),
    "training.loss_differences": lambda **kw: tp.loss_differences(_curves(("dloss", "deval_loss")), **kw),
}


def _figure_functions() -> dict[str, inspect.Signature]:
    import importlib

    out = {}
    for area in ("geometry", "survey", "training", "heads", "dynamics"):
        mod = importlib.import_module(f"attnscope.plots.{area}")
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            returns = str(fn.__annotations__.get("return")).strip("'\"")
            if fn.__module__ == mod.__name__ and not name.startswith("_") and returns in ("Figure", "Figure | None"):
                out[f"{area}.{name}"] = inspect.signature(fn)
    return out


def _panels(fig) -> list:
    """The axes that hold data: not colour bars, not switched-off spare panels."""
    return [ax for ax in fig.axes if not hasattr(ax, "_colorbar") and ax.axison]


def _colorbars(fig) -> list:
    return [ax._colorbar for ax in fig.axes if hasattr(ax, "_colorbar")]


def test_every_figure_function_is_drawn_here():
    assert set(_figure_functions()) == set(SAMPLES)  # a new figure function needs a sample below


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_one_panel_takes_ax_several_take_fig(name):
    sig = _figure_functions()[name]
    fig = SAMPLES[name]()
    n = len(_panels(fig))
    assert n >= 1
    wanted = "ax" if n == 1 else "fig"
    assert wanted in sig.parameters, f"{name} draws {n} panel(s), so it takes {wanted}="
    if wanted == "ax":
        own = new_figure()
        ax = own.add_subplot()
        assert SAMPLES[name](ax=ax) is own and _panels(own)[0] is ax
    else:
        own = new_figure()
        assert SAMPLES[name](fig=own) is own


def test_several_panels_refuse_ax():
    """A multi-panel figure that also takes ``ax=`` (for the one-panel case) refuses it in one line naming it."""
    both = [n for n, sig in _figure_functions().items() if {"ax", "fig"} <= set(sig.parameters)]
    assert {"training.loss_bands", "training.loss_differences"} <= set(both)
    for name in both:
        assert len(_panels(SAMPLES[name]())) > 1, f"{name}: its sample should draw several panels"
        with pytest.raises(ValueError, match="ax="):
            SAMPLES[name](ax=new_figure().add_subplot())


@pytest.mark.parametrize("fn, metrics", [(tp.loss_bands, ("loss", "eval_loss")),
                                         (tp.loss_differences, ("dloss", "deval_loss"))])
def test_band_figures_one_objective_on_ax_several_on_fig(fn, metrics):
    own = new_figure()
    ax = own.add_subplot()
    assert fn(_curves(metrics, ("clm",)), ax=ax) is own and _panels(own) == [ax]
    assert len([ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]) == 4  # 2 groups x train, held-out
    two = new_figure()
    assert fn(_curves(metrics), fig=two) is two and [a.get_title()[:3] for a in _panels(two)] == ["clm", "mlm"]
    for a in _panels(two):  # the same group names under both objectives: each drawn on its own objective's panel
        assert len([ln for ln in a.get_lines() if not ln.get_label().startswith("_")]) == 4
    with pytest.raises(ValueError, match="both"):
        fn(_curves(metrics, ("clm",)), fig=new_figure(), ax=new_figure().add_subplot())


def _overlaps(boxes, pad=0.5):
    return [(a, b) for a, b in combinations(boxes, 2)
            if min(a.x1, b.x1) - max(a.x0, b.x0) > pad and min(a.y1, b.y1) - max(a.y0, b.y0) > pad]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_reader_can_read_it(name):
    fig = SAMPLES[name]()
    renderer = base.laid_out(fig)
    titles = [fig.get_suptitle()] + [ax.get_title() for ax in _panels(fig)]
    assert any(t.strip() for t in titles), f"{name}: no title"
    for cb in _colorbars(fig):
        assert (cb.ax.get_ylabel() or cb.ax.get_xlabel()).strip(), f"{name}: a colour bar without a label"
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [t.get_window_extent(renderer) for t in axis.get_ticklabels()
                     if t.get_visible() and t.get_text().strip()]
            assert not _overlaps(boxes), f"{name}: tick labels run together ({[t.get_text() for t in axis.get_ticklabels()]})"
    for ax in _panels(fig):
        text = " ".join([ax.get_xlabel(), ax.get_ylabel(), ax.get_title()]).replace("\\lambda_", "")
        assert "lambda_" not in text, f"{name}: lambda_ as plain text, not mathtext"
    for cb in _colorbars(fig):
        assert "lambda_" not in cb.ax.get_ylabel().replace("\\lambda_", "")


def test_signed_metrics_get_a_diverging_map_centred_at_zero():
    fig = hp.metric_heatmaps(_heads(), metrics=("lookback", "entropy"))
    look, ent = [ax.get_images()[0] for ax in _panels(fig)]
    assert look.get_cmap().name in DIVERGING and look.norm.vmin == -look.norm.vmax
    assert abs(look.norm.vmax) >= np.abs(_heads()["lookback"]).max() - 1e-12  # nothing clipped
    assert ent.get_cmap().name not in DIVERGING
    only_positive = _heads().assign(lookback=lambda d: d["lookback"].abs() + 1)  # still signed by nature
    img = _panels(hp.metric_heatmaps(only_positive, metrics=("lookback",)))[0].get_images()[0]
    assert img.get_cmap().name in DIVERGING and img.norm.vmin == -img.norm.vmax


@pytest.mark.parametrize("values, signed, diverging", [
    ([-1.0, 2.0], None, True), ([0.5, 2.0], None, False), ([0.5, 2.0], True, True), ([-1.0, np.nan, 3.0], None, True),
    ([0.0, 0.0], True, True)])
def test_color_scale(values, signed, diverging):
    kw = base.color_scale(values, signed=signed)
    assert (kw["cmap"] in DIVERGING) == diverging
    if diverging:
        assert kw["vmin"] == -kw["vmax"] and kw["vmax"] >= np.nanmax(np.abs(values))


def test_geometry_d_is_diverging_and_centred():
    fig = gp.plot_head_heatmaps(_scores())
    for ax in _panels(fig):
        img = ax.get_images()[0]
        assert img.get_cmap().name in DIVERGING and img.norm.vmin == -img.norm.vmax


def test_head_maps_say_they_are_a_crop_and_carry_ticks():
    fig = SAMPLES["heads.example_maps"]()
    assert "96 x 96" in fig.get_supxlabel()
    assert all(len(ax.get_xticks()) >= 2 for ax in _panels(fig))


def test_mds_names_never_overlap_but_some_are_shown():
    fig = hp.js_mds(_mds(seed=3))
    renderer = base.laid_out(fig)
    texts = fig.axes[0].texts
    assert 5 <= len(texts) <= 72
    assert not _overlaps([t.get_window_extent(renderer) for t in texts], pad=0.0)


def test_twelve_heads_on_a_narrow_panel_do_not_print_1011():
    fig = new_figure(figsize=(2.0, 2.0))
    ax = fig.add_subplot()
    ax.imshow(np.zeros((3, 12)), aspect="auto")
    base.integer_ticks(ax.xaxis, 12)
    renderer = base.laid_out(fig)
    labels = [t for t in ax.xaxis.get_ticklabels() if t.get_text()]
    assert len(labels) >= 2 and not _overlaps([t.get_window_extent(renderer) for t in labels])
    assert all(float(t.get_text()) == int(float(t.get_text())) for t in labels)


def test_bifurcation_points_are_visible_at_print_size():
    fig = dp.bifurcation(*_sweep())
    dots = [ln for ln in _panels(fig)[0].lines if ln.get_xdata().size]
    assert dots and all(ln.get_marker() != "," and ln.get_markersize() * 300 / 72 >= 2 for ln in dots)  # >= 2 px at 300 dpi


def test_phase_plane_ticks_of_a_small_orbit_do_not_run_together():
    """A torus of amplitude 0.065 (beta_o = 1.255 of the paper): six-character tick labels on a 3-column grid."""
    t = np.arange(2000)
    traj = pd.DataFrame([dict(t=i, beta_o=b, feature=f, mo_se=0.065 * np.sin(0.39 * i + f)) for b in (1.255, 1.27, 1.4)
                         for f in (0, 1) for i in t])
    fig = dp.phase_plane(pd.concat([traj, traj.assign(beta_o=traj["beta_o"] + 1)]))
    renderer = base.laid_out(fig)
    for ax in _panels(fig):
        boxes = [t.get_window_extent(renderer) for t in ax.xaxis.get_ticklabels() if t.get_visible() and t.get_text()]
        assert len(boxes) >= 2 and not _overlaps(boxes, pad=0.0), [t.get_text() for t in ax.xaxis.get_ticklabels()]
