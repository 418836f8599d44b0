"""Interventions on every head of a model: the change in loss and in each behaviour score, per window.

Einstein legend: c batch copy (one (intervention, head) each), w window, i position, v vocabulary.

:func:`intervene` runs, on the text windows (loss and behaviour) and the random probe's windows
(behaviour only), one clean forward per window (every head's clean behaviour, the clean loss and, for
bf16-delta, the clean next-token distribution within :data:`DISTRIBUTION_BUDGET`, the heads' mean outputs
for ``mean``, every layer's output kept within :data:`PREFIX_BUDGET`) and then, layer by layer, one
forward per window in which the batch is expanded at that layer to a clean copy and one copy per
(intervention, head) (:mod:`.attention`): the layers before it are not run again (their kept
outputs), the copies share nothing after it, and each copy's loss change is taken against the clean
copy of the same forward. With ``precision="bf16-delta"`` the copies' linear layers and logits are the
clean copy's plus their differences' products in bfloat16 (:mod:`.deltas`). On the random probe the
forward stops after the intervened layer (its behaviour is all that is measured there).

* loss: mean next-token cross-entropy of the window (the model's output matrix: its LM head, or the
  input embeddings when they are tied; Gemma's final logit softcap applied); encoders have none (NaN).
  Each copy's change is the mean of its per-position changes (:func:`_loss_terms`), which are kept too:
  :attr:`InterventionResult.token_effects`, one row per (head, intervention, text window, position).
* behaviour: the intervened head's own ``<metric>_<probe>`` (:data:`attnscope.atlas.build.BEHAVIOUR_METRICS`,
  as the atlas measures them) under ``sym`` / ``anti``; an output intervention leaves the head's own map as
  it is, so it has no behaviour rows.

Each (model, layer, head, intervention, measure) row holds the per-window deltas' mean, its 95% t
interval over the n windows and a one-sample t-test p value (:mod:`.summary`); the Benjamini-Hochberg
adjustment is made across heads once every layer is in. Layers are stored as they finish
(:class:`attnscope.runs.store.ResultsStore`, key = layer, and beside it the layer's per-position rows) so an
interrupted run resumes. After the clean
pass, the layer passes may be shared by forked one-thread worker processes (:mod:`.workers`).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attnscope.errors import ArgumentTypeError, InputError, UnsupportedError, check_type

from .attention import (CLEAN, KINDS, SCORE_KINDS, Plan, StopForward, expand_at, forward_hooks, keep_outputs,
                        layer_list, patched, reuse_outputs)
from .deltas import (DESCRIBE, LossDeltas, LowWeights, delta_linears, delta_logits, out_features,
                     record_clean_outputs, resolve_precision)
from .workers import can_fork, report, run_layers, worker_count

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

    from attnscope.heads.maps import MapModel

#: the interventions run when none are named (``mean`` also needs its clean pass: same cost)
DEFAULT_KINDS = ("sym", "anti", "ablate")
#: copies of one forward at most, the clean reference included (memory: copies x window x hidden and
#: copies x heads x window^2)
MAX_COPIES = 32
#: bytes of clean layer outputs kept so that an intervention forward skips the layers before its layer
#: (windows x layers x positions x hidden); past it, those layers are computed again in every forward
PREFIX_BUDGET = 512 << 20
#: bytes of clean next-token distributions kept for bf16-delta's loss changes (windows x positions x
#: vocabulary x 4); past it, each layer's forwards make them again from their clean copy
DISTRIBUTION_BUDGET = 512 << 20
#: bytes of the linear layers' clean outputs kept for bf16-delta (text windows x positions x the layers'
#: output widths x 4), so that no forward computes its clean copy's matrix products again
LINEAR_BUDGET = 1 << 30


@dataclass
class Subject:
    """A loaded transformers model ready for interventions: the module to run, its output matrix, windows."""

    model: Any  # the module whose forward gives last_hidden_state (the base model)
    out_weight: "torch.Tensor | None"  # [v, e] output matrix, None for an encoder
    softcap: float | None  # final logit softcap (Gemma 2)
    maps: "MapModel"  # tokenizer, causal flag, special ids, windows
    name: str

    @property
    def n_layers(self) -> int:
        return len(layer_list(self.model))


@dataclass
class InterventionResult:
    """What :func:`intervene` returns: one row per (layer, head, intervention, measure), and how it was made."""

    table: "pd.DataFrame"
    info: dict[str, Any] = field(default_factory=dict)
    #: per intervened head, intervention, text window and position: the change in loss there (model, layer,
    #: head, intervention, window, position, token, delta_loss; float32 nats; position j >= 1 is the
    #: prediction of token j, ``token`` its text). Per (head, intervention, window) the mean of delta_loss is
    #: that window's loss delta, whose mean over windows is the table's. None for an encoder (no loss).
    token_effects: "pd.DataFrame | None" = None


def check_kinds(kinds: str | Sequence[str]) -> tuple[str, ...]:
    """``"sym,anti"`` or a sequence of names -> validated tuple in :data:`KINDS` order."""
    if isinstance(kinds, str):
        kinds = [k.strip() for k in kinds.split(",") if k.strip()]
    check_type(kinds, (list, tuple), "interventions", "a list of sym, anti, ablate, mean")
    bad = [str(k) for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise InputError(f"interventions must be among {', '.join(KINDS)}, not {', '.join(bad) or 'nothing'}",
                         params="interventions")
    return tuple(k for k in KINDS if k in kinds)


def parse_heads(spec: str) -> list[tuple[int, int]]:
    """``"3.1,10.4"`` -> [(3, 1), (10, 4)] (layer.head, both counted from 0; ASCII digits only: ``²`` is
    a digit to Python's ``isdigit`` but no number)."""
    import re

    out = []
    for part in (p.strip() for p in spec.split(",")):
        if not re.fullmatch(r"[0-9]+\.[0-9]+", part):
            raise InputError(f"heads must be LAYER.HEAD pairs such as 3.1,10.4, not {part!r}", params="heads")
        layer, _, head = part.partition(".")
        out.append((int(layer), int(head)))
    return out


def check_head_pairs(heads: Any) -> list[tuple[int, int]] | None:
    """``heads`` as given to :func:`intervene` -> a list of (layer, head) int pairs, duplicates dropped
    (None stays None). Each pair holds two whole numbers >= 0 (Python or numpy integers; a bool, a float
    such as 1.7 or NaN, a string is refused, never truncated), checked before any model is loaded."""
    if heads is None:
        return None
    if isinstance(heads, str):
        return check_head_pairs(parse_heads(heads))
    check_type(heads, (list, tuple), "heads", "a list of (layer, head) pairs such as [(3, 1), (10, 4)]")
    out: list[tuple[int, int]] = []
    for pair in heads:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise InputError(f"heads must be (layer, head) pairs, not {pair!r:.40}", params="heads")
        for value in pair:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise ArgumentTypeError(f"heads must hold whole numbers (layer, head), not {type(value).__name__} "
                                        f"{value!r:.30} in {tuple(pair)!r:.60}", params="heads")
            if value < 0:
                raise InputError(f"heads must hold numbers >= 0 (counted from 0), not {value} in {tuple(pair)!r}",
                                 params="heads")
        if (int(pair[0]), int(pair[1])) not in out:
            out.append((int(pair[0]), int(pair[1])))
    if not out:
        raise InputError("heads is empty", params="heads")
    return out


def head_grid(source: Any) -> tuple[int, int] | None:
    """(layers, heads per layer) of a GGUF file or HF directory / hub id read from its config and tensor
    names only (no weights loaded), or None where that cannot be told cheaply (a loaded model: ask it;
    a model with several self-attention stacks; anything unreadable, which the load reports)."""
    if isinstance(source, Subject):
        return source.n_layers, source.maps.n_heads
    if not isinstance(source, (str, os.PathLike)):
        return None
    try:
        from attnscope.families import get_family
        from attnscope.sources import open_source
        from attnscope.zoo.registry import resolve_spec

        src = open_source(str(resolve_spec(source)))
        stacks = [s for s in get_family(src.config).stacks(src.config, src) if s.stack != "cross"]
    except Exception:  # noqa: BLE001 - the load says what is wrong, in its own words
        return None
    return (stacks[0].n_layers, stacks[0].n_heads) if len(stacks) == 1 else None


def check_heads_in(heads: list[tuple[int, int]] | None, grid: tuple[int, int] | None) -> None:
    """Every (layer, head) of ``heads`` within ``grid`` = (layers, heads per layer); nothing to do for None."""
    if heads is None or grid is None:
        return
    n_layers, n_heads = grid
    for layer, head in heads:
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            # (no word "heads" in the text: the CLI shows the parameter's name as its flag)
            raise InputError(f"head {layer}.{head} is not in the model (layers 0-{n_layers - 1}, each with head "
                             f"0-{n_heads - 1})", params="heads")


def check_source(source: Any, tokenizer: Any = None) -> None:
    """``source`` is something :func:`open_subject` can open: a path / hub id (without ``tokenizer=``), an
    opened :class:`Subject`, or a loaded transformers model (with ``tokenizer=``); a one-line error otherwise."""
    if isinstance(source, Subject):
        if tokenizer is not None:
            raise InputError("tokenizer= is for a model loaded in memory; an opened subject has its own",
                             params="tokenizer")
        return
    if isinstance(source, (str, os.PathLike)):
        if tokenizer is not None:
            raise InputError(f"{source}: tokenizer= is for a model loaded in memory; a directory or file brings "
                             "its own", params="tokenizer")
        return
    if not (hasattr(source, "config") and callable(source)):
        raise ArgumentTypeError("source must be a GGUF file, an HF directory / hub id, an opened subject "
                                "(open_subject) or a loaded transformers model with tokenizer=, not "
                                f"{type(source).__name__} {source!r:.40}", params="source")
    if tokenizer is None:
        raise InputError(f"a loaded {type(source).__name__} needs tokenizer= (its transformers tokenizer)",
                         params="tokenizer")


# --------------------------------------------------------------------------- loading


def _is_decoder_config(config: Any) -> bool:
    archs = getattr(config, "architectures", None) or []
    return bool(getattr(config, "is_decoder", False)) or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)


