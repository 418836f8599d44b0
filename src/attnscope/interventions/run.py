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
from .clean import _Clean, clean_pass
from .deltas import DESCRIBE, LowWeights, resolve_precision
from .exact import TOKEN_COLUMNS, layer_pass
from .jobs import job_source as _job_source, run_jobs as _run_jobs
from .kinds import check_custom, custom_kinds, with_controls
from .stored import (_SCREEN_KEY, _key, _per_window, _screen_record, _stored_screen, _token_effects, _token_key)
from .screen import (SCREEN_DESCRIBE, SCREEN_DESCRIBE_ENCODER, SCREEN_DESCRIBE_FIRST, SCREEN_VERSION, agreement,
                     choose_exact, default_samples, exact_rule as _exact_rule, screen_pass)
from .selection import (_atlas_table, _check_heads, check_exact, check_head_pairs, check_heads_in,
                        check_intervene_options, check_kinds, head_grid, parse_heads)
from .subject import Subject, check_source, open_subject
from .workers import can_fork, run_layers, worker_count

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: the interventions run when none are named (``mean`` also needs its clean pass: same cost)
DEFAULT_KINDS = ("sym", "anti", "ablate")
#: the text the changes are measured on by default: prose (CPython's documentation) and code (standard-library
#: sources) taking turns, so that a finding is not one kind of text's
DEFAULT_DATA = "builtin,builtin-code"
#: text windows (and random-probe windows) by default: docs/atlas.md, "How many windows", says what they detect
DEFAULT_WINDOWS = 8

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
    #: the screen of every selected head, summarised over windows (the rows of ``table`` before the
    #: exact pass: ``loss`` rows hold the estimate in ``delta``; :mod:`.screen`)
    screen: "pd.DataFrame | None" = None
    #: what each head turns into under each score intervention (:func:`.summary.becomes`)
    becomes: "pd.DataFrame | None" = None


