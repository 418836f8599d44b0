"""Relative offsets for position-aware geometry: checking and parsing them, and the per-pair frequency table.

An offset is query position - key position (>= 0: the key lies behind the query, as in causal
attention; negative offsets are keys ahead, for encoders). ``check_offsets`` validates a list given
in Python, ``parse_offsets`` reads the CLI's ``0,1,16,256`` or ``log:START:STOP:N`` forms, and
``frequencies(source)`` tabulates, per head and rotary pair, the pair's share of the head's W_qk
energy (:func:`attnscope.geometry.rotary.pair_usage`) with its frequency and wavelength.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.errors import ArgumentTypeError, FormatError, InputError, UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: |offset| must stay below this (positions are 32-bit in every framework attnscope reads); the bound for
#: a model whose config states no context length (one that states one is held to it: :func:`check_reach`)
MAX_OFFSET = 2**31
#: at most this many offsets per call: every offset repeats every record of a run (tens are the use;
#: :func:`attnscope.geometry.rotary.offset_symmetry` is the route for dense sweeps of s alone)
MAX_OFFSETS = 1024


class PositionNote(UserWarning):
    """A one-line fact about how offsets apply to a model (no rotary positions, dynamic scaling, ...)."""


def check_offsets(offsets: Iterable[Any]) -> list[int]:
    """Offsets as a list of ints; InputError (one line) when empty, non-integer, beyond 2^31, repeated or
    more than :data:`MAX_OFFSETS` (counted while reading, so an endless iterable is refused too)."""
    if isinstance(offsets, (str, bytes)):
        raise ArgumentTypeError("offsets must be a list of integers (use parse_offsets for the '0,1,16' form)",
                                params="offsets")
    if isinstance(offsets, Mapping) or not isinstance(offsets, Iterable):  # a dict would give its keys silently
        raise ArgumentTypeError(f"offsets must be a list of integers, not {type(offsets).__name__} {offsets!r:.40}",
                                params="offsets")
    out: list[int] = []
    seen: set[int] = set()
    dup: set[int] = set()
    for o in offsets:
        if len(out) == MAX_OFFSETS:
            raise InputError(f"offsets holds more than {MAX_OFFSETS} offsets: give at most {MAX_OFFSETS} (each one "
                             "repeats every record; offset_symmetry in attnscope.geometry.rotary sweeps s densely)",
                             params="offsets")
        if isinstance(o, bool) or not isinstance(o, numbers.Integral):
            if isinstance(o, numbers.Real) and not isinstance(o, bool) and float(o).is_integer():
                o = int(o)
            else:
                raise InputError(f"offsets must be integers, not {o!r}", params="offsets")
        o = int(o)
        if abs(o) >= MAX_OFFSET:
            raise InputError(f"offset {o} is beyond 2^31 (positions are 32-bit)", params="offsets")
        if o in seen:
            dup.add(o)
        seen.add(o)
        out.append(o)
    if not out:
        raise InputError("offsets is empty: give at least one offset", params="offsets")
    if dup:
        raise InputError(f"offsets repeats {', '.join(map(str, sorted(dup)))}", params="offsets")
    return out


def reach(config: dict[str, Any]) -> int | None:
    """The largest |offset| a model can apply: its context length (:func:`context_length`), times a dynamic
    rotary scaling's factor (it stretches the positions past the trained context); None when unstated."""
    ctx = context_length(config)
    if ctx is None:
        return None
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if isinstance(scaling, dict) and str(scaling.get("rope_type") or scaling.get("type")) == "dynamic":
        factor = scaling.get("factor")
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and math.isfinite(factor) and factor > 1:
            return int(ctx * factor)
    return ctx


def check_reach(offsets: list[int], config: dict[str, Any], model: str) -> None:
    """InputError (one line) when an offset lies beyond what ``model`` can attend to (:func:`reach`); a model
    that states no context length is held to :data:`MAX_OFFSET` (by :func:`check_offsets`)."""
    bad = [(key, value) for key, value in _stated_lengths(config) if not _is_length(value)]
    if bad:  # a stated length that is none (0, negative, text) must not leave the offsets unbounded
        key, value = bad[0]
        raise FormatError(f"{model}: its config states {key} = {value!r}, not a context length, so offsets cannot be "
                          "checked against it")
    limit = reach(config)
    if limit is None:
        return
    far = [o for o in offsets if abs(o) > limit]
    if far:
        worst = max(far, key=abs)
        raise InputError(f"{model}: offset {worst} is beyond the model's context length {limit}: give offsets up to "
                         f"{limit}", params="offsets")


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InputError(f"--offsets: {what} {text.strip()!r} is not an integer") from None