def _out_weight(full: Any, base: Any) -> "torch.Tensor | None":
    """The [v, e] output matrix: the LM head of ``full`` or, for a base model with tied embeddings, its input embeddings."""
    head = full.get_output_embeddings() if hasattr(full, "get_output_embeddings") else None
    if head is not None and hasattr(head, "weight"):
        return head.weight
    cfg = base.config
    tied = getattr(cfg, "tie_word_embeddings", False) or getattr(getattr(cfg, "text_config", None), "tie_word_embeddings", False)
    return base.get_input_embeddings().weight if tied else None


def _softcap(model: Any) -> float | None:
    cfg = model.config
    return getattr(cfg, "final_logit_softcapping", None) or getattr(getattr(cfg, "text_config", None),
                                                                     "final_logit_softcapping", None)


def open_subject(source: Any, tokenizer: Any = None, device: str = "cpu", name: str | None = None) -> Subject:
    """A :class:`Subject` from a GGUF file, an HF directory / hub id, or a loaded transformers model with its
    tokenizer (a Subject is returned as it is). Load once, use twice: ``attnscope.atlas(subject.maps)`` runs the
    atlas on the same loaded model and ``intervene(subject, atlas=...)`` the interventions."""
    from attnscope.heads.maps import MapModel

    label: str | None
    check_source(source, tokenizer)
    if isinstance(source, Subject):
        return source
    if isinstance(source, (str, os.PathLike)):
        full, tok, label = _load(source, device)
    else:
        full, tok, label = source, tokenizer, name
    base = getattr(full, "base_model", full)
    maps = MapModel.from_hf(full, tok, name=name or label)
    if isinstance(source, (str, os.PathLike)):
        maps.source = str(source)  # the atlas reads the geometry from the same file (attnscope.atlas(subject.maps))
    out_weight = _out_weight(full, base) if maps.causal else None
    return Subject(model=base, out_weight=out_weight, softcap=_softcap(full), maps=maps, name=maps.name)


