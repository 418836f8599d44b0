"""Per-head sparse attention patterns: what each head may attend to.

Einstein legend: h head, i query position, j key position, L sequence length.

A head's pattern is a UNION of components, each optional:

* ``window=w``      local band, key j allowed for query i when ``abs(i - j) <= w``
* ``stride=s``      strided keys, ``j % s == 0``
* ``anchors=(r,..)`` fractional anchors, ``j = floor(r * (L - 1))`` for r in [0, 1] (length-dependent)
* ``positions=(p,..)`` absolute key positions
* ``dense=True``    every key

For decoders the union is always AND-ed with causality (``j <= i``). Masks have ONE polarity
everywhere in attnscope: **True = may attend**. Strides, anchors and positions form a key set that
is the same for every query (the "shared keys"); the kernel in :mod:`attnscope.sparse.attention`
gathers that set once plus a local band, so its cost follows the pattern's density.

Pattern specs load from a preset name (``"byte-sparse-8h"``, ``"dense"``, ``"local:W"``, ``"strided:W:S"``),
a dict ``{"heads": [{...}, ...]}`` or ``{"all": {...}}``, or a YAML/JSON file holding such a dict
(:func:`load_pattern`). ``attnscope heads derive`` writes files in this format.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from attnscope.errors import ConfigError, InputError, excerpt

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: The 11 fractional anchors of heads 6-7 of the published dense-vs-sparse byte-level models (enwik8, 8 heads):
#: key j = floor(r (L - 1)) for each r, golden-ratio points included; see docs/heads.md.
BYTE_SPARSE_ANCHORS: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.382, 0.5, 0.618, 0.7, 0.8, 0.9, 1.0)

_FIELDS = ("window", "stride", "anchors", "positions", "dense")
#: the largest window, stride or key position a pattern may give: far beyond any sequence, and small enough that
#: counts over L x L entries never overflow int64 (2**63 - 1 gave a negative density)
MAX_PATTERN_SIZE = 1 << 31


def _sequence(value: Any, name: str) -> tuple[Any, ...]:
    """A pattern's list field as a tuple; a string or a single number is refused (a string would be read
    character by character)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"pattern {name} must be a list, not {excerpt(value)}")
    return tuple(value)


