"""The clean pass: one forward per window with no intervention, keeping what the other passes start from.

Einstein legend: w window, i position, h head, d head dim, v vocabulary.

Per probe window: every head's behaviour (the atlas's metrics of its map), per text window the clean loss,
the heads' mean outputs over the text positions (for ``mean``), every layer's output where it fits
:data:`PREFIX_BUDGET` (an intervention forward then skips the layers before its own), and for bf16-delta
the clean next-token distributions and linear outputs within their budgets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from attnscope.errors import UnsupportedError

from .attention import Plan, StopForward, keep_outputs, layer_list
from .deltas import LossDeltas, out_features, record_clean_outputs
from .loss import clean_logits, cross_entropy
from .subject import Subject

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: bytes of clean layer outputs kept so that an intervention forward skips the layers before its layer
#: (windows x layers x positions x hidden); past it, those layers are computed again in every forward
PREFIX_BUDGET = 512 << 20
#: bytes of clean next-token distributions kept for bf16-delta's loss changes (windows x positions x
#: vocabulary x 4); past it, each layer's forwards make them again from their clean copy
DISTRIBUTION_BUDGET = 512 << 20
#: bytes of the linear layers' clean outputs kept for bf16-delta (text windows x positions x the layers'
#: output widths x 4), so that no forward computes its clean copy's matrix products again
LINEAR_BUDGET = 1 << 30


def forward(subject: Subject, idx: "torch.Tensor") -> "torch.Tensor | None":
    """last_hidden_state [c, i, e] of one window idx [1, i] (None when the plan stopped the forward)."""
    try:
        res = subject.model(input_ids=idx.to(next(subject.model.parameters()).device), use_cache=False)
    except StopForward:
        return None
    return res[0] if isinstance(res, tuple) else res.last_hidden_state


def metrics(subject: Subject, probs: "torch.Tensor", idx: "torch.Tensor") -> dict[str, np.ndarray]:
    """The atlas's behaviour metrics of maps [1, n, i, j] -> metric -> [n]."""
    from attnscope.atlas.build import BEHAVIOUR_METRICS
    from attnscope.heads.metrics import window_metrics
    from attnscope.heads.probes import BEHAVIOUR

    m = subject.maps
    vals = window_metrics(probs, m.causal, token_ids=idx, cls_id=m.cls_id, sep_id=m.sep_id)
    return {name: vals[BEHAVIOUR.get(name, name)][0].float().cpu().numpy() for name in BEHAVIOUR_METRICS}


@dataclass
class _Clean:
    """The clean pass: per probe, window -> layer -> metric -> [h]; text loss per window; mean head outputs."""

    behaviour: dict[str, list[dict[int, dict[str, np.ndarray]]]]
    loss: np.ndarray  # [w]
    means: dict[int, "torch.Tensor"]  # layer -> [h, d]
    outputs: dict[str, list[list[Any]]] | None = None  # probe -> window -> layer -> its output (None: over budget)
    distributions: list["torch.Tensor"] | None = None  # text window -> clean p0 [i - 1, v] (None: not kept)
    linears: list[dict[int, Any]] | None = None  # text window -> id(linear) -> its clean output (None: not kept)
    head_outputs: list[dict[int, "torch.Tensor"]] | None = None  # text window -> layer -> [i, h, d] (resample)

    def resample_for(self, window: int) -> dict[int, "torch.Tensor"]:
        """layer -> [i, h, d]: the head outputs ``resample`` gives text window ``window``: the next window's
        (the last window takes the first's); empty where they were not kept."""
        if not self.head_outputs:
            return {}
        return self.head_outputs[(window + 1) % len(self.head_outputs)]