def _load(source: str | os.PathLike, device: str) -> tuple[Any, Any, str]:
    """(model, tokenizer, name): a GGUF file through :mod:`attnscope.heads.load`; an HF directory / hub id
    with its LM head for a decoder (the base model for an encoder)."""
    from pathlib import Path

    from attnscope.heads.load import check_weights, open_runnable
    from attnscope.naming import model_label
    from attnscope.sources.base import check_local_path
    from attnscope.sources.gguf import GGUFSource
    from attnscope.zoo.registry import resolve_spec

    spec = str(Path(str(resolve_spec(source))).expanduser())  # a zoo id: its installed copy
    check_local_path(spec)  # unreadable, a FIFO or device, a missing x.gguf: one line, now
    if GGUFSource.detect(spec):
        from attnscope.heads.load import GGUF_FIX, _load_gguf, missing_gguf_runtime

        if missing_gguf_runtime():
            raise UnsupportedError(f"{source}: running a GGUF file needs {', '.join(missing_gguf_runtime())}: {GGUF_FIX}")
        check_weights(lambda: GGUFSource.open(spec), spec)  # the header and config checked before transformers reads it
        model, tok = _load_gguf(Path(spec), lm_head=True)
        return model.to(device), tok, model_label(str(source))  # the one model id (attnscope.naming)
    open_runnable(spec, device)  # CTranslate2 / ONNX: one-line refusal
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from attnscope.heads.maps import _hub_dir
    from attnscope.training.tokenizers import load_tokenizer

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # its "Loading weights" tqdm bar: attnscope shows the load
    path = Path(spec)
    local = path if path.is_dir() else _hub_dir(str(source))
    from attnscope.sources.hf import HFDirectorySource

    check_weights(lambda: HFDirectorySource.open(str(local)), str(source))  # config against weights, before the load
    try:
        config = AutoConfig.from_pretrained(str(local), trust_remote_code=False)
    except Exception as exc:
        raise InputError(f"{source}: cannot read the model config ({exc.__class__.__name__})") from None
    cls = AutoModelForCausalLM if _is_decoder_config(config) else AutoModel
    try:
        model = cls.from_pretrained(str(local), attn_implementation="eager", trust_remote_code=False)  # type: ignore[arg-type]
    except Exception as exc:
        raise UnsupportedError(f"{source}: cannot load the model ({exc.__class__.__name__}: {str(exc)[:160]})") from None
    return model.to(device).eval(), load_tokenizer(local), model_label(str(source))


# --------------------------------------------------------------------------- the passes