def _number(value: Any, name: str, kind: type) -> Any:
    """``value`` as an int (integral numbers only: 8.0 is 8, 8.5 is refused) or a finite float; never a bool or a string."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if ok and math.isfinite(value) and (kind is float or float(value).is_integer()):
        return kind(value)
    what = ("integers" if kind is int else "numbers") if name.endswith("s") else "an integer"
    raise ConfigError(f"pattern {name} must be {what}, not {excerpt(value)}")


def _check_length(L: Any) -> int:
    """The sequence length L of a mask or density: an integer >= 1 (ConfigError naming L otherwise)."""
    if isinstance(L, (bool, np.bool_)) or not isinstance(L, (int, np.integer)) or L < 1:
        raise ConfigError(f"the sequence length L must be an integer >= 1, not {excerpt(L)}", params="L")
    if L > MAX_PATTERN_SIZE:
        raise ConfigError(f"the sequence length L must be at most {MAX_PATTERN_SIZE:,}, not {L}", params="L")
    return int(L)


@dataclass(frozen=True)
class HeadPattern:
    """The keys one head may attend to: the union of its components (see module docstring)."""

    window: int | None = None
    stride: int | None = None
    anchors: tuple[float, ...] = ()
    positions: tuple[int, ...] = ()
    dense: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "anchors", tuple(_number(r, "anchors", float) for r in _sequence(self.anchors, "anchors")))
        object.__setattr__(self, "positions", tuple(_number(p, "positions", int) for p in _sequence(self.positions, "positions")))
        if self.window is not None:
            object.__setattr__(self, "window", _number(self.window, "window", int))
        if self.stride is not None:
            object.__setattr__(self, "stride", _number(self.stride, "stride", int))
        if not isinstance(self.dense, (bool, np.bool_)):
            raise ConfigError(f"pattern dense must be true or false, not {excerpt(self.dense)}")
        if self.window is not None and self.window < 0:
            raise ConfigError(f"pattern window must be an integer >= 0, not {excerpt(self.window)}")
        if self.stride is not None and self.stride < 1:
            raise ConfigError(f"pattern stride must be an integer >= 1, not {excerpt(self.stride)}")
        if any(not (0.0 <= r <= 1.0) for r in self.anchors):
            raise ConfigError(f"pattern anchors are fractions in [0, 1], got {excerpt(list(self.anchors))}")
        if any(p < 0 for p in self.positions):
            raise ConfigError(f"pattern positions must be >= 0, got {excerpt(list(self.positions))}")
        for name, values in (("window", [self.window]), ("stride", [self.stride]), ("positions", self.positions)):
            big = [v for v in values if v is not None and v > MAX_PATTERN_SIZE]
            if big:
                raise ConfigError(f"pattern {name} {excerpt(big[0], 30)} is beyond any sequence length (at most "
                                  f"{MAX_PATTERN_SIZE:,}); use dense: true for every key")
        if not (self.dense or self.window is not None or self.stride or self.anchors or self.positions):
            raise ConfigError("a head pattern needs at least one of window, stride, anchors, positions, dense")

    # ---- pieces used by the kernel -------------------------------------------------------------
    def shared_keys(self, L: int) -> np.ndarray:
        """Sorted key positions allowed for every query (strides, anchors, positions) at length L."""
        keys: set[int] = set()
        if self.stride:
            keys.update(range(0, L, self.stride))
        keys.update(int(math.floor(r * (L - 1))) for r in self.anchors)
        keys.update(p for p in self.positions if p < L)
        return np.array(sorted(keys), dtype=np.int64)

    def kept_count(self, L: int, causal: bool) -> int:
        """How many [i, j] entries :meth:`allowed` keeps, counted per row without forming the L x L mask."""
        L = _check_length(L)
        i = np.arange(L)
        if self.dense:
            return int(L * (L + 1) // 2 if causal else L * L)
        hi = i if causal else np.minimum(i + (self.window or 0), L - 1)
        if self.window is None:
            band = np.zeros(L, dtype=np.int64)
        else:
            band = hi - np.maximum(i - self.window, 0) + 1
        keys = self.shared_keys(L)
        shared = np.searchsorted(keys, i, side="right") if causal else np.full(L, len(keys))
        if self.window is not None:  # shared keys inside the band are counted there
            shared = shared - (np.searchsorted(keys, hi, side="right") - np.searchsorted(keys, i - self.window, side="left"))
        return int((band + shared).sum())

    def allowed(self, L: int, causal: bool) -> np.ndarray:
        """Boolean [i, j] array, True = query i may attend to key j (slow and explicit: for tests/masks)."""
        L = _check_length(L)
        i = np.arange(L)[:, None]
        j = np.arange(L)[None, :]
        if self.dense:
            m = np.ones((L, L), dtype=bool)
        else:
            m = np.zeros((L, L), dtype=bool)
            if self.window is not None:
                m |= np.abs(i - j) <= self.window
            m[:, self.shared_keys(L)] = True
        if causal:
            m &= j <= i
        return m

    # ---- (de)serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.dense:
            out["dense"] = True
        if self.window is not None:
            out["window"] = int(self.window)
        if self.stride:
            out["stride"] = int(self.stride)
        if self.anchors:
            out["anchors"] = list(self.anchors)
        if self.positions:
            out["positions"] = list(self.positions)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HeadPattern":
        if not isinstance(d, Mapping):
            raise ConfigError(f"a head pattern must be a mapping with keys {', '.join(_FIELDS)}, not {excerpt(d)}")
        unknown = set(d) - set(_FIELDS)
        if unknown:
            raise ConfigError(f"unknown head pattern key(s) {excerpt(sorted(map(str, unknown)))}; allowed: {', '.join(_FIELDS)}")
        return cls(
            window=d.get("window"),
            stride=d.get("stride"),
            anchors=d.get("anchors") or (),
            positions=d.get("positions") or (),
            dense=d.get("dense", False),
        )

    def describe(self) -> str:
        if self.dense:
            return "dense"
        parts = []
        if self.window is not None:
            parts.append(f"local({self.window})")
        if self.stride:
            parts.append(f"stride({self.stride})")
        if self.anchors:
            n = len(self.anchors)
            parts.append(f"{n} anchor{'s' if n != 1 else ''}")
        if self.positions:
            n = len(self.positions)
            keys = ", ".join(map(str, self.positions)) if n <= 4 else f"{n} positions"
            parts.append(f"key{'s' if n != 1 else ''} {keys}")
        return " | ".join(parts)


@dataclass(frozen=True)
class Pattern:
    """One :class:`HeadPattern` per head of an attention layer (the same pattern in every layer)."""

    heads: tuple[HeadPattern, ...]
    name: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(self.heads))
        if not self.heads:
            raise ConfigError("a sparse pattern needs at least one head")

    @property
    def n_heads(self) -> int:
        return len(self.heads)

    def mask(self, L: int, causal: bool) -> np.ndarray:
        """Boolean [h, L, L] numpy mask, True = may attend."""
        return np.stack([hp.allowed(L, causal) for hp in self.heads])

    def density(self, L: int, causal: bool) -> float:
        """Fraction of the visible entries (causal: lower triangle incl. diagonal) that are kept."""
        L = _check_length(L)
        kept = sum(hp.kept_count(L, causal) for hp in self.heads)
        visible = self.n_heads * (L * (L + 1) // 2 if causal else L * L)
        return float(kept / visible)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"heads": [hp.to_dict() for hp in self.heads]}
        if self.name:
            out["name"] = self.name
        return out

    def dumps(self, path: str | Path) -> str:
        """The text :meth:`save` writes to ``path``: YAML (.yaml/.yml) or JSON (.json)."""
        path = Path(path)
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            return yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path.suffix.lower() == ".json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        raise InputError(f"cannot write pattern {path}: use .yaml, .yml or .json")

    def save(self, path: str | Path) -> Path:
        """Write the spec as YAML (.yaml/.yml) or JSON (.json), atomically."""
        from attnscope.tables import atomic_write_text

        return atomic_write_text(path, self.dumps(path))

    def describe(self) -> list[str]:
        return [f"head {h}: {hp.describe()}" for h, hp in enumerate(self.heads)]


def dense_mask(pattern: "Pattern | str | Mapping", L: int, causal: bool, n_heads: int | None = None) -> "torch.Tensor":
    """Boolean mask [h, L, L] as a torch tensor, True = may attend (the dense reference's mask)."""
    import torch

    return torch.from_numpy(load_pattern(pattern, n_heads=n_heads).mask(L, causal))


# ---- presets and loading ------------------------------------------------------------------------
def _byte_sparse_8h() -> Pattern:
    local = lambda w: HeadPattern(window=w)  # noqa: E731
    return Pattern(
        heads=(
            local(8),
            local(16),
            local(16),
            HeadPattern(window=32, stride=8),
            HeadPattern(window=32, stride=8),
            HeadPattern(window=32, stride=8),
            HeadPattern(anchors=BYTE_SPARSE_ANCHORS, stride=16),
            HeadPattern(anchors=BYTE_SPARSE_ANCHORS, stride=16),
        ),
        name="byte-sparse-8h",
    )


def preset_names() -> list[str]:
    return ["byte-sparse-8h", "dense", "local:W", "strided:W:S"]


def _preset(name: str, n_heads: int | None) -> Pattern | None:
    key = name.strip().lower()
    if key in ("byte-sparse-8h", "seed002"):  # "seed002": the name checkpoints written before 0.2 carry
        return _byte_sparse_8h()
    parts = key.split(":")
    try:
        if parts[0] == "dense" and len(parts) == 1:
            hp = HeadPattern(dense=True)
        elif parts[0] == "local" and len(parts) == 2:
            hp = HeadPattern(window=int(parts[1]))
        elif parts[0] == "strided" and len(parts) == 3:
            hp = HeadPattern(window=int(parts[1]), stride=int(parts[2]))
        else:
            return None
    except ValueError:
        raise ConfigError(f"bad pattern preset {name!r}: expected one of {', '.join(preset_names())}") from None
    if n_heads is None:
        raise ConfigError(f"pattern preset {name!r} needs the number of heads")
    return Pattern(heads=(hp,) * n_heads, name=key)


def _from_mapping(d: Mapping[str, Any], n_heads: int | None) -> Pattern:
    if "heads" in d:
        heads = d["heads"]
        if not isinstance(heads, (list, tuple)):
            raise ConfigError("pattern 'heads' must be a list of head patterns")
        return Pattern(heads=tuple(HeadPattern.from_dict(h) for h in heads), name=d.get("name"))
    if "all" in d:
        if n_heads is None:
            raise ConfigError("a pattern given for 'all' heads needs the number of heads")
        return Pattern(heads=(HeadPattern.from_dict(d["all"]),) * n_heads, name=d.get("name"))
    raise ConfigError("a pattern spec needs a 'heads' list (one entry per head) or an 'all' entry")


def load_pattern(spec: "Pattern | HeadPattern | str | Path | Mapping | Iterable", n_heads: int | None = None) -> Pattern:
    """A :class:`Pattern` from a Pattern, a HeadPattern (every head), preset name, dict, list of head dicts, or
    YAML/JSON path.

    When ``n_heads`` is given, the pattern must have exactly that many heads (one clear error if not).
    """
    if isinstance(spec, Pattern):
        pat = spec
    elif isinstance(spec, HeadPattern):  # one head's pattern for every head, as {"all": {...}}
        if n_heads is None:
            raise ConfigError("a single HeadPattern for all heads needs the number of heads")
        pat = Pattern(heads=(spec,) * n_heads)
    elif isinstance(spec, Mapping):
        pat = _from_mapping(spec, n_heads)
    elif isinstance(spec, (str, Path)):
        text = str(spec)
        pat = _preset(text, n_heads) if isinstance(spec, str) else None
        if pat is None:
            path = Path(text)
            if not path.is_file():
                raise InputError(
                    f"unknown sparse pattern {text!r}: not a preset ({', '.join(preset_names())}) nor a file"
                )
            from attnscope.tables import read_mapping

            pat = _from_mapping(read_mapping(path, "pattern file"), n_heads)
    elif isinstance(spec, (list, tuple)):
        pat = Pattern(heads=tuple(h if isinstance(h, HeadPattern) else HeadPattern.from_dict(h) for h in spec))
    else:
        raise InputError(f"a sparse pattern is a Pattern, HeadPattern, preset name, dict, list of head dicts or a "
                         f"YAML/JSON path; not {type(spec).__name__}", params="pattern")
    if n_heads is not None and pat.n_heads != n_heads:
        raise ConfigError(f"sparse pattern {pat.name or ''} has {pat.n_heads} heads but the model has {n_heads}".replace("  ", " "))
    return pat
