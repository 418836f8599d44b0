"""The 1-bit self-attention model as data: configuration, weights, presets and validation.

Owns :class:`DynamicsConfig` (M features, P positional bits, C = 2^P, eps, gamma, beta_o, weights,
initial token) and the ways to build one: a named preset (``presets/*.yaml``), a YAML/TOML file,
random weights from a seed, and ``key=value`` overrides. Weights are kept in one canonical form:
``columns[a]`` [M, K] +-1 signs of the K distinct semantic column groups, ``counts`` [K] how many
semantic bits each group holds, ``positional[a]`` [M, P]. The paper's construction (rows constant on
equal segments) is K = n_seg groups of ``segment_length`` bits; full +-1 matrices are K = N_se groups
of one bit each.

Legend: a in (o, v, q, k) matrix, b/c feature rows (M), k semantic column group (K), P positional bits.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from attnscope.errors import ConfigError, InputError, excerpt

MATRICES = ("o", "v", "q", "k")
PRESET_DIR = Path(__file__).parent / "presets"
SWEEP_PARAMS = ("beta_o", "gamma", "eps")


def positional_code(t: int | np.ndarray, P: int) -> np.ndarray:
    """Binary code of (t mod 2^P), most significant bit first, bit 0 -> -1, bit 1 -> +1. [..., P]."""
    t = np.asarray(t) % (2**P)
    bits = (t[..., None] >> np.arange(P - 1, -1, -1)) & 1
    return (2 * bits - 1).astype(np.float64)


@dataclass(frozen=True)
class DynamicsConfig:
    """One network: sizes, parameters and +-1 weights (see module docstring for the weight layout)."""

    M: int
    P: int
    eps: float
    gamma: float
    beta_o: float
    columns: Mapping[str, np.ndarray]  # a -> [M, K] semantic column signs
    counts: np.ndarray  # [K] bits per column group (int)
    positional: Mapping[str, np.ndarray]  # a -> [M, P]
    x0: Mapping[str, Any] = field(default_factory=lambda: {"matrix": "o", "row": 0})
    name: str = "custom"

    @property
    def C(self) -> int:
        """Context length C = 2^P."""
        return 2**self.P

    @property
    def K(self) -> int:
        return int(self.counts.shape[0])

    @property
    def N_se(self) -> int:
        return int(self.counts.sum())

    @property
    def N(self) -> int:
        return self.N_se + self.P

    @property
    def g(self) -> float:
        """Attention inverse temperature g = gamma / sqrt(M)."""
        return self.gamma / math.sqrt(self.M)

    def replace(self, **changes: Any) -> "DynamicsConfig":
        """A copy with some fields changed (validated again)."""
        return validate(dataclasses.replace(self, **changes))

    def full_matrices(self) -> dict[str, np.ndarray]:
        """Expanded +-1 matrices W^a [M, N_se + P] (semantic columns first, then positional)."""
        rep = np.repeat(np.arange(self.K), self.counts)
        return {a: np.concatenate([self.columns[a][:, rep], self.positional[a]], axis=1) for a in MATRICES}

    def x0_columns(self) -> np.ndarray:
        """The initial token on the K semantic column groups [K] (+-1)."""
        spec = dict(self.x0)
        if "token" in spec:
            return np.asarray(spec["token"], dtype=np.float64)
        return np.asarray(self.columns[spec["matrix"]][int(spec["row"])], dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (YAML/JSON/pickle friendly) from which :func:`from_dict` rebuilds this config."""
        return {
            "name": self.name, "features": self.M, "positional_bits": self.P, "eps": self.eps,
            "gamma": self.gamma, "beta_o": self.beta_o, "counts": self.counts.tolist(),
            "weights": {a: {"columns": self.columns[a].astype(int).tolist(),
                            "positional": self.positional[a].astype(int).tolist()} for a in MATRICES},
            "x0": {k: (np.asarray(v).tolist() if k == "token" else v) for k, v in dict(self.x0).items()},
        }