def intervene(
    source: Any,
    *,
    tokenizer: Any = None,
    interventions: str | Sequence[str] = DEFAULT_KINDS,
    heads: Sequence[tuple[int, int]] | None = None,
    data: str = DEFAULT_DATA,
    windows: int = DEFAULT_WINDOWS,
    length: int | None = None,
    random_windows: int = DEFAULT_WINDOWS,
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
    exact: "str | int" = "auto",
    executor: str | None = None,
    slurm: dict[str, Any] | None = None,
    custom: "dict[str, Any] | None" = None,
    controls: bool = True,
    power: float | None = None,
    screen_samples: int | None = None,
) -> InterventionResult:
    """Intervene on every head of ``source`` (or the (layer, head) pairs ``heads``) with each of
    ``interventions`` (sym, anti, ablate, mean, ...): the change in loss on ``windows`` text windows of ``data``
    (default prose and code taking turns: :data:`DEFAULT_DATA`)
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

    Every selected head is first screened (:mod:`.screen`: per text window one forward, one backward and one
    backward per label draw; the change in loss to second order after the head's exactly recomputed softmax,
    the curvature a Gauss-Newton term estimated from ``screen_samples`` draws of next tokens from the model's
    own predictions per window (None: :func:`.screen.default_samples`, at least 4 per window and 32 in all; 0:
    first order alone), columns ``*_screen``; the behaviour changes exact), then measured exactly by ``exact``:
    ``"auto"`` (default: for each intervention, not counting the controls added beside them, the 10% of the
    screened heads with the largest screened |change in loss| under it, at least 4, plus every head named by
    ``heads`` / ``top``), an integer K (the K largest of each intervention, plus the named), ``0`` (the screen
    alone) or ``"all"`` (every head: the full sweep). A head measured exactly is measured under every
    intervention. ``exact`` (True/False) and ``exact_reason`` say which rows were measured; the
    ``delta`` columns of a loss row are empty where it was not.

    ``executor``: None (this process, with ``workers`` forked processes) or ``"slurm"`` / ``"local"``: the
    exact layer passes as jobs (:func:`attnscope.runs.executors.run_tasks`; one per layer, each loading the
    model from ``source``, a file or directory, and writing into ``store``, which it needs), ``slurm`` the
    job options (partition, time_min, mem_gb). A rerun resumes from the layers the jobs stored.
    Returns one row per (layer, head, intervention, measure): mean delta over windows, 95% t interval,
    p value, ``p_bh`` (Benjamini-Hochberg across the heads of one intervention and measure), ``sd`` of the
    per-window deltas and ``detectable_change`` (:func:`.summary.detectable_change`: the smallest true change
    these windows detect with 80% power). ``.token_effects``: the change in loss at each text position of
    every intervened head (:attr:`InterventionResult.token_effects`; None for an encoder).

    ``interventions`` may hold ``scale:A``, ``sym~``, ``anti~`` and ``resample`` too (:mod:`.kinds`), and the
    names of ``custom``: ``{"name": f}`` with ``f(scores, q, k, layer, head) -> scores`` (one head's raw scores
    [i, j] = q k^T after rotary, q [i, d], k [j, d]; the returned scores go through the model's own scaling,
    softcap, mask and softmax), run through the same screen and exact passes, their rows in the same table.
    ``controls`` (default True): the control of ``sym`` and ``anti`` (``scale:0.5``) is run beside them, and each
    of their rows says whether its effect exceeds the control's (``vs_control`` columns: the paired
    difference over windows, its 95% t interval and a Benjamini-Hochberg p).
    ``power`` (a change in loss, nats): plan the windows first: the screen alone on ``windows`` windows (a
    pilot) gives each head's per-window spread of its change in loss; the run then takes the windows that
    detect ``power`` with 80% power at the spread of the noisier heads (:data:`POWER_QUANTILE`;
    :func:`.summary.windows_needed`; at least ``windows``, at most :data:`MAX_PLANNED_WINDOWS`); ``info["power"]``
    says how.
    """
    check_source(source, tokenizer)
    custom = check_custom(custom)
    if power is not None:
        check_type(power, (int, float, np.integer, np.floating), "power", "a change in loss in nats, e.g. 0.02")
        if not (np.isfinite(power) and power > 0) or isinstance(power, bool):
            raise InputError(f"power must be a change in loss above 0 (nats, e.g. 0.02), not {power}", params="power")
    opts = dict(tokenizer=tokenizer, interventions=interventions, heads=heads, data=data, length=length,
                random_length=random_length, seed=seed, device=device, precision=precision, name=name,
                progress=progress, workers=workers, atlas=atlas, top=top, executor=executor, slurm=slurm, custom=custom,
                controls=controls, screen_samples=screen_samples)
    with custom_kinds(custom):
        planned = None
        if power is not None:  # a pilot: the screen alone on the windows given, their spread -> the windows needed
            from .summary import windows_needed

            if isinstance(source, (str, os.PathLike)):  # load once for the pilot and the run
                source = open_subject(source, tokenizer=tokenizer, device=device, name=name)
                opts["tokenizer"] = None
            pilot = _intervene(source, **{**opts, "executor": None, "slurm": None}, windows=windows, random_windows=0,
                               store=None, exact=0)
            screen = pilot.screen if pilot.screen is not None else pilot.table
            sds = screen.loc[screen["measure"] == "loss", "sd"].to_numpy(float)
            sds = sds[np.isfinite(sds)]
            if not len(sds):
                raise InputError("power plans the windows from the change in loss: this model has none (an encoder)",
                                 params="power")
            spread = float(np.quantile(sds, POWER_QUANTILE))
            need = windows_needed(spread, float(power), most=MAX_PLANNED_WINDOWS)
            planned = {"change": float(power), "pilot_windows": windows, "sd_quantile": POWER_QUANTILE,
                       "sd": spread, "windows_needed": need,
                       "windows": min(max(windows, need), MAX_PLANNED_WINDOWS)}
            windows = planned["windows"]
        res = _intervene(source, **opts, windows=windows, random_windows=random_windows, store=store, exact=exact)
    if planned is not None:
        res.info["power"] = planned
    return res


