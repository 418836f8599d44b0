"""The screen: every selected head and intervention from one forward and a few backward passes per window.

Einstein legend: w window, i query position, j key position, h head, s (intervention, head) pair, d head dim.

Per text window, one clean forward with the gradient on: at every layer with a selected head the
registered attention function (:attr:`.attention.Plan.on_attention`) hands over the layer's post-rotary
q, k, v, its head outputs O [i, h, d] and maps A [h, i, j]. There, for each score intervention (``sym``,
``anti``) the head's softmax is recomputed exactly on the layer's clean input (the "QK-fix" of AtP*,
Kramar et al. 2024: the softmax is not linearised) giving A' and O' = A' v, so dO = O' - O is the head's exact
output change (``ablate``: O' = 0; ``mean``: O' = the head's mean clean output). A zero leaf added to O lets
one backward give G = dL/dO for every head. The change in the window's loss is then estimated to second
order after the softmax:

    delta_screen = sum_{i,d} G[i, h, d] dO[i, h, d]  +  1/2 dO^T GGN dO

First order alone misses most of the large effects: a trained model sits near a minimum of its loss, so G
is small and of either sign while every large intervention raises the loss (SmolLM2: Spearman rho 0.56-0.65
with the exact change; docs/atlas.md). The curvature is the Gauss-Newton matrix GGN of the mean next-token
loss (the Hessian without the model's own second derivatives: J^T (diag p - p p^T) J per position, J the
logits' Jacobian), never negative, estimated by Monte Carlo shared by every head: ``samples`` more backward
passes, each of the loss against next tokens drawn from the model's own predictions at every position; such a
gradient G_y has E[(G_y . dO)^2] = dO^T GGN dO / positions (the cross-position terms have mean 0), so the
term is positions / 2 times the mean of (G_y . dO)^2 over the draws (seeded by the run's seed and the window).
Its Monte Carlo noise is part of the per-window spread, so the intervals over windows carry it.

Each score intervention's ``pattern_change`` is kept beside the estimate: the total variation between A' and
A per query, 1/2 sum_j |A'_ij - A_ij|, averaged over the queries (0: the same pattern, 1: disjoint). It was
the first-order screen's reliability flag; the second-order screen ranks the heads it flagged itself, so
:func:`choose_exact` chooses by the screened change alone.

The head's own map under a score intervention depends only on its layer's clean input, so its behaviour
changes (the atlas's metrics of A' against A) are exact here, on the text windows and on the random probe's
(one forward each, no backward), for every screened head. Encoders have no loss: behaviour only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence


from .attention import AttentionCall, Plan
from .kinds import is_score, order
from .clean import _Clean, forward, metrics
from .loss import clean_logits, position_cross_entropy
from .subject import Subject

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

#: ``exact="auto"``: for each intervention, the share of the screened heads with the largest |screened change
#: in loss| confirmed exactly (SmolLM2, docs/atlas.md: 64 of 270 heads for sym, anti, ablate, holding 10, 10
#: and 9 of each one's exact top 10; the old extra flag, the 10% whose pattern changes most, added 5-14 heads
#: and at most one of a top 20)
AUTO_SHARE = 0.10
#: ... and at least this many heads (all of them where fewer are screened)
AUTO_LEAST = 4
#: the second-order term's label draws: at least this many per text window ...
SAMPLES_PER_WINDOW = 4
#: ... and at least this many over all the windows (SmolLM2, docs/atlas.md: Spearman rho with the exact change
#: 0.56-0.65 at first order, 0.85-0.89 with 8 draws in all, 0.88-0.92 with 16, 0.91-0.93 with 32)
SAMPLES_IN_ALL = 32
#: the label draws are made this many at a time (a window's draws up to it are one multinomial)
DRAW_CHUNK = 64
#: what the settings of a store record about the screen (a store made by another screen is not reused)
SCREEN_VERSION = "qk-fix, first order + sampled Gauss-Newton second order, 2"
SCREEN_DESCRIBE = ("second order after the softmax (QK-fix): sum over positions of dL/dO times (O' - O), plus one half "
                   "(O' - O)^T GGN (O' - O) with the Gauss-Newton curvature GGN estimated from gradients against next "
                   "tokens drawn from the model's own predictions; O the head's output, O' its output with its softmax "
                   "recomputed exactly under the intervention; one forward, one backward and one backward per draw per "
                   "text window; pattern_change: total variation between the intervened and the clean attention per "
                   "query, averaged over queries")
#: ... and with no label draws (``samples=0``): the first-order screen alone
SCREEN_DESCRIBE_FIRST = ("first order after the softmax (QK-fix): sum over positions of dL/dO times (O' - O), O the "
                         "head's output, O' its output with its softmax recomputed exactly under the intervention; one "
                         "forward and one backward per text window; pattern_change: total variation between the "
                         "intervened and the clean attention per query, averaged over queries")
#: ... and for an encoder (no loss: behaviour only)
SCREEN_DESCRIBE_ENCODER = ("behaviour only (an encoder has no next-token loss): each head's attention recomputed "
                           "exactly under the intervention on its layer's clean input, one forward per window; "
                           "pattern_change: total variation between the intervened and the clean attention per "
                           "query, averaged over queries")
#: why a head was measured exactly (the table's ``exact_reason``)
REASONS = {"named": "named (heads / top)", "all": "exact=all", "top": "largest screened change in loss"}


def screen_pass(subject: Subject, windows: dict[str, "torch.Tensor"], by_layer: dict[int, list[int]],
                kinds: Sequence[str], clean: _Clean, ctl: Any, tick: Callable[[float], None] | None = None,
                samples: int = 0, seed: int = 0) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(per-window rows, per-window pattern changes) of every (intervention, head) of ``by_layer``
    (layer -> heads). Rows as :func:`.exact.layer_pass` makes them (layer, window, head, intervention, measure,
    clean, value, delta): the exact behaviour rows of the score interventions on every probe, and ``loss``
    rows whose delta is the screen's estimate (decoders only). Pattern changes: layer, head, intervention,
    window, pattern_change (score interventions), output_change (every intervention: the root mean square of
    the head's output change O' - O over positions and head dims), on the text windows. ``tick(share)`` as a
    window's work goes (the shares of a window add up to 1: a text window's after its backward and each draw)."""
    import pandas as pd
    import torch

    rows: list[dict[str, Any]] = []
    patterns: list[dict[str, Any]] = []
    score = [k for k in kinds if is_score(k)]
    with_loss = subject.out_weight is not None and "text" in windows
    for probe, idx in windows.items():
        grad = with_loss and probe == "text"
        for w in range(len(idx)):
            tok = idx[w : w + 1]
            kept: dict[int, dict[str, Any]] = {}  # layer -> what the estimate needs after the backward
            leaves: dict[int, torch.Tensor] = {}

            def on_attention(layer: int, call: AttentionCall, out: "torch.Tensor", probs: "torch.Tensor",
                             tok: "torch.Tensor" = tok, kept: dict = kept, leaves: dict = leaves,
                             probe: str = probe, w: int = w, grad: bool = grad) -> "torch.Tensor | None":
                heads = by_layer.get(layer)
                if not heads:
                    return None
                with torch.no_grad():
                    pairs = [(k, h) for k in score for h in heads]
                    delta_out = None
                    if pairs:
                        hi = torch.tensor([h for _k, h in pairs], device=out.device)
                        own, new = call.heads_under(torch.zeros_like(hi), hi, [k for k, _h in pairs], layer)
                        # own [s, i, 1, d], new [s, 1, i, j]
                        got = metrics(subject, new[:, 0][None], tok)  # behaviour name -> [s]
                        ref = clean.behaviour[probe][w][layer]
                        for name, vals in got.items():
                            rows.extend(dict(layer=layer, window=w, head=h, intervention=k, measure=f"{name}_{probe}",
                                             clean=float(ref[name][h]), value=float(v),
                                             delta=float(v) - float(ref[name][h])) for (k, h), v in zip(pairs, vals))
                        if probe == "text":
                            tv = 0.5 * (new[:, 0].float() - probs[0, hi].detach().float()).abs().sum(-1).mean(-1)  # [s]
                            delta_out = own[:, :, 0] - out[0, :, hi].detach().transpose(0, 1)  # [s, i, d]
                            rms = delta_out.float().pow(2).mean((1, 2)).sqrt()  # [s]
                            patterns.extend(dict(layer=layer, head=h, intervention=k, window=w, pattern_change=float(t),
                                                 output_change=float(r))
                                            for (k, h), t, r in zip(pairs, tv.tolist(), rms.tolist()))
                    if probe == "text":  # the output interventions' change of the head's output, for the same flag
                        o = out[0].detach().float()  # [i, h, d]
                        for kind in kinds:
                            if is_score(kind):
                                continue
                            new_out = (torch.zeros_like(o) if kind == "ablate" else
                                       clean.means[layer].float().to(o.device).expand_as(o) if kind == "mean" else
                                       clean.resample_for(w)[layer].float().to(o.device))
                            rms = (new_out - o)[:, heads].pow(2).mean((0, 2)).sqrt()  # [heads]
                            patterns.extend(dict(layer=layer, head=h, intervention=kind, window=w,
                                                 pattern_change=float("nan"), output_change=float(r))
                                            for h, r in zip(heads, rms.tolist()))
                if not grad:
                    return None
                kept[layer] = dict(pairs=pairs, delta_out=delta_out, out=out[0].detach())  # out [i, h, d]
                leaf = torch.zeros_like(out, requires_grad=True)
                leaves[layer] = leaf
                return out + leaf

            ctl.plan = Plan(on_attention=on_attention)
            if grad:
                with torch.inference_mode(False), torch.enable_grad():
                    hidden = forward(subject, tok)
                    assert hidden is not None
                    target = tok[0, 1:].to(hidden.device)
                    loss = position_cross_entropy(subject, clean_logits(subject, hidden[0]), target).mean()
                    order = sorted(leaves)
                    grads = torch.autograd.grad(loss, [leaves[l] for l in order], retain_graph=samples > 0)
                    share = 1.0 / (1 + samples)  # of the window's progress: the backward, then each draw
                    if tick is not None:
                        tick(share)
                    other = {l: clean.resample_for(w).get(l) for l in order}
                    first = {l: _estimates(kept[l], g[0], by_layer[l], kinds, clean.means.get(l), other[l])
                             for l, g in zip(order, grads)}
                    # second order: 1/2 delta^T GGN delta = 1/2 positions x mean over draws of (g_y . delta)^2, the
                    # draws one at a time (each used and freed: memory bounded whatever their number)
                    squares = {l: dict.fromkeys(first[l], 0.0) for l in order}
                    for gy in _drawn_grads(subject, hidden[0], [leaves[l] for l in order], samples,
                                           seed=_window_seed(seed, w)):
                        for l, g in zip(order, gy):
                            for key, d in _estimates(kept[l], g[0], by_layer[l], kinds, clean.means.get(l),
                                                     other[l]).items():
                                squares[l][key] += d * d
                        del gy
                        if tick is not None:
                            tick(share)
                    n_pos = int(target.numel())
                base = float(clean.loss[w])
                for layer in order:
                    est = {key: v + (0.5 * n_pos * squares[layer][key] / samples if samples else 0.0)
                           for key, v in first[layer].items()}
                    rows.extend(dict(layer=layer, window=w, head=h, intervention=k, measure="loss", clean=base,
                                     value=base + v, delta=v) for (k, h), v in est.items())
                del kept, leaves, grads, hidden, loss
            else:
                with torch.no_grad():
                    forward(subject, tok)
                if tick is not None:
                    tick(1.0)
    ctl.plan = Plan()
    cols = ["layer", "window", "head", "intervention", "measure", "clean", "value", "delta"]
    return (pd.DataFrame(rows, columns=cols),
            pd.DataFrame(patterns, columns=["layer", "head", "intervention", "window", "pattern_change",
                                            "output_change"]))


