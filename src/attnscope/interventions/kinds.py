"""What an intervention is: its name, whether it changes a head's scores or its output, and how.

Score interventions (the head's own map changes; behaviour is measured under them):

* ``sym`` / ``anti``: the scores S = Q K^T become S_sym = (S + S^T)/2 or S_anti = (S - S^T)/2;
* ``scale:A`` (A >= 0): the scores become A S -- the control of ``sym`` and ``anti``: each keeps about half of
  a pattern that is neither symmetric nor antisymmetric, and ``scale:0.5`` halves the whole of it;
* ``sym~`` / ``anti~``: S_sym / S_anti norm-matched: each query's kept scores rescaled (times
  sd_j(S_ij) / sd_j(S'_ij), the standard deviations over the keys the query sees, before scaling and mask)
  so that each query's scores keep the clean spread: the pattern's shape without its temperature change;
* ``anti-rank:R`` / ``sym-rank:R`` (R >= 0 a whole number): the antisymmetric (symmetric) part of the scores
  replaced by its best rank-R approximation (truncated SVD of the window's [i, j] part, Eckart-Young), the
  other part kept whole: does a head's routing (its antisymmetric part) need more than rank R? An
  antisymmetric matrix's singular values come in equal pairs, so an odd R keeps half of a pair;
* a custom one, ``f(scores, q, k, layer, head) -> scores``: scores [i, j] = q k^T (rotary applied, before
  the model's scaling, softcap, mask and softmax), q [i, d], k [j, d] of one head; the returned [i, j]
  scores go through the model's own scaling, softcap, mask and softmax (:func:`custom_kinds`).

Output interventions (the head's output before the output projection; its map is unchanged):
``ablate`` (0), ``mean`` (its mean output over the clean text windows' positions), ``resample`` (its output on
the next text window at the same positions, as causal scrubbing resamples a component).

:data:`CONTROLS`: the control each claim-deciding intervention is compared with, run beside it by default.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

from attnscope.errors import InputError

#: the fixed names, in the tables' order (``scale:A`` and custom names follow, in the order given)
SCORE_NAMES = ("sym", "anti", "sym~", "anti~")
OUTPUT_KINDS = ("ablate", "mean", "resample")
NAMES = SCORE_NAMES + OUTPUT_KINDS
#: the control an intervention's effect must exceed for a claim (run beside it unless ``controls=False``)
CONTROLS = {"sym": "scale:0.5", "anti": "scale:0.5"}
#: the scale coefficients (a, b, c) of :mod:`.attention`'s q' = [a q, b k], k' = [a k, c q]: q'_i.k'_j =
#: a^2 q_i.k_j + b c k_i.q_j
_HALF = math.sqrt(0.5)
_COEF = {"sym": (_HALF, _HALF, _HALF), "anti": (_HALF, _HALF, -_HALF)}

ScoreFunction = Callable[..., Any]
#: custom score interventions of the run in progress (:func:`custom_kinds`); forked workers inherit them
_CUSTOM: dict[str, ScoreFunction] = {}


def scale_of(kind: str) -> float | None:
    """A of ``scale:A``, or None for another name."""
    if not kind.startswith("scale:"):
        return None
    try:
        value = float(kind[len("scale:"):])
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def rank_of(kind: str) -> tuple[str, int] | None:
    """(part, R) of ``anti-rank:R`` / ``sym-rank:R`` (part ``anti`` or ``sym``), or None for another name."""
    for part in ("anti", "sym"):
        prefix = f"{part}-rank:"
        if kind.startswith(prefix):
            r = kind[len(prefix):]
            return (part, int(r)) if r.isascii() and r.isdigit() else None
    return None


def is_score(kind: str) -> bool:
    """Whether ``kind`` changes the head's scores (its map, so its behaviour)."""
    return kind in SCORE_NAMES or scale_of(kind) is not None or rank_of(kind) is not None or kind in _CUSTOM


def is_output(kind: str) -> bool:
    return kind in OUTPUT_KINDS