def _pm1(x: Any, what: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be a matrix of +1/-1 entries") from exc
    if arr.ndim != 2:
        raise ConfigError(f"{what} must be a 2-D matrix, got {arr.ndim}-D")
    if not np.all(np.isin(arr, (-1.0, 1.0))):
        raise ConfigError(f"{what} must contain only +1 and -1")
    if shape is not None and arr.shape != shape:
        raise ConfigError(f"{what} has shape {list(arr.shape)}, expected {list(shape)}")
    return arr


def _finite(value: Any, what: str, positive: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be a number, got {value!r}") from exc
    if not math.isfinite(v):
        raise ConfigError(f"{what} must be finite, got {value!r}")
    if positive and v < 0:
        raise ConfigError(f"{what} must be >= 0, got {v}")
    return v


def _int(value: Any, what: str, lo: int | None = None) -> int:
    """An integer option or config entry (bool, 1.5, 'three', nan rejected) >= ``lo``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float, np.floating, str)):
        raise ConfigError(f"{what} must be an integer, got {value!r}")
    try:
        v = float(value)
    except ValueError as exc:
        raise ConfigError(f"{what} must be an integer, got {value!r}") from exc
    if not math.isfinite(v) or v != int(v):
        raise ConfigError(f"{what} must be an integer, got {value!r}")
    if lo is not None and v < lo:
        raise ConfigError(f"{what} must be >= {lo}, got {int(v)}")
    if abs(v) >= 2**63:  # counts and seeds become int64 arrays
        raise ConfigError(f"{what} is too large (must fit in 64 bits), got {value!r}")
    return int(v)


def validate(cfg: DynamicsConfig) -> DynamicsConfig:
    """Check sizes and values; raise ConfigError with one line on the first problem."""
    if int(cfg.M) < 1:
        raise ConfigError(f"features M must be >= 1, got {cfg.M}")
    if int(cfg.P) < 0 or int(cfg.P) > 12:
        raise ConfigError(f"positional_bits P must be in 0..12, got {cfg.P}")
    _finite(cfg.eps, "eps")
    if not 0.0 <= float(cfg.eps) <= 1.0:
        raise ConfigError(f"eps must be in [0, 1], got {cfg.eps}")
    if cfg.P == 0 and float(cfg.eps) != 0.0:
        raise ConfigError("eps > 0 needs at least one positional bit (P >= 1)")
    _finite(cfg.gamma, "gamma")
    _finite(cfg.beta_o, "beta_o")
    counts = np.asarray(cfg.counts)
    if counts.ndim != 1 or counts.size == 0 or np.any(counts < 1):
        raise ConfigError("every semantic column group needs a count >= 1")
    K = counts.size
    for a in MATRICES:
        if a not in cfg.columns or a not in cfg.positional:
            raise ConfigError(f"weights for matrix {a!r} are missing (need o, v, q, k)")
        cols = np.asarray(cfg.columns[a])
        if cols.shape[0] != cfg.M:
            raise ConfigError(f"W^{a} has {cols.shape[0]} rows but M = {cfg.M} features")
        if cols.shape[1] != K:
            raise ConfigError(f"W^{a} has {cols.shape[1]} semantic columns, expected {K} like W^o")
        pe = np.asarray(cfg.positional[a])
        if pe.shape != (cfg.M, cfg.P):
            raise ConfigError(
                f"W^{a} positional part has shape {list(pe.shape)}, expected [M={cfg.M}, P={cfg.P}] "
                f"(context C = {cfg.C} = 2^P)")
    if not isinstance(cfg.x0, Mapping):
        raise ConfigError(f"x0 must be a mapping (matrix/row or token), got {cfg.x0!r}")
    x0 = dict(cfg.x0)
    if "token" in x0:
        try:
            tok = np.asarray(x0["token"], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ConfigError("x0 token must be a list of +1/-1 entries") from exc
        if tok.shape != (K,) or not np.all(np.isin(tok, (-1.0, 1.0))):
            raise ConfigError(f"x0 token must be {K} entries of +1/-1 (one per semantic column group)")
    else:
        if x0.get("matrix") not in MATRICES:
            raise ConfigError(f"x0 matrix must be one of {', '.join(MATRICES)}, got {x0.get('matrix')!r}")
        if not 0 <= _int(x0.get("row", 0), "x0 row") < cfg.M:
            raise ConfigError(f"x0 row must be in 0..{cfg.M - 1}, got {x0.get('row')}")
    return cfg


def from_dict(d: Mapping[str, Any]) -> DynamicsConfig:
    """Build a config from a parsed YAML/TOML mapping (segment, column-group or full-matrix weights)."""
    d = dict(d)
    unknown = set(d) - {"name", "features", "positional_bits", "segment_length", "eps", "gamma",
                        "beta_att", "scaling_att", "beta_o", "weights", "x0", "counts", "seed",
                        "segments"}
    if unknown:
        raise ConfigError(f"unknown config keys: {', '.join(sorted(unknown))}")
    if "weights" not in d and "seed" in d:
        base = random_config(_int(d.get("features", 3), "features", 1),
                             _int(d.get("positional_bits", 2), "positional_bits", 0),
                             n_segments=_int(d.get("segments", 3), "segments", 1),
                             segment_length=_int(d.get("segment_length", 33), "segment_length", 1),
                             seed=_int(d["seed"], "seed", 0))
        rest = {k: v for k, v in d.items() if k not in ("features", "positional_bits", "segments",
                                                          "segment_length", "seed", "weights")}
        return apply_overrides(base, rest) if rest else base
    if "features" not in d or "positional_bits" not in d or "weights" not in d:
        raise ConfigError("a dynamics config needs features, positional_bits and weights (or a seed)")
    M, P = _int(d["features"], "features", 1), _int(d["positional_bits"], "positional_bits", 0)
    if "gamma" in d:
        gamma = d["gamma"]
    elif "beta_att" in d:
        gamma = _finite(d["beta_att"], "beta_att") * _finite(d.get("scaling_att", 1.0), "scaling_att")
    else:
        raise ConfigError("a dynamics config needs gamma (or beta_att and scaling_att)")
    w = d["weights"]
    if not isinstance(w, Mapping) or set(w) != set(MATRICES):
        raise ConfigError("weights must have exactly the matrices o, v, q, k")
    columns, positional, kinds = {}, {}, set()
    for a in MATRICES:
        wa = w[a]
        if not isinstance(wa, Mapping):
            raise ConfigError(f"weights.{a} must be a mapping (segments/positional or full)")
        if "full" in wa:
            full = _pm1(wa["full"], f"weights.{a}.full")
            if full.shape[0] != M:
                raise ConfigError(f"W^{a} has {full.shape[0]} rows but M = {M} features")
            if full.shape[1] <= P:
                raise ConfigError(f"W^{a} has {full.shape[1]} columns, needs more than P = {P}")
            columns[a], positional[a] = full[:, : full.shape[1] - P], full[:, full.shape[1] - P:]
            kinds.add("full")
        else:
            key = "segments" if "segments" in wa else "columns"
            if key not in wa or "positional" not in wa:
                raise ConfigError(f"weights.{a} needs 'segments' and 'positional' (or 'full')")
            columns[a] = _pm1(wa[key], f"weights.{a}.{key}")
            positional[a] = _pm1(wa["positional"], f"weights.{a}.positional") if P else \
                np.zeros((columns[a].shape[0], 0))
            kinds.add(key)
    if len(kinds) != 1:
        raise ConfigError("use one weight form for all four matrices (segments or full)")
    K = columns["o"].shape[1]
    if "full" in kinds:
        counts = np.ones(K, dtype=np.int64)
    elif "counts" in d:
        raw = d["counts"] if isinstance(d["counts"], (list, tuple)) else [d["counts"]]
        counts = np.array([_int(c, "counts entry", 1) for c in raw], dtype=np.int64)
        if counts.shape != (K,):
            raise ConfigError(f"counts must have one entry per column group ({K})")
    else:
        seg = _int(d.get("segment_length", 1), "segment_length", 1)
        counts = np.full(K, seg, dtype=np.int64)
    cfg = DynamicsConfig(
        M=M, P=P, eps=_finite(d.get("eps", 0.0), "eps"), gamma=_finite(gamma, "gamma"),
        beta_o=_finite(d.get("beta_o", 1.0), "beta_o"), columns=columns, counts=counts,
        positional=positional, x0=d.get("x0") or {"matrix": "o", "row": 0},
        name=str(d.get("name", "custom")),
    )
    return validate(cfg)


def random_config(M: int = 3, P: int = 2, *, n_segments: int = 3, segment_length: int = 33,
                  seed: int = 0, eps: float = 0.02, gamma: float = 220.0, beta_o: float = 1.0
                  ) -> DynamicsConfig:
    """Random +-1 segment signs and positional columns drawn from ``seed`` (numpy default_rng)."""
    if M < 1 or n_segments < 1 or segment_length < 1:
        raise ConfigError("random weights need M, n_segments and segment_length >= 1")
    if seed < 0:
        raise ConfigError(f"the weights seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    columns = {a: rng.choice([-1.0, 1.0], size=(M, n_segments)) for a in MATRICES}
    positional = {a: rng.choice([-1.0, 1.0], size=(M, P)) for a in MATRICES}
    return validate(DynamicsConfig(
        M=M, P=P, eps=eps, gamma=gamma, beta_o=beta_o, columns=columns,
        counts=np.full(n_segments, segment_length, dtype=np.int64), positional=positional,
        name=f"random-seed{seed}"))


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset(name: str) -> DynamicsConfig:
    """A named preset from ``dynamics/presets/<name>.yaml`` (``paper``: the article's configuration)."""
    path = PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"unknown dynamics preset {name!r}; available: {', '.join(list_presets())}")
    return load_config(path)


def load_config(path: str | Path) -> DynamicsConfig:
    """Read a YAML (.yaml/.yml) or TOML (.toml) config file."""
    from attnscope.tables import read_mapping

    return from_dict(read_mapping(path, "config file"))


def _parse_value(text: str) -> Any:
    import yaml

    from attnscope.tables import _yaml_loader

    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader, aliases bounded
    except ConfigError as exc:
        raise ConfigError(f"override value {excerpt(text, 40)}: {exc}") from None
    except Exception:
        return text


def apply_overrides(cfg: DynamicsConfig, overrides: Mapping[str, Any] | list[str]) -> DynamicsConfig:
    """Set scalar fields (beta_o, gamma, eps, name, x0_row, x0_matrix) from a mapping or ``key=value`` strings."""
    if isinstance(overrides, list):
        pairs = {}
        for item in overrides:
            if "=" not in item:
                raise InputError(f"override {item!r} must look like key=value")
            k, v = item.split("=", 1)
            pairs[k.strip()] = _parse_value(v.strip())
        overrides = pairs
    changes: dict[str, Any] = {}
    x0 = dict(cfg.x0)
    for k, v in overrides.items():
        if k in ("beta_o", "gamma", "eps"):
            changes[k] = _finite(v, k)
        elif k == "beta_att":
            changes["gamma"] = _finite(v, k) * float(overrides.get("scaling_att", 100.0))
        elif k == "scaling_att":
            continue
        elif k == "name":
            changes[k] = str(v)
        elif k in ("x0_row", "x0.row"):
            x0 = {"matrix": x0.get("matrix", "o"), "row": _int(v, k, 0)}
        elif k in ("x0_matrix", "x0.matrix"):
            x0 = {"matrix": str(v), "row": _int(x0.get("row", 0), "x0 row", 0)}
        else:
            raise ConfigError(f"cannot override {k!r}; settable: beta_o, gamma, eps, name, x0_row, x0_matrix")
    changes["x0"] = x0
    return cfg.replace(**changes)


def resolve_config(preset: str | None = None, config: str | Path | None = None,
                   weights_seed: int | None = None, overrides: Mapping[str, Any] | None = None
                   ) -> DynamicsConfig:
    """The config the CLI asks for: a file, a preset (default ``paper``) or random weights, then overrides."""
    if sum(x is not None for x in (preset, config, weights_seed)) > 1:
        raise InputError("give only one of preset, config and weights_seed", params=("preset", "config", "weights_seed"))
    if config is not None:
        cfg = load_config(config)
    elif weights_seed is not None:
        cfg = random_config(seed=weights_seed)
    else:
        cfg = load_preset(preset or "paper")
    if overrides:
        cfg = apply_overrides(cfg, {k: v for k, v in overrides.items() if v is not None})
    return cfg