def _cross_entropy(subject: Subject, logits: "torch.Tensor", target: "torch.Tensor") -> float:
    """Mean cross-entropy of logits [i, v] (Gemma's final softcap applied) against target [i]."""
    return float(_position_cross_entropy(subject, logits, target).mean())


def _position_cross_entropy(subject: Subject, logits: "torch.Tensor", target: "torch.Tensor") -> "torch.Tensor":
    """Cross-entropy at each position [i] (float32) of logits [i, v] (Gemma's final softcap applied) against target [i]."""
    import torch

    if subject.softcap:
        logits = torch.tanh(logits / subject.softcap) * subject.softcap
    return torch.nn.functional.cross_entropy(logits.float(), target, reduction="none")


def _clean_logits(subject: Subject, hidden: "torch.Tensor") -> "torch.Tensor":
    """Logits [i - 1, v] of one copy's hidden state [i, e] at every position but the last (which predicts nothing)."""
    assert subject.out_weight is not None
    return hidden[:-1] @ subject.out_weight.T


def _loss_terms(subject: Subject, hidden: "torch.Tensor | None", idx: "torch.Tensor",
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
            p0 = LossDeltas.distribution(_clean_logits(subject, hidden[0]))
        deltas = LossDeltas(p0, target, subject.out_weight, out_low)
        for ci in range(1, hidden.shape[0]):  # one copy's [i, v] logits at a time
            out[ci - 1] = deltas.per_position(hidden[ci, :-1] - hidden[0, :-1], hidden[0, :-1]).double().cpu().numpy()
            tick()
        return out
    first = _clean_logits(subject, hidden[0])  # [i, v] copy 0's logits, in the model's dtype
    if out_low is None and not subject.softcap:  # full precision: one pass over each copy's logits
        shift = first.float().amax(-1)  # [i] copy 0's largest logit at each position
        base = _shifted_cross_entropy(subject, hidden[0], target, shift, first)
        for ci in range(1, hidden.shape[0]):
            out[ci - 1] = (_shifted_cross_entropy(subject, hidden[ci], target, shift) - base).cpu().numpy()
            tick()
        return out
    base = _position_cross_entropy(subject, first, target).double()  # [i - 1]
    for ci in range(1, hidden.shape[0]):
        logits = (delta_logits(hidden[ci, :-1] - hidden[0, :-1], first, out_low) if out_low is not None
                  else _clean_logits(subject, hidden[ci]))
        out[ci - 1] = (_position_cross_entropy(subject, logits, target).double() - base).cpu().numpy()
        tick()
    return out


def _shifted_cross_entropy(subject: Subject, hidden: "torch.Tensor", target: "torch.Tensor",
                           shift: "torch.Tensor", logits: "torch.Tensor | None" = None) -> "torch.Tensor":
    """One copy's next-token cross-entropy at each position [i - 1] (float64) from its hidden state [i, e] (``logits`` [i - 1, v]: its
    logits when already at hand; they are overwritten): log sum_v e^(z_v - shift) + shift - z_target per
    position, ``shift`` [i - 1] being the clean copy's largest logit there. The same number as
    :func:`_cross_entropy` to float32 rounding, in one pass over the logits (exp in place, then the sum)
    instead of log-softmax's three and its second [i, v] array (log-softmax was ~3% of a layer pass's CPU
    time on SmolLM2, torch.profiler). Where a
    copy's logits leave exp's range (a logit > 80 nats above the clean maximum, or every one far below
    it), the plain route."""
    import torch

    z = (_clean_logits(subject, hidden) if logits is None else logits).float()  # [i - 1, v]
    z_target = z.gather(1, target[:, None])[:, 0]  # [i - 1]
    total = z.sub_(shift[:, None]).exp_().sum(-1)  # [i - 1] sum_v e^(z_v - shift)
    if not bool((torch.isfinite(total) & (total > 1e-30)).all()):
        return _position_cross_entropy(subject, _clean_logits(subject, hidden), target).double()
    # the two large terms subtracted first (as log-softmax does), the rest in float64: no float32 sum of ~3-nat terms
    return (shift - z_target).double() + total.log_().double()


def _forward(subject: Subject, idx: "torch.Tensor") -> "torch.Tensor | None":
    """last_hidden_state [c, i, e] of one window idx [1, i] (None when the plan stopped the forward)."""
    try:
        res = subject.model(input_ids=idx.to(next(subject.model.parameters()).device), use_cache=False)
    except StopForward:
        return None
    return res[0] if isinstance(res, tuple) else res.last_hidden_state


def _metrics(subject: Subject, probs: "torch.Tensor", idx: "torch.Tensor") -> dict[str, np.ndarray]:
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


def clean_pass(subject: Subject, windows: dict[str, "torch.Tensor"], ctl: Any,
               for_deltas: bool = False, tick: Callable[[], None] | None = None) -> _Clean:
    """Every head's clean behaviour per probe window, the clean loss per text window, the heads' mean outputs
    over the text windows' positions; with ``for_deltas`` (bf16-delta), each text window's clean
    next-token distribution (what every copy's logit change is weighed by) and its linear layers' clean
    outputs (copy 0's in :func:`.deltas.delta_linears`), each kind where it fits its budget
    (:data:`DISTRIBUTION_BUDGET`, :data:`LINEAR_BUDGET`). ``tick()`` is called after each window."""
    import torch

    behaviour: dict[str, list[dict[int, dict[str, np.ndarray]]]] = {}
    sums: dict[int, torch.Tensor] = {}
    count = [0]
    losses = []
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

            def on_output(layer: int, out: "torch.Tensor") -> None:  # out [1, i, h, d]
                total = out[0].double().sum(0)
                sums[layer] = total if layer not in sums else sums[layer] + total

            ctl.plan = Plan(on_maps=lambda layer, p, tok=tok, per_layer=per_layer: per_layer.__setitem__(
                layer, _metrics(subject, p, tok)), on_output=on_output if probe == "text" else None)
            record: dict[int, Any] | None = {} if linears is not None and probe == "text" else None
            with keep_outputs(layers, outputs[probe][w] if outputs is not None else None), \
                    record_clean_outputs(layers.modules(), record):
                hidden_out = _forward(subject, tok)
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
                losses.append(_clean_loss(subject, hidden_out, tok, kept))
                count[0] += tok.shape[1]
            if tick is not None:
                tick()
    means = {layer: (s / max(count[0], 1)).float() for layer, s in sums.items()}
    return _Clean(behaviour=behaviour, loss=np.asarray(losses, dtype=float), means=means, outputs=outputs,
                  distributions=kept, linears=linears)


def _clean_loss(subject: Subject, hidden: "torch.Tensor | None", idx: "torch.Tensor",
                kept: list["torch.Tensor"] | None) -> float:
    """A clean window's loss (hidden [1, i, e]); its distribution appended to ``kept`` (when a list)."""
    if hidden is None:
        raise RuntimeError("a text window's forward stopped before the output")
    if subject.out_weight is None:
        return float("nan")
    logits = _clean_logits(subject, hidden[0])  # [i - 1, v]
    if kept is not None:
        kept.append(LossDeltas.distribution(logits))
    return _cross_entropy(subject, logits, idx[0, 1:].to(hidden.device))


def layer_pass(subject: Subject, layer: int, heads: Sequence[int], kinds: Sequence[str],
               windows: dict[str, "torch.Tensor"], clean: _Clean, ctl: Any,
               low: LowWeights | None = None, tick: Callable[[float], None] = report,
               with_tokens: bool = False) -> "pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]":
    """Per-window deltas of every (kind, head) of ``layer``: long table of window, head, intervention,
    measure, clean, value, delta. With ``with_tokens``, (that table, the per-position changes in loss of the
    text windows: :func:`_token_frame`, whose mean per (head, intervention, window) is that row's loss delta).

    Each forward's batch holds a clean copy first (:data:`.attention.CLEAN`): a copy's loss delta is its
    loss minus that copy's, so an intervention that changes nothing has a delta of exactly 0. With
    ``low`` the linear layers from ``layer`` on and the output matrix take the copies' differences from
    it in bfloat16 (:mod:`.deltas`). ``tick(fraction)`` is told how far the pass is after each layer of each
    forward and each copy's loss (by default :func:`.workers.report`: the progress of :func:`intervene`)."""
    import pandas as pd

    from attnscope.heap import reused_heap

    with reused_heap():  # the copies' big activations reuse freed heap blocks (no fresh zeroed pages)
        rows, terms = _layer_rows(subject, layer, heads, kinds, windows, clean, ctl, low, tick)  # a no-op inside intervene()'s
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
                low: LowWeights | None, tick: Callable[[float], None] = report
                ) -> tuple[list[dict[str, Any]], list[tuple[int, str, int, np.ndarray]]]:
    """(per-window rows, per-position loss changes as (window, intervention, head, [i - 1] float64) of each
    text window; none without an output matrix)."""
    layers = layer_list(subject.model)
    suffix = [m for block in list(layers)[layer:] for m in block.modules()] if low is not None else []
    rows: list[dict[str, Any]] = []
    terms: list[tuple[int, str, int, np.ndarray]] = []
    n = len(layers)

    def forwards(probe: str) -> int:  # forwards of one window
        copies = len([1 for k in kinds for _h in heads if probe == "text" or k in SCORE_KINDS])
        return -(-copies // (MAX_COPIES - 1)) if copies else 0

    def units(probe: str) -> float:  # layers run per forward (+ the loss)
        first = layer if clean.outputs is not None else 0
        return (n - first + LOSS_UNITS) if probe == "text" else (layer - first + 1)

    steps = _Steps(sum(len(idx) * forwards(p) * units(p) for p, idx in windows.items()), tick)
    counted = list(layers)[layer if clean.outputs is not None else 0:]
    for probe, idx in windows.items():
        text = probe == "text"
        copies = [(k, h) for k in kinds for h in heads if text or k in SCORE_KINDS]
        for w in range(len(idx)):
            tok = idx[w : w + 1]
            for c0 in range(0, len(copies), MAX_COPIES - 1):
                chunk = [(CLEAN, -1), *copies[c0 : c0 + MAX_COPIES - 1]]
                scored = [(k, h) for k, h in chunk if k in SCORE_KINDS]
                got: dict[str, np.ndarray] = {}
                ctl.plan = Plan(layer=layer, copies=chunk, means=clean.means, stop=not text,
                                on_maps=lambda _l, p, tok=tok, got=got: got.update(_metrics(subject, p, tok)))
                kept = clean.outputs[probe][w] if clean.outputs is not None else None
                linears = clean.linears[w] if text and clean.linears is not None else None
                with expand_at(layers, layer, len(chunk)), reuse_outputs(layers, layer, kept), \
                        delta_linears(suffix, low, linears) if low is not None else nullcontext(), \
                        forward_hooks((block, lambda *_a: steps.step()) for block in counted):
                    hidden = _forward(subject, tok)
                if not text:
                    steps.step()  # the intervened layer, where the forward stopped
                if text:
                    p0 = clean.distributions[w] if clean.distributions is not None else None
                    def on_copy(share: float = LOSS_UNITS / (len(chunk) - 1)) -> None:  # after each copy's loss
                        steps.step(share)

                    if subject.out_weight is None:  # an encoder: no loss
                        changes = np.full(len(chunk) - 1, np.nan)
                    else:  # a copy's change in loss is the mean of its per-position changes
                        per = _loss_terms(subject, hidden, tok, low, p0, on_copy)  # [c - 1, i - 1]
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


# --------------------------------------------------------------------------- the whole run


def check_intervene_options(kinds: Any, windows: int, random_windows: int, seed: int) -> tuple[str, ...]:
    """Types and ranges before any model is loaded (a ValueError/TypeError naming the parameter)."""
    for param, value, least in (("windows", windows, 1), ("random_windows", random_windows, 0), ("seed", seed, 0)):
        check_type(value, (int, np.integer), param, "an integer")
        if value < least:
            raise InputError(f"{param} must be at least {least}, not {value}", params=param)
    return check_kinds(kinds)


def _atlas_table(atlas: Any) -> "pd.DataFrame | None":
    """The per-head table of ``atlas=`` (an :class:`attnscope.atlas.AtlasResult` or its table), or None."""
    import pandas as pd

    if atlas is None:
        return None
    table = getattr(atlas, "table", atlas)
    if not isinstance(table, pd.DataFrame) or not {"model", "layer", "head"} <= set(table.columns):
        raise ArgumentTypeError("atlas must be the result of attnscope.atlas() (or its table), not "
                                f"{type(atlas).__name__}", params="atlas")
    return table


def intervene(
    source: Any,
    *,
    tokenizer: Any = None,
    interventions: str | Sequence[str] = DEFAULT_KINDS,
    heads: Sequence[tuple[int, int]] | None = None,
    data: str = "builtin",
    windows: int = 4,
    length: int | None = None,
    random_windows: int = 4,
    random_length: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    precision: str = "auto",
    store: str | os.PathLike | None = None,
    name: str | None = None,
    progress: bool = False,
    workers: int | None = None,
    atlas: Any = None,
    top: "str | Sequence[tuple[int, str]] | None" = None,
) -> InterventionResult:
    """Intervene on every head of ``source`` (or the (layer, head) pairs ``heads``) with each of
    ``interventions`` (sym, anti, ablate, mean): the change in loss on ``windows`` text windows of ``data``
    (``length`` tokens, default 256 or the model's maximum) and in the head's behaviour on them and on
    ``random_windows`` repeated-random-token windows (T = ``random_length``, default 127; 0: no random probe).

    ``source``: a GGUF file, an HF directory / hub id, or a loaded transformers model with ``tokenizer=``
    (a ``...ForCausalLM`` for the loss). ``precision``: ``full`` (every product in the model's dtype),
    ``bf16-delta`` (the intervened copies' linear layers as the clean copy's output plus their difference's
    product in bfloat16: ~1.7x faster on a CPU with AVX512-BF16, rounding ~2^-8 of each effect, an effect of
    0 stays 0; :mod:`.deltas`) or ``auto`` (bf16-delta where the device has native bfloat16 products).
    ``store``: a directory keeping each finished layer (resumable; reused only with the same settings).
    ``workers``: processes sharing the layers (:mod:`.workers`; None: one per CPU thread of this process on
    Linux with 2 to 4 threads and the model on the CPU, else 1: this process alone).
    ``atlas``: the :func:`attnscope.atlas` result of the same model (or its table): each row is joined to its
    head's atlas row (geometry, behaviour, cluster: the table ``attnscope atlas --interventions`` writes), and
    ``top`` (``"4:induction_random,4:-directionality"``: the K highest on a column, ``-COLUMN`` the K lowest)
    chooses the heads from it. ``source`` may be a :func:`open_subject` result, so that one loaded model serves
    both (``attnscope.atlas(subject.maps)``). ``heads``, ``top``, ``device`` and the other options are checked
    before the model loads (head ranges from the config where it can be read alone).
    Returns one row per (layer, head, intervention, measure): mean delta over windows, 95% t interval,
    p value, ``p_bh`` (Benjamini-Hochberg across the heads of one intervention and measure), ``sd`` of the
    per-window deltas and ``detectable_change`` (:func:`.summary.detectable_change`: the smallest true change
    these windows detect with 80% power). ``.token_effects``: the change in loss at each text position of
    every intervened head (:attr:`InterventionResult.token_effects`; None for an encoder).
    """
    import pandas as pd
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.heads.probes import default_length, default_random_length, random_windows as make_random
    from attnscope.progress import phase

    from attnscope.devices import check_device

    from .summary import DETECTABLE, add_bh, join_atlas, parse_top, summarise, top_heads

    check_source(source, tokenizer)
    kinds = check_intervene_options(interventions, windows, random_windows, seed)
    if type(device).__name__ == "device":  # a torch.device: its name
        device = str(device)
    check_type(device, str, "device", "a torch device name such as cpu or cuda")
    check_device(device)
    heads = check_head_pairs(heads)
    atlas_table = _atlas_table(atlas)
    if top is not None:
        if heads is not None:
            raise InputError("give heads or top, not both", params=("heads", "top"))
        if atlas_table is None:
            raise InputError("top chooses heads from an atlas: give atlas= too (attnscope.atlas(...))",
                             params=("top", "atlas"))
        heads = top_heads(atlas_table, parse_top(top))
    check_heads_in(heads, head_grid(source))  # from the config alone, before the weights load
    if workers is not None:
        check_type(workers, (int, np.integer), "workers", "an integer or None")
        if workers < 1:
            raise InputError(f"workers must be at least 1, not {workers}", params="workers")
        if workers > 1 and not can_fork(device):
            raise InputError(f"workers={workers} needs Linux and the model on the CPU (forked processes); "
                             "use workers=1 here", params="workers")
    precision = resolve_precision(precision, device)
    if name is None and atlas_table is not None and atlas_table["model"].nunique() == 1:
        name = str(atlas_table["model"].iloc[0])  # the atlas's name for the model: the join's key
    with phase(f"interventions: loading {source if isinstance(source, (str, os.PathLike)) else 'the model'}",
               enabled=progress and not isinstance(source, Subject)):
        subject = open_subject(source, tokenizer=tokenizer, device=device, name=name)
    if isinstance(source, Subject) and name is not None:
        subject.maps.name = subject.name = name
    mm = subject.maps
    n_layers, n_heads = subject.n_layers, mm.n_heads
    chosen = _check_heads(heads, n_layers, n_heads)
    text = make_windows(mm, data, windows, default_length(mm) if length is None else length)
    wins = {"text": text}
    if random_windows:
        half = default_random_length(mm) if random_length is None else random_length
        wins["random"] = make_random(mm, random_windows, half, seed=seed)
    settings = {"model": subject.name, "interventions": list(kinds), "data": str(data), "windows": windows,
                "length": int(text.shape[1]), "random_windows": random_windows,
                "random_length": int(wins["random"].shape[1]) if random_windows else None, "seed": seed,
                "precision": precision}
    results = None
    if store is not None:
        from attnscope.runs.store import ResultsStore

        results = ResultsStore(store, settings=settings, columns=["layer", "head", "intervention", "measure"])
    by_layer: dict[int, list[int]] = {}
    for layer, head in chosen:
        by_layer.setdefault(layer, []).append(head)
    from attnscope.heap import reused_heap

    with torch.inference_mode(), patched(subject.model) as ctl, reused_heap(), ExitStack() as stack:
        pending = [l for l in sorted(by_layer) if results is None or not results.is_done(_key(l, by_layer[l]))]
        low = (LowWeights().prepare(layer_list(subject.model).modules(), subject.out_weight)  # before any forward
               if precision == "bf16-delta" and pending else None)
        clean = None  # none: every layer stored
        if pending:
            with phase(f"interventions {mm.name}: clean pass", enabled=progress,
                       total=sum(len(idx) for idx in wins.values()), unit="windows") as bar:
                clean = clean_pass(subject, wins, ctl, for_deltas=low is not None, tick=bar.advance)
        count = worker_count(torch.get_num_threads(), len(pending), device) if workers is None else workers
        keep = results
        if keep is None and count > 1:  # the workers' results come back through a store of this run's own
            from attnscope.runs.store import ResultsStore

            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="attnscope-interventions-"))
            keep = ResultsStore(tmp, settings=settings, columns=["layer", "head", "intervention", "measure"])
        # the per-position changes in loss beside each layer's rows, in the same directory (written first:
        # a layer stored as done has them, unless an older attnscope stored it)
        keep_tokens = None if keep is None else ResultsStore(keep.root, settings=settings, columns=TOKEN_COLUMNS)
        here: dict[int, pd.DataFrame] = {}
        here_tokens: dict[int, pd.DataFrame] = {}

        def work(layer: int) -> None:
            assert clean is not None  # a pending layer had its clean pass
            df, tokens = layer_pass(subject, layer, by_layer[layer], kinds, wins, clean, ctl, low, with_tokens=True)
            df = summarise(df)
            if keep is not None and keep_tokens is not None:
                keep_tokens.write(_token_key(layer, by_layer[layer]), tokens)
                keep.write(_key(layer, by_layer[layer]), df)
            else:
                here[layer], here_tokens[layer] = df, tokens

        with phase(f"interventions {mm.name}", enabled=progress, total=len(by_layer), unit="layers",
                   start=len(by_layer) - len(pending)) as bar:  # the stored layers count as done
            done = [float(len(by_layer) - len(pending))]  # layers finished
            running: dict[int, float] = {}  # layer -> how far it is

            def show(layer: int, fraction: float | None) -> None:
                if fraction is None:
                    running.pop(layer, None)
                    done[0] += 1
                else:
                    running[layer] = fraction
                bar.update(completed=round(done[0] + sum(running.values()), 2))

            bar.update(completed=done[0])
            run_layers(pending, work, count, on_done=lambda l: show(l, None), on_report=show,
                       cost=lambda l: len(by_layer[l]) * (n_layers - l + 6))  # its suffix; the loss ~6 layers
        frames = [here[l] if l in here else keep.read(_key(l, by_layer[l]))  # type: ignore[union-attr]
                  for l in sorted(by_layer)]
        token_frames, unstored = [], []
        for l in sorted(by_layer) if subject.out_weight is not None else ():
            if l in here_tokens:
                token_frames.append(here_tokens[l])
            elif keep_tokens is not None and keep_tokens.is_done(_token_key(l, by_layer[l])):
                token_frames.append(keep_tokens.read(_token_key(l, by_layer[l])))
            else:
                unstored.append(l)
    if unstored:
        import warnings

        warnings.warn(f"interventions: the store {store} holds layer(s) {', '.join(map(str, unstored))} without their "
                      "per-token changes in loss (stored by an older attnscope); the token effects lack those layers",
                      UserWarning, stacklevel=2)
    table = add_bh(pd.concat(frames, ignore_index=True))
    table.insert(0, "model", subject.name)
    table.insert(1, "stack", "decoder" if mm.causal else "encoder")
    info = {**settings, "n_layers": n_layers, "n_heads": n_heads, "heads": len(chosen),
            "loss": "mean next-token cross-entropy (nats) per window" if subject.out_weight is not None else
            "none (no output matrix: an encoder)",
            "products": f"{precision}: {DESCRIBE[precision]}",
            "interval": "mean over windows, 95% t interval (n windows); p: one-sample t-test; p_bh: "
                        "Benjamini-Hochberg across heads per intervention and measure",
            "detectable_change": DETECTABLE}
    if atlas_table is not None:
        table = join_atlas(table, atlas_table)
    effects = (_token_effects(subject, text, token_frames) if subject.out_weight is not None else None)
    return InterventionResult(table=table, info=info, token_effects=effects)


