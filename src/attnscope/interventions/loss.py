"""The next-token loss of a window and each intervened copy's change in it, position by position.

Einstein legend: c batch copy, i position, v vocabulary, e hidden.

The loss is the mean next-token cross-entropy of a window through the model's output matrix (its LM head,
or the input embeddings when tied; Gemma's final logit softcap applied). :func:`loss_terms` gives every
copy's change at each position against the clean copy 0 of the same forward, in full precision
(:func:`shifted_cross_entropy`: one pass over each copy's logits) or from the logits' bf16 differences
(:mod:`.deltas`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from .deltas import LossDeltas, LowWeights, delta_logits
from .subject import Subject

if TYPE_CHECKING:  # pragma: no cover
    import torch


def cross_entropy(subject: Subject, logits: "torch.Tensor", target: "torch.Tensor") -> float:
    """Mean cross-entropy of logits [i, v] (Gemma's final softcap applied) against target [i]."""
    return float(position_cross_entropy(subject, logits, target).mean())


def position_cross_entropy(subject: Subject, logits: "torch.Tensor", target: "torch.Tensor") -> "torch.Tensor":
    """Cross-entropy at each position [i] (float32) of logits [i, v] (Gemma's final softcap applied) against target [i]."""
    import torch

    if subject.softcap:
        logits = torch.tanh(logits / subject.softcap) * subject.softcap
    return torch.nn.functional.cross_entropy(logits.float(), target, reduction="none")


def clean_logits(subject: Subject, hidden: "torch.Tensor") -> "torch.Tensor":
    """Logits [i - 1, v] of one copy's hidden state [i, e] at every position but the last (which predicts nothing)."""
    assert subject.out_weight is not None
    return hidden[:-1] @ subject.out_weight.T


def loss_terms(subject: Subject, hidden: "torch.Tensor | None", idx: "torch.Tensor",
                low: LowWeights | None = None, p0: "torch.Tensor | None" = None,
                tick: Callable[[], None] = lambda: None) -> np.ndarray:
    """Each copy's next-token cross-entropy minus copy 0's at each position: hidden [c, i, e], idx [1, i] ->
    [c - 1, i - 1] float64 (column j: the prediction of token j + 1; a copy's loss change is the row's mean).
    With ``low``, computed from each copy's logits' difference from copy 0's (:class:`.deltas.LossDeltas`,
    weighed by ``p0`` [i - 1, v], the window's clean distribution when it is at hand; with a final softcap,
    their logits as copy 0's plus the difference, :func:`.deltas.delta_logits`). Needs an output matrix."""
    if hidden is None:
        raise RuntimeError("a text window's forward stopped before the output")
    if subject.out_weight is None:
        raise RuntimeError("no output matrix: an encoder has no next-token loss")
    target = idx[0, 1:].to(hidden.device)
    out = np.empty((hidden.shape[0] - 1, hidden.shape[1] - 1))
    out_low = low.of(subject.out_weight) if low is not None else None
    if out_low is not None and not subject.softcap:
        if p0 is None:
            p0 = LossDeltas.distribution(clean_logits(subject, hidden[0]))
        deltas = LossDeltas(p0, target, subject.out_weight, out_low)
        for ci in range(1, hidden.shape[0]):  # one copy's [i, v] logits at a time
            out[ci - 1] = deltas.per_position(hidden[ci, :-1] - hidden[0, :-1], hidden[0, :-1]).double().cpu().numpy()
            tick()
        return out
    first = clean_logits(subject, hidden[0])  # [i, v] copy 0's logits, in the model's dtype
    if out_low is None and not subject.softcap:  # full precision: one pass over each copy's logits
        shift = first.float().amax(-1)  # [i] copy 0's largest logit at each position
        base = shifted_cross_entropy(subject, hidden[0], target, shift, first)
        for ci in range(1, hidden.shape[0]):
            out[ci - 1] = (shifted_cross_entropy(subject, hidden[ci], target, shift) - base).cpu().numpy()
            tick()
        return out
    base = position_cross_entropy(subject, first, target).double()  # [i - 1]
    for ci in range(1, hidden.shape[0]):
        logits = (delta_logits(hidden[ci, :-1] - hidden[0, :-1], first, out_low) if out_low is not None
                  else clean_logits(subject, hidden[ci]))
        out[ci - 1] = (position_cross_entropy(subject, logits, target).double() - base).cpu().numpy()
        tick()
    return out


def shifted_cross_entropy(subject: Subject, hidden: "torch.Tensor", target: "torch.Tensor",
                           shift: "torch.Tensor", logits: "torch.Tensor | None" = None) -> "torch.Tensor":
    """One copy's next-token cross-entropy at each position [i - 1] (float64) from its hidden state [i, e] (``logits`` [i - 1, v]: its
    logits when already at hand; they are overwritten): log sum_v e^(z_v - shift) + shift - z_target per
    position, ``shift`` [i - 1] being the clean copy's largest logit there. The same number as
    :func:`cross_entropy` to float32 rounding, in one pass over the logits (exp in place, then the sum)
    instead of log-softmax's three and its second [i, v] array (log-softmax was ~3% of a layer pass's CPU
    time on SmolLM2, torch.profiler). Where a
    copy's logits leave exp's range (a logit > 80 nats above the clean maximum, or every one far below
    it), the plain route."""
    import torch

    z = (clean_logits(subject, hidden) if logits is None else logits).float()  # [i - 1, v]
    z_target = z.gather(1, target[:, None])[:, 0]  # [i - 1]
    total = z.sub_(shift[:, None]).exp_().sum(-1)  # [i - 1] sum_v e^(z_v - shift)
    if not bool((torch.isfinite(total) & (total > 1e-30)).all()):
        return position_cross_entropy(subject, clean_logits(subject, hidden), target).double()
    # the two large terms subtracted first (as log-softmax does), the rest in float64: no float32 sum of ~3-nat terms
    return (shift - z_target).double() + total.log_().double()