def _window_seed(seed: int, window: int) -> int:
    """The seed of one text window's label draws (the run's seed and the window: the same run, the same draws)."""
    return (int(seed) * 1_000_003 + 7919 * (window + 1)) % (2**63 - 1)


def _drawn_grads(subject: Subject, hidden: "torch.Tensor", leaves: list["torch.Tensor"], samples: int,
                 seed: int) -> Iterator[tuple["torch.Tensor", ...]]:
    """``samples`` gradients (one tuple over ``leaves`` each, one at a time: the labels drawn :data:`DRAW_CHUNK`
    at a time, each gradient made when the last is used) of the window's mean next-token loss, each against
    next tokens y drawn from the model's own predictions at every position. Such a gradient g_y has
    E[(g_y . delta)^2] = delta^T GGN delta / positions for the Gauss-Newton matrix GGN of the mean loss (the
    cross-position terms have mean 0), the Monte Carlo behind the second-order term. ``hidden`` [i, e] (the
    final hidden state, with its graph; the last draw frees it).

    The output matrix's part of each backward is shared: with z = h W^T (softcapped: c tanh(z / c), slope
    s = 1 - tanh^2), dL_y/dh = ((s p) W - s_y W_y) / positions, so (s p) W is one product for every draw and
    each draw adds a row gather; only the model below h is run backward per draw."""
    import torch

    if samples <= 0:
        return
    with torch.no_grad():
        z = clean_logits(subject, hidden.detach()).float()  # [i - 1, v]
        slope = None
        if subject.softcap:
            t = torch.tanh(z / subject.softcap)
            z, slope = t * subject.softcap, 1 - t * t  # [i - 1, v]
        p = torch.softmax(z, -1)  # [i - 1, v]
        gen = torch.Generator(device=p.device).manual_seed(seed)
        w = subject.out_weight
        shared = ((p if slope is None else p * slope).to(w.dtype) @ w).float()  # [i - 1, e]
        n = z.shape[0]
        del z
    for start in range(0, samples, DRAW_CHUNK):
        with torch.no_grad():
            y = torch.multinomial(p, min(DRAW_CHUNK, samples - start), replacement=True, generator=gen).T  # [c, i - 1]
        for k in range(len(y)):
            with torch.no_grad():
                at = w[y[k]].float()  # [i - 1, e] W_y
                if slope is not None:
                    at = at * slope.gather(1, y[k][:, None])
                dh = torch.zeros_like(hidden)  # [i, e] (the last position predicts nothing)
                dh[:-1] = ((shared - at) / n).to(hidden.dtype)
            yield torch.autograd.grad(hidden, leaves, grad_outputs=dh, retain_graph=start + k < samples - 1)