def coefficients(kind: str) -> tuple[float, float, float] | None:
    """(a, b, c) of a score intervention the model's own function computes from longer q and k (``sym``,
    ``anti``, ``scale:A``), None for one computed from the scores (``sym~``, ``anti~``, custom)."""
    if kind in _COEF:
        return _COEF[kind]
    a = scale_of(kind)
    return None if a is None else (math.sqrt(a), 0.0, 0.0)


def score_function(kind: str) -> ScoreFunction | None:
    """A custom intervention's function (None for a built-in one)."""
    return _CUSTOM.get(kind)


def check_kind(name: Any) -> str:
    """A valid intervention name (``scale:A`` with A a finite number >= 0; a custom name registered), else one line."""
    if not isinstance(name, str):
        raise InputError(f"an intervention is a name such as sym, not {type(name).__name__} {name!r:.30}",
                         params="interventions")
    name = name.strip()
    if name in NAMES or name in _CUSTOM:
        return name
    if name.startswith(("anti-rank:", "sym-rank:")):
        rank = rank_of(name)
        if rank is None:
            raise InputError(f"{name[:40]}: anti-rank:R / sym-rank:R need a whole number R >= 0 (e.g. anti-rank:2)",
                             params="interventions")
        return f"{rank[0]}-rank:{rank[1]}"
    if name.startswith("scale:"):
        if scale_of(name) is None:
            raise InputError(f"{name[:40]}: scale:A needs a finite number A >= 0 (scale:0.5 halves the head's scores)",
                             params="interventions")
        return f"scale:{scale_of(name):g}"
    raise InputError(f"interventions must be among {', '.join(NAMES)}, scale:A, anti-rank:R, sym-rank:R or a custom "
                     f"name, not {name[:40]!r}",
                     params="interventions")


def order(kind: str) -> tuple[int, str]:
    """The tables' sort key: the fixed names first (in :data:`NAMES` order), then ``scale:A``, then custom."""
    if kind in NAMES:
        return (NAMES.index(kind), "")
    if kind.startswith("scale:"):
        return (len(NAMES), kind)
    rank = rank_of(kind)
    if rank is not None:  # by part, then by R as a number
        return (len(NAMES) + 1, f"{rank[0]}{rank[1]:09d}")
    return (len(NAMES) + 2, kind)


def with_controls(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """``kinds`` plus the control of each (:data:`CONTROLS`) not already there."""
    extra = [CONTROLS[k] for k in kinds if k in CONTROLS and CONTROLS[k] not in kinds]
    return tuple(sorted(dict.fromkeys([*kinds, *extra]), key=order))


def check_custom(custom: Any) -> dict[str, ScoreFunction]:
    """``custom`` of :func:`attnscope.interventions.intervene`: a dict of new names to callables."""
    if custom is None:
        return {}
    if not isinstance(custom, Mapping):
        raise InputError(f"custom must be a dict of name -> f(scores, q, k, layer, head), not {type(custom).__name__}",
                         params="custom")
    out = {}
    for name, fn in custom.items():
        if not isinstance(name, str) or not name.strip() or "," in name:
            raise InputError(f"custom: a name must be a non-empty string without commas, not {name!r:.30}",
                             params="custom")
        if name in NAMES or name.startswith(("scale:", "anti-rank:", "sym-rank:")):
            raise InputError(f"custom: {name!r} is a built-in intervention's name; choose another", params="custom")
        if not callable(fn):
            raise InputError(f"custom: {name!r} must be a function f(scores, q, k, layer, head) -> scores, not "
                             f"{type(fn).__name__}", params="custom")
        out[name.strip()] = fn
    return out


@contextmanager
def custom_kinds(custom: Mapping[str, ScoreFunction]) -> Iterator[None]:
    """Within the block, the names of ``custom`` are score interventions (their functions called per head)."""
    before = dict(_CUSTOM)
    _CUSTOM.update(custom)
    try:
        yield
    finally:
        _CUSTOM.clear()
        _CUSTOM.update(before)
