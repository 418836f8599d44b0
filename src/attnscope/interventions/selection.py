"""What a run intervenes on, checked before any model loads: the interventions' names (:func:`check_kinds`),
the heads (``"3.1,10.4"``: :func:`parse_heads`, :func:`check_head_pairs`, against the model's config:
:func:`head_grid`, :func:`check_heads_in`), the other options' types and ranges, and the atlas a run joins.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attnscope.errors import ArgumentTypeError, InputError, check_type

from .kinds import NAMES, check_kind, order
from .subject import Subject

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def check_kinds(kinds: str | Sequence[str]) -> tuple[str, ...]:
    """``"sym,anti,scale:0.5"`` or a sequence of names -> validated tuple, each once, in the tables' order
    (:func:`.kinds.order`; a custom name must be registered first: :func:`.kinds.custom_kinds`)."""
    if isinstance(kinds, str):
        kinds = [k.strip() for k in kinds.split(",") if k.strip()]
    check_type(kinds, (list, tuple), "interventions", f"a list of {', '.join(NAMES)} or scale:A")
    if not kinds:
        raise InputError(f"interventions must be among {', '.join(NAMES)} or scale:A, not nothing",
                         params="interventions")
    return tuple(sorted(dict.fromkeys(check_kind(k) for k in kinds), key=order))


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


def _check_heads(heads: Sequence[tuple[int, int]] | None, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    chosen = check_head_pairs(heads)
    if chosen is None:
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]
    check_heads_in(chosen, (n_layers, n_heads))
    return chosen


def check_exact(exact: Any) -> "str | int":
    """``exact`` of :func:`attnscope.interventions.intervene`: ``"auto"``, ``"all"`` or a whole number >= 0 of heads
    (a string of digits, as the command line gives it, is that number)."""
    if isinstance(exact, str) and exact.strip().isascii() and exact.strip().isdigit():
        exact = int(exact.strip())
    if isinstance(exact, str):
        if exact.strip() in ("auto", "all"):
            return exact.strip()
        raise InputError(f"exact must be auto, all or a number of heads (0: the screen alone), not {exact!r:.40}",
                         params="exact")
    if isinstance(exact, (bool, np.bool_)) or not isinstance(exact, (int, np.integer)):
        raise ArgumentTypeError(f"exact must be auto, all or a number of heads, not {type(exact).__name__} "
                                f"{exact!r:.30}", params="exact")
    if exact < 0:
        raise InputError(f"exact must be at least 0 heads, not {exact}", params="exact")
    return int(exact)