def default_samples(windows: int) -> int:
    """The label draws per text window of the default screen: at least :data:`SAMPLES_PER_WINDOW`, and
    :data:`SAMPLES_IN_ALL` over the run's ``windows``."""
    return max(SAMPLES_PER_WINDOW, math.ceil(SAMPLES_IN_ALL / max(1, windows)))


def _estimates(kept: dict[str, Any], g: "torch.Tensor", heads: Sequence[int], kinds: Sequence[str],
               mean: "torch.Tensor | None", other: "torch.Tensor | None" = None) -> dict[tuple[str, int], float]:
    """(intervention, head) -> first-order change in loss from the gradient g [i, h, d] of the loss with respect
    to the layer's head outputs (the module docstring's sum of G times O' - O)."""
    g64 = g.double()
    out = kept["out"].double()  # [i, h, d]
    est: dict[tuple[str, int], float] = {}
    if kept["delta_out"] is not None:
        hi = [h for _k, h in kept["pairs"]]
        vals = (g64[:, hi].transpose(0, 1) * kept["delta_out"].double()).sum((1, 2))  # [s]
        est.update(zip(kept["pairs"], vals.tolist()))
    g_dot_o = (g64 * out).sum((0, 2))  # [h] sum_{i,d} G O
    for kind in kinds:
        if kind == "ablate":
            est.update(((kind, h), -float(g_dot_o[h])) for h in heads)
        elif kind == "mean":
            if mean is None:
                raise RuntimeError("mean ablation needs the heads' mean outputs (the clean pass)")
            g_dot_mean = (g64.sum(0) * mean.double().to(g64.device)).sum(-1)  # [h]
            est.update(((kind, h), float(g_dot_mean[h] - g_dot_o[h])) for h in heads)
        elif kind == "resample":  # O' = the head's output on another window [i, h, d]
            if other is None:
                raise RuntimeError("resample needs another window's head outputs (the clean pass)")
            g_dot_other = (g64 * other.double().to(g64.device)).sum((0, 2))  # [h]
            est.update(((kind, h), float(g_dot_other[h] - g_dot_o[h])) for h in heads)
    return {key: est[key] for key in sorted(est, key=lambda kh: (order(kh[0]), kh[1]))}


