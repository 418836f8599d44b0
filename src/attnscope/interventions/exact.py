"""The exact layer passes: every chosen (intervention, head) of one layer, one forward per window.

Einstein legend: c batch copy (one (intervention, head) each), w window, i position.

The batch is expanded at the layer to a clean copy and one copy per (intervention, head)
(:mod:`.attention`); the layers before it are not run again where the clean pass kept their outputs, and
each copy's loss change is taken against the clean copy of the same forward, so an intervention that
changes nothing has a delta of exactly 0. With bf16-delta the copies' linear layers take their differences
from the clean copy in bfloat16 (:mod:`.deltas`). On the random probe the forward stops after the layer.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .attention import CLEAN, Plan, expand_at, forward_hooks, layer_list, reuse_outputs
from .kinds import is_score
from .clean import _Clean, forward, metrics
from .deltas import LowWeights, delta_linears
from .loss import loss_terms
from .subject import Subject
from .workers import report

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

#: copies of one forward at most, the clean reference included (memory: copies x window x hidden and
#: copies x heads x window^2)
MAX_COPIES = 32


def layer_pass(subject: Subject, layer: int, heads: Sequence[int], kinds: Sequence[str],
               windows: dict[str, "torch.Tensor"], clean: _Clean, ctl: Any,
               low: LowWeights | None = None, tick: Callable[[float], None] = report,
               with_tokens: bool = False, behaviour: bool = True
               ) -> "pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]":
    """Per-window deltas of every (kind, head) of ``layer``: long table of window, head, intervention,
    measure, clean, value, delta. With ``with_tokens``, (that table, the per-position changes in loss of the
    text windows: :func:`_token_frame`, whose mean per (head, intervention, window) is that row's loss delta).

    Each forward's batch holds a clean copy first (:data:`.attention.CLEAN`): a copy's loss delta is its
    loss minus that copy's, so an intervention that changes nothing has a delta of exactly 0. With
    ``low`` the linear layers from ``layer`` on and the output matrix take the copies' differences from
    it in bfloat16 (:mod:`.deltas`). ``behaviour=False``: the loss rows alone (the screen measured the
    behaviour: :mod:`.screen`). ``tick(fraction)`` is told how far the pass is after each layer of each
    forward and each copy's loss (by default :func:`.workers.report`: the progress of :func:`intervene`)."""
    import pandas as pd

    from attnscope.heap import reused_heap

    with reused_heap():  # the copies' big activations reuse freed heap blocks (no fresh zeroed pages)
        rows, terms = _layer_rows(subject, layer, heads, kinds, windows, clean, ctl, low, tick, behaviour)  # a no-op inside intervene()'s
    df = pd.DataFrame(rows)
    df.insert(0, "layer", layer)
    return (df, _token_frame(layer, terms)) if with_tokens else df


class _Steps:
    """How far a layer pass is, in units of one layer's forward over its copies (a copy batch's loss ~
    :data:`LOSS_UNITS` of them), for ``tick(fraction)``."""

    def __init__(self, total: float, tick: Callable[[float], None]) -> None:
        self.total, self.done, self.tick = max(total, 1e-9), 0.0, tick

    def step(self, units: float = 1.0) -> None:
        self.done += units
        self.tick(min(self.done / self.total, 1.0))


#: the work of a copy batch's loss (the output matrix) in layers' forwards, for progress only
LOSS_UNITS = 6.0


def _layer_rows(subject: Subject, layer: int, heads: Sequence[int], kinds: Sequence[str],
                windows: dict[str, "torch.Tensor"], clean: _Clean, ctl: Any,
                low: LowWeights | None, tick: Callable[[float], None] = report, behaviour: bool = True
                ) -> tuple[list[dict[str, Any]], list[tuple[int, str, int, np.ndarray]]]:
    """(per-window rows, per-position loss changes as (window, intervention, head, [i - 1] float64) of each
    text window; none without an output matrix)."""
    layers = layer_list(subject.model)
    suffix = [m for block in list(layers)[layer:] for m in block.modules()] if low is not None else []
    rows: list[dict[str, Any]] = []
    terms: list[tuple[int, str, int, np.ndarray]] = []
    n = len(layers)

    def forwards(probe: str) -> int:  # forwards of one window
        copies = len([1 for k in kinds for _h in heads if probe == "text" or is_score(k)])
        return -(-copies // (MAX_COPIES - 1)) if copies else 0

    def units(probe: str) -> float:  # layers run per forward (+ the loss)
        first = layer if clean.outputs is not None else 0
        return (n - first + LOSS_UNITS) if probe == "text" else (layer - first + 1)

    steps = _Steps(sum(len(idx) * forwards(p) * units(p) for p, idx in windows.items()), tick)
    counted = list(layers)[layer if clean.outputs is not None else 0:]
    for probe, idx in windows.items():
        text = probe == "text"
        copies = [(k, h) for k in kinds for h in heads if text or is_score(k)]
        for w in range(len(idx)):
            tok = idx[w : w + 1]
            for c0 in range(0, len(copies), MAX_COPIES - 1):
                chunk = [(CLEAN, -1), *copies[c0 : c0 + MAX_COPIES - 1]]
                scored = [(k, h) for k, h in chunk if is_score(k)]
                got: dict[str, np.ndarray] = {}
                ctl.plan = Plan(layer=layer, copies=chunk, means=clean.means, stop=not text,
                                resample=clean.resample_for(w) if text else {},
                                on_maps=(lambda _l, p, tok=tok, got=got: got.update(metrics(subject, p, tok)))
                                if behaviour else None)
                kept = clean.outputs[probe][w] if clean.outputs is not None else None
                linears = clean.linears[w] if text and clean.linears is not None else None
                with expand_at(layers, layer, len(chunk)), reuse_outputs(layers, layer, kept), \
                        delta_linears(suffix, low, linears) if low is not None else nullcontext(), \
                        forward_hooks((block, lambda *_a: steps.step()) for block in counted):
                    hidden = forward(subject, tok)
                if not text:
                    steps.step()  # the intervened layer, where the forward stopped
                if text:
                    p0 = clean.distributions[w] if clean.distributions is not None else None
                    def on_copy(share: float = LOSS_UNITS / (len(chunk) - 1)) -> None:  # after each copy's loss
                        steps.step(share)

                    if subject.out_weight is None:  # an encoder: no loss
                        changes = np.full(len(chunk) - 1, np.nan)
                    else:  # a copy's change in loss is the mean of its per-position changes
                        per = loss_terms(subject, hidden, tok, low, p0, on_copy)  # [c - 1, i - 1]
                        changes = per.mean(1)
                        terms += [(w, k, h, row) for (k, h), row in zip(chunk[1:], per)]
                    base = clean.loss[w]
                    rows += [dict(window=w, head=h, intervention=k, measure="loss", clean=base,
                                  value=base + v, delta=v) for (k, h), v in zip(chunk[1:], changes)]
                for name, vals in got.items():
                    ref = clean.behaviour[probe][w][layer][name]
                    rows += [dict(window=w, head=h, intervention=k, measure=f"{name}_{probe}", clean=float(ref[h]),
                                  value=float(v), delta=float(v) - float(ref[h])) for (k, h), v in zip(scored, vals)]
    return rows, terms


def _token_frame(layer: int, terms: list[tuple[int, str, int, np.ndarray]]) -> "pd.DataFrame":
    """Per-position loss changes -> long table layer, head, intervention, window, position, delta_loss
    (float32; position j: the prediction of the window's token j from those before it, j >= 1)."""
    import pandas as pd

    if not terms:
        return pd.DataFrame({"layer": pd.Series(dtype="int64"), "head": pd.Series(dtype="int64"),
                             "intervention": pd.Series(dtype=object), "window": pd.Series(dtype="int64"),
                             "position": pd.Series(dtype="int64"), "delta_loss": pd.Series(dtype="float32")})
    sizes = [len(t[3]) for t in terms]
    return pd.DataFrame({
        "layer": np.full(sum(sizes), layer, dtype=np.int64),
        "head": np.repeat([t[2] for t in terms], sizes).astype(np.int64),
        "intervention": np.repeat(np.array([t[1] for t in terms], dtype=object), sizes),
        "window": np.repeat([t[0] for t in terms], sizes).astype(np.int64),
        "position": np.concatenate([np.arange(1, m + 1) for m in sizes]).astype(np.int64),
        "delta_loss": np.concatenate([t[3] for t in terms]).astype(np.float32)})


#: the columns of a layer's stored per-position changes in loss (:func:`_token_frame`)
TOKEN_COLUMNS = ("layer", "head", "intervention", "window", "position", "delta_loss")
