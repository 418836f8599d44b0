"""Behaviour probes: the windows a model's heads are measured on, and the per-head table they give.

Einstein legend: b window, h head, i/j query/key position, L window length, T random-sequence length.

Two probes (:data:`PROBES`), measured with the same metrics (:func:`attnscope.heads.metrics.window_metrics`
with the windows' token ids):

* ``random`` -- the repeated-random-tokens probe of the induction-head literature (Olsson et al. 2022;
  TransformerLens' ``generate_repeated_tokens``): ``[BOS, r_1 .. r_T, r_1 .. r_T]``, L = 2T + 1, the
  r_k drawn WITHOUT replacement from the ordinary (non-special) vocabulary, so every token of the
  second copy has exactly one earlier occurrence. On these windows

  - ``induction``      = mean over the second copy (i = T+1 .. 2T) of A[i, i-T+1], the token after
                         the earlier occurrence (what ``induction_score`` measures: one pattern key per row)
  - ``previous_token`` = mean over rows i >= 1 of A[i, i-1] (``prev_mass``)
  - ``sink``           = mean over all rows of A[i, 0], the BOS position (``sink_first``)

  The start token is the tokenizer's BOS (``<|begin_of_text|>``, ``<bos>``, ``<s>``, ``[CLS]`` or
  ``<|endoftext|>``, the first it has); a tokenizer with none (byte models) starts with one more
  random token that does not recur.
* ``text`` -- held-out windows of a corpus (as ``attnscope heads``), the same three names plus every
  other metric of :data:`attnscope.heads.metrics.METRICS`.

:func:`measure_windows` streams windows through a :class:`~attnscope.heads.maps.MapModel` one layer's
maps at a time (like :func:`~attnscope.heads.maps.extract`) and returns one row per (layer, head);
:func:`run_probes` runs the probes asked for and stacks their tables under a ``probe`` column.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

from attnscope.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

    from .load import WindowPlan
    from .maps import MapModel
    from .text import TextViews

PROBES = ("random", "text")
#: the behaviour names every probe reports, and the metric column each one is
BEHAVIOUR = {"induction": "induction_score", "previous_token": "prev_mass", "sink": "sink_first"}
#: metrics shown for the text probe beside the three behaviours (all are kept in the table)
TEXT_EXTRA = ("entropy_norm", "distance", "confidence", "dup_score")
#: default text window (tokens) and random-sequence length T (the random window is 2T + 1 = 255 tokens)
DEFAULT_LENGTH = 256
DEFAULT_RANDOM_LENGTH = 127
#: the most sequences the random probe takes (its ids are allocated at once; the text probe is bounded by its corpus)
MAX_RANDOM_WINDOWS = 10_000
#: the largest side of the example map kept per head (:func:`measure_windows`' ``examples``)
MAP_SIDE = 64
BOS_NAMES = ("<|begin_of_text|>", "<bos>", "<s>", "[CLS]", "<|endoftext|>")


def default_length(model: "MapModel") -> int:
    """The text probe's window length: :data:`DEFAULT_LENGTH`, or the model's maximum if shorter."""
    return min(DEFAULT_LENGTH, model.max_len or DEFAULT_LENGTH)


def default_random_length(model: "MapModel") -> int:
    """T of the random probe: :data:`DEFAULT_RANDOM_LENGTH`, or what the maximum length / vocabulary allows."""
    half = DEFAULT_RANDOM_LENGTH
    if model.max_len is not None:
        half = min(half, (model.max_len - 1) // 2)
    return max(2, min(half, len(ordinary_ids(model)) - (bos_id(model) is None)))


def check_probes(probes: str | Sequence[str]) -> tuple[str, ...]:
    """``"both"``, one probe name, or a sequence of names -> validated tuple (in :data:`PROBES` order)."""
    if isinstance(probes, str):
        probes = PROBES if probes == "both" else tuple(p.strip() for p in probes.split(",") if p.strip())
    bad = [p for p in probes if p not in PROBES]
    if bad or not probes:
        raise InputError(f"probes must be random, text or both, not {', '.join(map(str, bad)) or 'nothing'}",
                         params="probes")
    return tuple(p for p in PROBES if p in probes)


def _inner(tokenizer: Any) -> Any:
    return getattr(tokenizer, "tok", None)


def bos_id(model: "MapModel") -> int | None:
    """The start token of the random probe (see the module docstring), None when the tokenizer has none."""
    inner = _inner(model.tokenizer)
    if inner is None:
        return None
    for name in BOS_NAMES:
        tid = inner.token_to_id(name)
        if tid is not None:
            return int(tid)
    return None


def ordinary_ids(model: "MapModel") -> "torch.Tensor":
    """Token ids the random probe may draw: the tokenizer's vocabulary without special / added tokens."""
    import torch

    inner = _inner(model.tokenizer)
    n = int(model.tokenizer.vocab_size)
    keep = torch.ones(n, dtype=torch.bool)
    if inner is not None:
        n_base = int(inner.get_vocab_size(with_added_tokens=False))
        keep[n_base:] = False
        for tid, added in inner.get_added_tokens_decoder().items():
            if tid < n and getattr(added, "special", True):
                keep[tid] = False
        for name in (*BOS_NAMES, "<unk>", "</s>", "[SEP]", "[PAD]", "[UNK]", "[MASK]", "<pad>", "<eos>"):
            tid = inner.token_to_id(name)
            if tid is not None and tid < n:
                keep[tid] = False
    for tid in (model.cls_id, model.sep_id):
        if tid is not None and tid < n:
            keep[tid] = False
    return torch.nonzero(keep).flatten()