def parse_offsets(spec: str) -> list[int]:
    """``"0,1,16,256"`` or ``"log:START:STOP:N"`` (START, up to N log-spaced integers to STOP; 0 allowed as START).

    The log form spaces N points geometrically between max(START, 1) and STOP, rounds them to
    integers and drops the repeats rounding makes (so it may give fewer than N); START = 0 adds 0.
    """
    if not isinstance(spec, str):
        raise ArgumentTypeError(f"spec must be a string such as '0,1,16' or 'log:0:8192:32', not {type(spec).__name__}"
                                " (give a list of integers to check_offsets / offsets= instead)", params="spec")
    spec = spec.strip()
    if not spec:
        raise InputError("--offsets is empty: give e.g. 0,1,16,256 or log:0:8192:32")
    if spec.startswith("log:"):
        parts = spec[4:].split(":")
        if len(parts) != 3:
            raise InputError(f"--offsets {spec!r}: the log form is log:START:STOP:N")
        start, stop, n = (_int(p, w) for p, w in zip(parts, ("START", "STOP", "N")))
        if not 0 <= start < stop or n < 2:
            raise InputError(f"--offsets {spec!r}: needs 0 <= START < STOP and N >= 2")
        if n > MAX_OFFSETS:
            raise InputError(f"--offsets {spec!r}: N is at most {MAX_OFFSETS}, not {n} (each offset repeats every "
                             "record; offset_symmetry in attnscope.geometry.rotary sweeps s densely)")
        check_offsets([stop])
        lo, m = max(start, 1), n - (1 if start == 0 else 0)
        # one point left beside 0 is STOP (geomspace would give START's side, 1, and drop STOP)
        pts = np.unique(np.rint(np.geomspace(lo, stop, m) if m > 1 else [stop]).astype(np.int64))
        return ([0] if start == 0 else []) + [int(p) for p in pts]
    parts = spec.split(",", MAX_OFFSETS)
    if len(parts) > MAX_OFFSETS:
        raise InputError(f"--offsets holds more than {MAX_OFFSETS} offsets: give at most {MAX_OFFSETS}")
    return check_offsets([_int(p, "offset") for p in parts])


def note(message: str) -> None:
    """Emit one :class:`PositionNote` (the CLI prints it as one line)."""
    warnings.warn(message, PositionNote, stacklevel=3)


def frequencies(source: Any, *, config: Any = None, name: str | None = None, fold_norms: bool | str = False) -> "pd.DataFrame":
    """Per layer, head and rotary pair: frequency, wavelength (positions), energy share and block symmetry.

    One row per pair (``pair`` 0.., ``dims`` its two head dims) plus one ``pair = -1`` row for the
    unrotated dims of a partial-rotary head (``dims`` "unrotated"; share 0 and no row when every dim
    rotates), and the model's ``context_length``. UnsupportedError when the model has no rotary positions.
    """
    import pandas as pd

    from attnscope.families import get_family
    from attnscope.families.base import check_fold
    from attnscope.families.rope import rotary_layout
    from attnscope.sources import open_source

    fold = check_fold(fold_norms)
    from attnscope.naming import model_names

    from attnscope.zoo.registry import resolve_spec

    src = open_source(resolve_spec(source), config=config)  # a zoo id: its installed copy
    model, given = model_names(source, src.name, name, src.config)
    rows: list[dict] = []
    try:
        fam = get_family(src.config)
        for info in fam.stacks(src.config, src):
            for layer in range(info.n_layers):
                layout = rotary_layout(src.config, info, layer, src)
                if layout is None:
                    raise UnsupportedError(f"{model}: has no rotary positions, so it has no per-pair frequency usage")
                f = fam.layer_factors(src, info, layer, fold)
                rows.extend(_frequency_rows(info.stack, layer, f.q, f.k, f.kv_index, layout))
    finally:
        if src is not source:
            src.close()
    df = pd.DataFrame(rows)
    df.insert(0, "family", fam.name)
    df.insert(0, "source", given)
    df.insert(0, "model", model)
    df["context_length"] = context_length(src.config)
    return df


def _stated_lengths(config: dict[str, Any]) -> list[tuple[str, Any]]:
    """(key, value) of every context length a config or GGUF file states, in order of precedence."""
    meta = config.get("gguf_metadata") or {}
    arch = config.get("architecture")
    pairs = [(f"{arch}.context_length", meta.get(f"{arch}.context_length"))]
    pairs += [(key, config.get(key)) for key in ("max_position_embeddings", "n_positions", "max_seq_len")]
    return [(key, value) for key, value in pairs if value is not None]


def _is_length(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0


def context_length(config: dict[str, Any]) -> int | None:
    """The trained context length a config or GGUF file states (None when it states none)."""
    for _, value in _stated_lengths(config):
        if _is_length(value):
            return int(value)
    return None


def _frequency_rows(stack: str, layer: int, q: np.ndarray, k: np.ndarray, kv: np.ndarray, layout: Any) -> list[dict]:
    use = pair_usage_checked(q, k, layout)
    n_p = layout.n_pairs
    has_unrot = layout.unrotated.size > 0
    out = []
    for h in range(q.shape[0]):
        for j in range(n_p + (1 if has_unrot else 0)):
            rot = j < n_p
            w = float(layout.inv_freq[j]) if rot else 0.0
            out.append({"stack": stack, "layer": layer, "head": h, "kv_head": int(kv[h]), "pair": j if rot else -1,
                        "dims": f"{layout.a[j]},{layout.b[j]}" if rot else "unrotated",
                        "theta": w, "wavelength": 2 * math.pi / w if w > 0 else math.inf,
                        "energy_share": float(use["share"][h, j]), "symmetry": float(use["symmetry"][h, j]),
                        "rope_type": layout.rope_type})  # fmt: skip
    return out


def pair_usage_checked(q: np.ndarray, k: np.ndarray, layout: Any) -> dict[str, np.ndarray]:
    """:func:`pair_usage` on finite factors (non-finite weights give NaN rows rather than an error)."""
    from .rotary import pair_usage

    q, k = np.asarray(q, np.float32), np.asarray(k, np.float32)
    if np.isfinite(q).all() and np.isfinite(k).all():
        return pair_usage(q, k, layout)
    use = pair_usage(np.nan_to_num(q), np.nan_to_num(k), layout)
    return {key: np.full_like(v, np.nan) for key, v in use.items()}
