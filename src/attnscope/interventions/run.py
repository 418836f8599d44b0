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
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attnscope.errors import InputError, check_type

from .attention import layer_list, patched
from .clean import clean_pass
from .deltas import DESCRIBE, LowWeights, resolve_precision
from .exact import TOKEN_COLUMNS, _token_frame, layer_pass
from .selection import (_atlas_table, _check_heads, check_head_pairs, check_heads_in, check_intervene_options,
                        check_kinds, head_grid, parse_heads)
from .subject import Subject, check_source, open_subject
from .workers import can_fork, run_layers, worker_count

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

#: the interventions run when none are named (``mean`` also needs its clean pass: same cost)
DEFAULT_KINDS = ("sym", "anti", "ablate")

__all__ = ["DEFAULT_KINDS", "InterventionResult", "check_head_pairs", "check_heads_in", "check_kinds", "head_grid",
           "intervene", "open_subject", "parse_heads", "clean_pass", "layer_pass"]


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