def check_random_length(half: int, max_len: int | None) -> None:
    """InputError when the random probe of T = ``half`` (2T + 1 tokens) is longer than ``max_len``."""
    if max_len is not None and 2 * half + 1 > max_len:
        raise InputError(f"--random-length {half}: the probe (2 x {half} + 1 tokens) is longer than the model's "
                         f"maximum {max_len}; use at most {(max_len - 1) // 2}")


def random_windows(model: "MapModel", n: int, half: int, seed: int = 0) -> "torch.Tensor":
    """``n`` windows [n, 2*half + 1] of the repeated-random-tokens probe (see the module docstring)."""
    import torch

    if n < 1:
        raise InputError(f"--random-windows must be at least 1, not {n}")
    if n > MAX_RANDOM_WINDOWS:
        raise InputError(f"--random-windows must be at most {MAX_RANDOM_WINDOWS:,}, not {n:,}")
    if half < 2:
        raise InputError(f"--random-length must be at least 2, not {half}")
    pool = ordinary_ids(model)
    bos = bos_id(model)
    need = half + (bos is None)
    if len(pool) < need:
        raise InputError(f"--random-length {half} needs {need} distinct ordinary tokens; the vocabulary has {len(pool)}")
    check_random_length(half, model.max_len)
    gen = torch.Generator().manual_seed(seed)
    out = torch.empty(n, 2 * half + 1, dtype=torch.long)
    for b in range(n):
        draw = pool[torch.randperm(len(pool), generator=gen)[:need]]
        seq = draw[-half:]
        out[b, 0] = bos if bos is not None else draw[0]
        out[b, 1 : half + 1] = seq
        out[b, half + 1 :] = seq
    return out


def measure_windows(
    model: "MapModel", idx: "torch.Tensor", batch_size: int = 1, progress: bool = False, desc: str = "",
    examples: dict[int, Any] | None = None, example_len: int = MAP_SIDE, views: "TextViews | None" = None,
) -> "pd.DataFrame":
    """Every metric per (layer, head) over the windows ``idx`` [n, L]: mean and sample std over windows.

    Streams: only one layer's maps of one batch are alive at a time (the metrics of each window are kept).
    ``examples``, when given, receives layer -> [h, n, n] float16: window 0's whole maps (query x key)
    shrunk to at most ``example_len`` x ``example_len`` cells by :func:`~attnscope.heads.metrics.map_overview`
    (each cell the largest weight of its block of positions). ``views``, when given, keeps its windows' top
    keys per query (:meth:`attnscope.heads.text.TextViews.on_layer`).
    """
    import numpy as np
    import pandas as pd

    from attnscope.errors import UnsupportedError
    from attnscope.progress import progress as progress_bar

    from .metrics import map_overview, summarize_windows, window_metrics

    if batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, not {batch_size}")
    per_layer: dict[int, dict[str, list[np.ndarray]]] = {}
    current: dict[str, Any] = {}

    def on_layer(layer: int, probs: "torch.Tensor") -> None:  # probs [b, h, L, L]
        if probs is None:
            raise UnsupportedError(f"{model.name}: layer {layer} returned no attention probabilities")
        vals = window_metrics(probs, model.causal, token_ids=current["tok"], cls_id=model.cls_id, sep_id=model.sep_id)
        bucket = per_layer.setdefault(layer, {})
        for k, v in vals.items():
            bucket.setdefault(k, []).append(v.cpu().numpy())
        if examples is not None and current["b0"] == 0:
            view, _ = map_overview(probs[0].to("cpu").float().numpy(), example_len)
            examples[layer] = view.astype(np.float16)
        if views is not None:
            views.on_layer(layer, current["b0"], probs)

    with progress_bar(len(idx), desc or model.name, enabled=progress, unit="windows") as bar:
        for b0 in range(0, len(idx), batch_size):
            current["tok"], current["b0"] = idx[b0 : b0 + batch_size], b0
            model.run(current["tok"], on_layer)
            bar.advance(len(current["tok"]))
    if not per_layer:
        raise UnsupportedError(f"{model.name}: the model produced no attention maps")
    frames = [
        summarize_windows({k: np.concatenate(v, axis=0) for k, v in per_layer[layer].items()}, layer=layer)
        for layer in sorted(per_layer)
    ]
    df = pd.concat(frames, ignore_index=True)
    for name, col in BEHAVIOUR.items():  # the probe-level names, beside the metric columns they equal
        df[name] = df[col]
    return df