def _intervene(source: Any, *, tokenizer: Any, interventions: Any, heads: Any, data: str, windows: int,
               length: int | None, random_windows: int, random_length: int | None, seed: int, device: Any,
               precision: str, store: Any, name: str | None, progress: bool, workers: int | None, atlas: Any,
               top: Any, exact: Any, executor: str | None, slurm: dict[str, Any] | None, custom: dict[str, Any],
               controls: bool, screen_samples: int | None) -> InterventionResult:
    """:func:`intervene` with its custom interventions registered (:func:`.kinds.custom_kinds`)."""
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.heads.probes import default_length, default_random_length, random_windows as make_random
    from attnscope.progress import phase

    from attnscope.devices import check_device

    from .summary import (DETECTABLE, becomes, contrasts, join_atlas, join_screen, parse_top, summarise,
                          summarise_screen, top_heads)

    kinds = check_intervene_options(interventions, windows, random_windows, seed)
    check_type(controls, bool, "controls", "True or False")
    added: tuple[str, ...] = ()  # the controls added beside the interventions asked for: they choose no exact heads
    if controls:
        added = tuple(k for k in with_controls(kinds) if k not in kinds)
        kinds = with_controls(kinds)
    if "resample" in kinds and windows < 2:
        raise InputError("resample takes a head's output from another text window: windows must be at least 2",
                         params=("interventions", "windows"))
    exact = check_exact(exact)
    if screen_samples is not None:
        check_type(screen_samples, (int, np.integer), "screen_samples", "a number of label draws per window, or None")
        if isinstance(screen_samples, bool) or screen_samples < 0:
            raise InputError(f"screen_samples must be 0 (first order alone) or more, not {screen_samples}",
                             params="screen_samples")
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
    if executor is not None:
        from attnscope.runs.executors import EXECUTORS

        if executor not in EXECUTORS:
            raise InputError(f"executor must be one of {', '.join(EXECUTORS)} (or None: this process), not "
                             f"{executor!r:.40}", params="executor")
        if store is None:
            raise InputError("executor= sends the exact layer passes as jobs that write into store=: give store= too",
                             params=("executor", "store"))
        if not isinstance(_job_source(source), str):
            raise InputError("executor= needs a model the jobs can load themselves (a GGUF file, an HF directory "
                             "or hub id), not a model in memory", params="executor")
        if custom:
            raise InputError("executor= runs the exact passes in jobs of their own, which cannot be sent custom "
                             "interventions: leave executor out (this process) with custom=", params=("executor", "custom"))
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
    if custom:  # a store is reused only by the same functions
        settings["custom"] = {k: _fingerprint(fn) for k, fn in custom.items()}
    samples = (0 if subject.out_weight is None else  # an encoder: no loss, no draws
               default_samples(windows) if screen_samples is None else int(screen_samples))
    # the exact layers of the 2026-11-28 code recorded its screen, on which they do not depend: reused in full
    # precision (bf16-delta's loss routing changed since, 2026-11-29)
    older = [{**settings, "screen": OLD_SCREEN}] if precision == "full" else []
    # the screen's record is reused only by the same screen; the exact layers do not depend on it
    screen_settings = {**settings, "screen": SCREEN_VERSION, "screen_samples": samples}
    columns = ["layer", "head", "intervention", "measure"]
    results = None
    if store is not None:
        from attnscope.runs.store import ResultsStore

        results = ResultsStore(store, settings=settings, columns=columns, also=older)
    by_layer = _by_layer(chosen)
    from attnscope.heap import reused_heap

    with torch.inference_mode(), patched(subject.model) as ctl, reused_heap(), ExitStack() as stack:
        clean = None

        made_for_deltas = False

        def clean_once(for_deltas: bool) -> _Clean:
            nonlocal clean, made_for_deltas
            if clean is None or (for_deltas and not made_for_deltas):  # (bf16-delta needs what it keeps)
                made_for_deltas = for_deltas
                with phase(f"interventions {mm.name}: clean pass", enabled=progress,
                           total=sum(len(idx) for idx in wins.values()), unit="windows") as bar:
                    clean = clean_pass(subject, wins, ctl, for_deltas=for_deltas, tick=bar.advance,
                                       keep_heads="resample" in kinds)
            return clean

        low_wanted = precision == "bf16-delta" and subject.out_weight is not None
        screen_store = (None if results is None else
                        ResultsStore(results.root, settings=screen_settings, columns=columns))
        screen_rows, patterns = _stored_screen(screen_store)
        if screen_rows is None:
            low_now = low_wanted and exact != 0  # the clean pass keeps what bf16-delta's exact passes reuse
            base = clean_once(for_deltas=low_now)
            with phase(f"interventions {mm.name}: screen (per text window 1 forward, 1 + {samples} backward)",
                       enabled=progress, total=sum(len(idx) for idx in wins.values()), unit="windows") as bar:
                screen_rows, patterns = screen_pass(subject, wins, by_layer, kinds, base, ctl, tick=bar.advance,
                                                    samples=samples, seed=seed)
            if screen_store is not None:
                screen_store.write(_SCREEN_KEY, _screen_record(screen_rows, patterns))
        screen = summarise_screen(screen_rows, patterns)
        named = chosen if heads is not None else []
        exact_heads = choose_exact(screen, exact, named, skip=added) if subject.out_weight is not None else {}
        exact_by_layer = _by_layer(sorted(exact_heads))
        token_store = (ResultsStore(results.root, settings=settings, columns=TOKEN_COLUMNS, also=older)
                       if results is not None and subject.out_weight is not None else None)
        # a layer is done when its rows and (for a decoder) its per-token rows are stored: one without the
        # other (a store tampered with, files of another run swapped in, a kill between the two writes) is
        # computed again, both written anew
        pending = [l for l in sorted(exact_by_layer)
                   if results is None or not results.is_done(_key(l, exact_by_layer[l]))
                   or (token_store is not None and not token_store.is_done(_token_key(l, exact_by_layer[l])))]
        low = (LowWeights().prepare(layer_list(subject.model).modules(), subject.out_weight)  # before any forward
               if low_wanted and pending else None)
        if pending and executor is None:  # (jobs make their own)
            clean_once(for_deltas=low is not None)
        count = worker_count(torch.get_num_threads(), len(pending), device) if workers is None else workers
        keep = results
        if keep is None and count > 1:  # the workers' results come back through a store of this run's own
            from attnscope.runs.store import ResultsStore

            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="attnscope-interventions-"))
            keep = ResultsStore(tmp, settings=settings, columns=columns)
        # the per-position changes in loss beside each layer's rows, in the same directory (written first:
        # a layer stored as done has them, unless an older attnscope stored it)
        keep_tokens = (None if keep is None else
                       ResultsStore(keep.root, settings=settings, columns=TOKEN_COLUMNS, also=older))
        here: dict[int, pd.DataFrame] = {}
        here_tokens: dict[int, pd.DataFrame] = {}
        text_only = {"text": text}

        def work(layer: int) -> None:
            assert clean is not None  # a pending layer had its clean pass
            df, tokens = layer_pass(subject, layer, exact_by_layer[layer], kinds, text_only, clean, ctl, low,
                                    with_tokens=True, behaviour=False)
            df = summarise(df)
            if keep is not None and keep_tokens is not None:
                keep_tokens.write(_token_key(layer, exact_by_layer[layer]), tokens)
                keep.write(_key(layer, exact_by_layer[layer]), df)
            else:
                here[layer], here_tokens[layer] = df, tokens

        if exact_by_layer:
            stored = [l for l in exact_by_layer if l not in pending]
            reused = f" (layer(s) {_ranges(stored)} reused from the store)" if stored else ""
            with phase(f"interventions {mm.name}: exact pass of {len(exact_heads)} heads{reused}", enabled=progress,
                       total=len(exact_by_layer), unit="layers", start=len(stored)) as bar:
                done = [float(len(stored))]  # layers finished
                running: dict[int, float] = {}  # layer -> how far it is

                def show(layer: int, fraction: float | None) -> None:
                    if fraction is None:
                        running.pop(layer, None)
                        done[0] += 1
                    else:
                        running[layer] = fraction
                    bar.update(completed=done[0] + sum(running.values()))

                bar.update(completed=done[0])
                if executor is not None and pending:
                    assert results is not None
                    _run_jobs(results, pending, exact_by_layer, executor, slurm, workers, progress,
                              dict(source=_job_source(source), device=device, name=subject.name, kinds=list(kinds),
                                   data=str(data), windows=windows, length=int(text.shape[1]), precision=precision,
                                   settings=settings))
                    bar.update(completed=float(len(exact_by_layer)))
                else:
                    run_layers(pending, work, count, on_done=lambda l: show(l, None), on_report=show,
                               cost=lambda l: len(exact_by_layer[l]) * (n_layers - l + 6))  # its suffix; the loss ~6 layers
        frames = [here[l] if l in here else keep.read(_key(l, exact_by_layer[l]))  # type: ignore[union-attr]
                  for l in sorted(exact_by_layer)]
        token_frames, unstored = [], []
        for l in sorted(exact_by_layer) if subject.out_weight is not None else ():
            if l in here_tokens:
                token_frames.append(here_tokens[l])
            elif keep_tokens is not None and keep_tokens.is_done(_token_key(l, exact_by_layer[l])):
                token_frames.append(keep_tokens.read(_token_key(l, exact_by_layer[l])))
            else:
                unstored.append(l)
    if unstored:
        import warnings

        warnings.warn(f"interventions: the store {store} holds layer(s) {', '.join(map(str, unstored))} without their "
                      "per-token changes in loss (stored by an older attnscope); the token effects lack those layers",
                      UserWarning, stacklevel=2)
    table = join_screen(screen, frames, exact_heads)
    table = contrasts(table, _per_window(screen_rows, token_frames))
    table["few_units"] = np.where(table["exact"].astype(bool) & (table["n"] > 0), table["n"],
                                  table["n_screen"].fillna(0)) < FEW_WINDOWS
    table.insert(0, "model", subject.name)
    table.insert(1, "stack", "decoder" if mm.causal else "encoder")
    info = {**settings, "n_layers": n_layers, "n_heads": n_heads, "heads": len(chosen),
            "exact": exact, "exact_heads": len(exact_heads),
            "exact_rule": _exact_rule(exact, len(chosen)) if subject.out_weight is not None else
            "none: an encoder has no next-token loss (its behaviour changes are exact from the screen)",
            "loss": "mean next-token cross-entropy (nats) per window" if subject.out_weight is not None else
            "none (no output matrix: an encoder)",
            "screen_method": (SCREEN_DESCRIBE if samples else SCREEN_DESCRIBE_FIRST) if subject.out_weight is not None
            else SCREEN_DESCRIBE_ENCODER, "screen": SCREEN_VERSION,
            "screen_samples": samples,
            "products": f"{precision}: {DESCRIBE[precision]}",
            "interval": "mean over windows, 95% t interval (n windows); p: one-sample t-test; p_bh: "
                        "Benjamini-Hochberg across heads per intervention and measure (the same for the "
                        "screen's columns, *_screen, over the screened heads)",
            "detectable_change": DETECTABLE}
    agree = agreement(table)
    if agree:
        info["agreement"] = agree
    if atlas_table is not None:
        table = join_atlas(table, atlas_table)
    effects = (_token_effects(subject, text, token_frames) if subject.out_weight is not None else None)
    turned = becomes(table)
    if len(turned):  # on the table too: every row of a (head, intervention) says what the head becomes
        said = turned.set_index(["layer", "head", "intervention"])["text"]
        keys = list(zip(table["layer"], table["head"], table["intervention"]))
        table["becomes"] = [said.get(k) for k in keys]
    else:
        table["becomes"] = None
    turned.insert(0, "model", subject.name)
    return InterventionResult(table=table, info=info, token_effects=effects, screen=screen.assign(model=subject.name),
                              becomes=turned)