def clean_pass(subject: Subject, windows: dict[str, "torch.Tensor"], ctl: Any,
               for_deltas: bool = False, tick: Callable[[], None] | None = None, keep_heads: bool = False) -> _Clean:
    """Every head's clean behaviour per probe window, the clean loss per text window, the heads' mean outputs
    over the text windows' positions; with ``for_deltas`` (bf16-delta), each text window's clean
    next-token distribution (what every copy's logit change is weighed by) and its linear layers' clean
    outputs (copy 0's in :func:`.deltas.delta_linears`), each kind where it fits its budget
    (:data:`DISTRIBUTION_BUDGET`, :data:`LINEAR_BUDGET`). ``tick()`` is called after each window. With
    ``keep_heads`` (``resample``), every text window's head outputs per layer."""

    behaviour: dict[str, list[dict[int, dict[str, np.ndarray]]]] = {}
    sums: dict[int, torch.Tensor] = {}
    count = [0]
    losses = []
    head_outputs: list[dict[int, Any]] = []
    layers = layer_list(subject.model)
    hidden = subject.model.get_input_embeddings().weight.shape[1]
    size = sum(idx.numel() for idx in windows.values()) * hidden * len(layers) * 4
    outputs: dict[str, list[list[Any]]] | None = {} if size <= PREFIX_BUDGET else None
    text = windows.get("text")
    vocab = subject.out_weight.shape[0] if subject.out_weight is not None else 0
    keep = (for_deltas and vocab > 0 and not subject.softcap and text is not None
            and text.shape[0] * (text.shape[1] - 1) * vocab * 4 <= DISTRIBUTION_BUDGET)
    kept: list[torch.Tensor] | None = [] if keep else None
    width = sum(out_features(m) for m in layers.modules())
    linears: list[dict[int, Any]] | None = (
        [] if for_deltas and text is not None and text.numel() * width * 4 <= LINEAR_BUDGET else None)
    for probe, idx in windows.items():
        behaviour[probe] = []
        if outputs is not None:
            outputs[probe] = []
        for w in range(len(idx)):
            tok = idx[w : w + 1]
            per_layer: dict[int, dict[str, np.ndarray]] = {}
            if outputs is not None:
                outputs[probe].append([None] * len(layers))

            heads_here: dict[int, Any] = {}

            def on_output(layer: int, out: "torch.Tensor", heads_here: dict = heads_here) -> None:  # out [1, i, h, d]
                total = out[0].double().sum(0)
                sums[layer] = total if layer not in sums else sums[layer] + total
                if keep_heads:
                    heads_here[layer] = out[0].clone()

            ctl.plan = Plan(on_maps=lambda layer, p, tok=tok, per_layer=per_layer: per_layer.__setitem__(
                layer, metrics(subject, p, tok)), on_output=on_output if probe == "text" else None)
            record: dict[int, Any] | None = {} if linears is not None and probe == "text" else None
            with keep_outputs(layers, outputs[probe][w] if outputs is not None else None), \
                    record_clean_outputs(layers.modules(), record):
                hidden_out = forward(subject, tok)
            if linears is not None and record is not None:
                linears.append(record)
            if len(per_layer) != subject.n_layers:  # e.g. transformers < 5, whose BERT picks its attention class itself
                import transformers

                raise UnsupportedError(
                    f"{subject.name}: only {len(per_layer)} of {subject.n_layers} layers call transformers' attention "
                    f"interface here ({type(subject.model).__name__}, transformers {transformers.__version__}; "
                    f"BERT-style encoders call it from transformers 5.0); their heads cannot be intervened on")
            behaviour[probe].append(per_layer)
            if probe == "text":
                if keep_heads:
                    head_outputs.append(heads_here)
                losses.append(_clean_loss(subject, hidden_out, tok, kept))
                count[0] += tok.shape[1]
            if tick is not None:
                tick()
    means = {layer: (s / max(count[0], 1)).float() for layer, s in sums.items()}
    return _Clean(behaviour=behaviour, loss=np.asarray(losses, dtype=float), means=means, outputs=outputs,
                  distributions=kept, linears=linears, head_outputs=head_outputs if keep_heads else None)


def _clean_loss(subject: Subject, hidden: "torch.Tensor | None", idx: "torch.Tensor",
                kept: list["torch.Tensor"] | None) -> float:
    """A clean window's loss (hidden [1, i, e]); its distribution appended to ``kept`` (when a list)."""
    if hidden is None:
        raise RuntimeError("a text window's forward stopped before the output")
    if subject.out_weight is None:
        return float("nan")
    logits = clean_logits(subject, hidden[0])  # [i - 1, v]
    if kept is not None:
        kept.append(LossDeltas.distribution(logits))
    return cross_entropy(subject, logits, idx[0, 1:].to(hidden.device))