def run_probes(
    source: "str | os.PathLike | MapModel | Any",
    probes: str | Sequence[str] = "both",
    data: str = "builtin",
    windows: int = 8,
    length: int | None = None,
    random_windows_n: int = 8,
    random_length: int | None = None,
    seed: int = 0,
    batch_size: int = 1,
    progress: bool = False,
    device: str = "cpu",
    tokenizer: Any = None,
    examples: dict[str, dict[int, Any]] | None = None,
    views: dict[str, Any] | None = None,
) -> "pd.DataFrame":
    """Measure every head of ``source`` on each probe: one row per (probe, layer, head).

    ``windows`` x ``length`` tokens of ``data`` for the text probe; ``random_windows_n`` sequences of
    ``random_length`` random tokens (each repeated once after a start token) for the random probe.
    Defaults (None): :data:`DEFAULT_LENGTH` and :data:`DEFAULT_RANDOM_LENGTH`, shortened to what the
    model's maximum length (and, for the random probe, its vocabulary) allows.
    ``source``: a MapModel, a path / hub id (see :func:`attnscope.heads.maps.open_model`), or a loaded
    transformers model with ``tokenizer=``. ``examples``, when given, receives probe -> layer -> [h, n, n]
    float16 overview (n <= :data:`MAP_SIDE`) of the probe's first window (see :func:`measure_windows`).
    ``views``, when given, receives ``"text"`` -> :class:`~attnscope.heads.text.TextViews` of the text probe's
    first windows (the head view of the atlas page).
    """
    import pandas as pd

    from .maps import make_windows

    chosen = check_probes(probes)
    plan = probe_plan(chosen, data, windows, length, random_length)
    model = as_map_model(source, device=device, tokenizer=tokenizer, plan=plan)
    frames = []
    for probe in chosen:
        if probe == "random":
            half = default_random_length(model) if random_length is None else random_length
            idx = random_windows(model, random_windows_n, half, seed=seed)
        else:
            idx = make_windows(model, data, windows, default_length(model) if length is None else length)
        kept = None if examples is None else examples.setdefault(probe, {})
        seen = None if views is None or probe != "text" else views.setdefault(probe, text_views(model, idx))
        df = measure_windows(model, idx, batch_size=batch_size, progress=progress, desc=f"{probe} probe",
                             examples=kept, views=seen)
        if seen is not None:
            seen.name_tokens(model.tokenizer)
        df.insert(0, "probe", probe)
        df["length"] = int(idx.shape[1])
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "model", model.name)
    out.insert(1, "source", model.source or model.name)
    out.insert(2, "stack", "decoder" if model.causal else "encoder")
    out["causal"] = model.causal
    return out


def text_views(model: "MapModel", idx: "torch.Tensor") -> "TextViews":
    """An empty :class:`~attnscope.heads.text.TextViews` of the first windows of ``idx`` [n, L], ``k`` sized
    for every head of ``model`` (:func:`~attnscope.heads.text.choose_k`)."""
    import numpy as np

    from .text import VIEW_WINDOWS, TextViews, choose_k

    ids = np.asarray(idx[:VIEW_WINDOWS].cpu(), dtype=np.int64)
    k = choose_k(model.n_layers * model.n_heads, ids.shape[0], ids.shape[1])
    return TextViews(ids=ids, k=k, causal=bool(model.causal))


def as_map_model(source: Any, device: str = "cpu", tokenizer: Any = None, plan: "WindowPlan | None" = None) -> "MapModel":
    """A MapModel from a MapModel, a path / hub id, or a loaded transformers model with its tokenizer; ``plan``
    (:func:`probe_plan`) is checked before a path's weights load."""
    from .maps import resolve_model

    return resolve_model(source, tokenizer, device, plan=plan)


def probe_plan(probes: Sequence[str], data: str, windows: int, length: int | None,
               random_length: int | None) -> "WindowPlan":
    """The windows :func:`run_probes` will ask for, as a :class:`~attnscope.heads.load.WindowPlan`."""
    from .load import WindowPlan

    text = "text" in probes
    return WindowPlan(data=data if text else None, windows=windows, length=length, default_length=DEFAULT_LENGTH,
                      random_length=random_length if "random" in probes else None)


def with_random_probe(
    model: "MapModel", table: "pd.DataFrame", windows: int = 8, random_length: int | None = None, seed: int = 0,
    batch_size: int = 1, progress: bool = False,
) -> "pd.DataFrame":
    """``table`` (one row per layer, head: the text windows of ``attnscope heads``) with the random probe's
    ``induction_random``, ``previous_token_random`` and ``sink_random`` columns added."""
    half = default_random_length(model) if random_length is None else random_length
    idx = random_windows(model, windows, half, seed=seed)
    rnd = measure_windows(model, idx, batch_size=batch_size, progress=progress, desc="random probe")
    cols = rnd[["layer", "head", *BEHAVIOUR]].rename(columns={b: f"{b}_random" for b in BEHAVIOUR})
    return table.merge(cols, on=["layer", "head"], how="left", validate="one_to_one")