#: ``power=``: the windows are planned for the heads whose per-window spread is at this quantile (the
#: noisier heads, which the change must be detectable on too)
POWER_QUANTILE = 0.75
#: ``power=`` plans at most this many windows (more is a sign the change is too small for this text)
MAX_PLANNED_WINDOWS = 256
#: what the 2026-11-28 code recorded as the screen in every stored file's settings
OLD_SCREEN = "qk-fix first order, 1"
#: rows resting on fewer windows than this are flagged ``few_units`` (a t interval with under 7 degrees of
#: freedom is wide, and its normality assumption untestable)
FEW_WINDOWS = 8


def _fingerprint(fn: Any) -> str:
    """A hash of a custom intervention's code and constants (its bytecode, names and defaults): a store made with
    other code is not reused."""
    import hashlib

    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__call__", None), "__code__", None)
    if code is None:
        return f"unhashable {type(fn).__name__}"
    parts = [code.co_code, repr(code.co_consts).encode(), repr(code.co_names).encode(),
             repr(getattr(fn, "__defaults__", None)).encode()]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def _by_layer(pairs: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """(layer, head) pairs -> layer -> its heads, in the order given."""
    out: dict[int, list[int]] = {}
    for layer, head in pairs:
        out.setdefault(layer, []).append(head)
    return out


def _ranges(layers: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    xs, parts = sorted(layers), []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ", ".join(parts)