def choose_exact(screen: "pd.DataFrame", exact: "str | int", named: Sequence[tuple[int, int]] = (),
                 skip: Sequence[str] = ()) -> dict[tuple[int, int], str]:
    """(layer, head) -> why it is measured exactly (a key of :data:`REASONS`), from the summarised screen
    (one ``loss`` row per layer, head and intervention with ``delta``). ``exact``: ``"all"`` (every screened
    head), ``0`` (none), ``K`` (for each intervention, the K heads with the largest screened |delta| under it) or
    ``"auto"`` (K = :data:`AUTO_SHARE` of the screened heads, at least :data:`AUTO_LEAST`). The interventions of
    ``skip`` (the controls added by default: every exact head is measured under them anyway) choose none.
    ``named`` heads are always in."""
    heads = sorted({(int(l), int(h)) for l, h in zip(screen["layer"], screen["head"])})
    chosen: dict[tuple[int, int], str] = {}
    for pair in named:
        chosen[tuple(pair)] = "named"  # type: ignore[index]
    if exact == "all":
        for pair in heads:
            chosen.setdefault(pair, "all")
        return chosen
    if exact == 0 or not heads:
        return chosen
    k = auto_count(len(heads)) if exact == "auto" else int(exact)
    loss = screen[(screen["measure"] == "loss") & ~screen["intervention"].isin(list(skip))]
    for _kind, sub in loss.groupby("intervention", sort=False):
        size = sub.assign(a=sub["delta"].abs()).groupby(["layer", "head"])["a"].max()
        for pair in size.sort_values(ascending=False, kind="stable").index[:k]:
            chosen.setdefault((int(pair[0]), int(pair[1])), "top")
    return chosen