#: the columns of a layer's stored per-position changes in loss (:func:`_token_frame`)
TOKEN_COLUMNS = ("layer", "head", "intervention", "window", "position", "delta_loss")


def _token_effects(subject: Subject, text: "torch.Tensor", frames: list["pd.DataFrame"]) -> "pd.DataFrame":
    """The layers' per-position changes in loss -> :attr:`InterventionResult.token_effects` (model first, the
    token's text beside its position; text [w, i] the text windows' ids)."""
    import pandas as pd

    from attnscope.heads.tokens import token_texts

    df = (pd.concat(frames, ignore_index=True) if frames else _token_frame(0, []))
    texts = np.empty(tuple(text.shape), dtype=object)  # [w, i]
    for w, row in enumerate(text.tolist()):
        texts[w, :] = token_texts(subject.maps.tokenizer, row)
    df.insert(0, "model", subject.name)
    df.insert(len(df.columns) - 1, "token", texts[df["window"].to_numpy(), df["position"].to_numpy()]
              if len(df) else np.array([], dtype=object))
    return df


def _key(layer: int, heads: Sequence[int]) -> str:
    return f"layer={layer};heads={','.join(map(str, heads))}"


def _token_key(layer: int, heads: Sequence[int]) -> str:
    return f"tokens;{_key(layer, heads)}"


def _check_heads(heads: Sequence[tuple[int, int]] | None, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    chosen = check_head_pairs(heads)
    if chosen is None:
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]
    check_heads_in(chosen, (n_layers, n_heads))
    return chosen