def auto_count(screened: int) -> int:
    """``exact="auto"``: how many heads of each intervention are measured exactly, of ``screened``."""
    return min(screened, max(AUTO_LEAST, math.ceil(AUTO_SHARE * screened)))


def agreement(table: "pd.DataFrame") -> dict[str, Any]:
    """Where both the screen and the exact pass measured a head's change in loss: per intervention, the number
    of heads, Spearman's rho between ``delta_screen`` and ``delta`` and the largest disagreement (its head,
    both values); an empty dict where no loss row has both."""
    from scipy import stats

    both = table[(table["measure"] == "loss") & table["exact"].astype(bool)].dropna(subset=["delta", "delta_screen"])
    out: dict[str, Any] = {}
    for kind, sub in both.groupby("intervention", sort=False):
        if len(sub) < 3 or sub["delta_screen"].nunique() < 2 or sub["delta"].nunique() < 2:
            rho = float("nan")  # undefined: too few heads, or one side constant
        else:
            rho = float(stats.spearmanr(sub["delta_screen"], sub["delta"]).statistic)
        gap = (sub["delta_screen"] - sub["delta"]).abs()
        worst = sub.loc[gap.idxmax()]
        out[str(kind)] = {"heads": int(len(sub)), "spearman_rho": rho,
                          "largest_disagreement": {"head": f"L{int(worst['layer'])}H{int(worst['head'])}",
                                                   "screen": float(worst["delta_screen"]),
                                                   "exact": float(worst["delta"])}}
    return out


def exact_rule(exact: "str | int", screened: int) -> str:
    """In words: which heads ``exact`` measures exactly out of ``screened``."""
    if exact == "all":
        return f"all {screened} screened heads"
    if exact == 0:
        return "none (the screen alone), but any named by heads / top"
    k = auto_count(screened) if exact == "auto" else min(int(exact), screened)
    return (f"for each intervention (not the controls added beside them), the {k} heads with the largest screened "
            "|change in loss| under it, plus any named by heads / top")
