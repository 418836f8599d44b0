"""Rotary position conventions per family and file format: which head dims rotate together, how fast.

Einstein legend: e head dim, p rotary pair, r rotated dims (2 p).

A rotary model rotates each pair ``(a_p, b_p)`` of a head's query and key coordinates by the angle
``position * inv_freq[p]``: ``x_a' = x_a cos - x_b sin``, ``x_b' = x_b cos + x_a sin`` (Hugging Face's
``rotate_half`` and GPT-J's ``rotate_every_two`` are both this, with different pairs; llama.cpp's
NORM and NEOX rope types likewise). :class:`RotaryLayout` holds the pairs, in the column order of
the factors a family spec returns, with their inverse frequencies; :func:`rotary_layout` reads it
from a model's config or GGUF metadata, never from its name:

* Hugging Face: pairs from the family (half-split ``(j, j + r/2)`` for the LLaMA line, GPT-NeoX,
  Phi, StableLM, Falcon, ModernBERT; adjacent ``(2j, 2j+1)`` for GPT-J and Cohere), rotated dims from
  ``partial_rotary_factor`` / ``rotary_pct`` / ``rotary_dim``, frequencies from ``rope_theta`` and the
  ``rope_scaling`` / ``rope_parameters`` type (linear here; llama3, yarn, longrope, dynamic through
  transformers' own ``ROPE_INIT_FUNCTIONS``; dynamic is scored at the trained length), per layer type
  where the config has two (Gemma 3, ModernBERT: sliding and full attention layers).
* GGUF: llama.cpp's rope type of the architecture (NORM: adjacent pairs, since the converter
  permuted the q/k rows of llama-family files; NEOX: half-split), ``rope.dimension_count``,
  ``rope.freq_base``, linear ``rope.scaling``, a ``rope_freqs`` tensor (llama3-style frequency
  factors); Gemma 3's sliding layers use llama.cpp's fixed local base 10000, one full layer in 6.

:func:`rotary_layout` returns None for a family whose positions are not a rotation of q and k
(learned / sinusoidal absolute positions, ALiBi and T5-style additive biases): the form is then the
same at every offset. Anything rotary that is not handled raises one UnsupportedError.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.errors import ConfigError, FormatError, UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from attnscope.sources.base import WeightSource

    from .base import StackInfo

HALF_SPLIT = "half-split"
ADJACENT = "adjacent"

#: Hugging Face model types whose rotary pairs are half-split (rotate_half)
HF_HALF_SPLIT = frozenset({
    "llama", "mobilellm", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
    "gemma3_text", "phi", "phi3", "stablelm", "starcoder2", "granite", "olmo", "olmo2", "gpt_neox", "falcon",
    "modernbert",
})  # fmt: skip
#: Hugging Face model types whose rotary pairs are adjacent (rotate_every_two / interleaved)
HF_ADJACENT = frozenset({"gptj", "cohere"})
#: model types whose transformers code applies ``sliding_window`` (when set) to every layer (no ``layer_types``)
HF_SLIDING_EVERY_LAYER = frozenset({"mistral", "mixtral", "phi3", "qwen3_moe"})
#: llama.cpp rope types (llama_model_rope_type) of the GGUF architectures attnscope reads
GGUF_ROPE = {
    **{a: ADJACENT for a in ("llama", "mistral3", "granite", "olmo", "internlm2", "command-r", "cohere2", "smollm3")},
    **{a: HALF_SPLIT for a in ("qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma", "gemma2", "gemma3", "phi2", "phi3",
                               "starcoder2", "olmo2", "stablelm", "exaone")},
    "gpt2": None,
}  # fmt: skip
#: transformers' rope types that only rescale frequencies (computed here); others go through transformers
_DEFAULT_TYPES = ("default", "linear")


@dataclass(frozen=True)
class RotaryLayout:
    """The rotary pairs of one layer's heads (every head of a layer shares them)."""

    e: int  # head dim
    a: np.ndarray  # [p] int, first coordinate of each pair (the one rotated by -sin of the other)
    b: np.ndarray  # [p] int, second coordinate
    inv_freq: np.ndarray  # [p] float64, radians per position
    pairing: str  # HALF_SPLIT | ADJACENT
    rope_type: str = "default"  # default, linear, dynamic, llama3, yarn, longrope
    #: transformers' attention factor (yarn, longrope): cos and sin are multiplied by it, so logits by its square
    scale: float = 1.0
    note: str = ""  # one line, e.g. "dynamic scaling: scored at the trained length"
    #: a causal sliding-window layer's window W: offsets >= W are masked, the form is never applied there
    window: int | None = None

    def __post_init__(self) -> None:
        used = np.concatenate([self.a, self.b])
        if len(set(used.tolist())) != used.size or (used.size and (used.min() < 0 or used.max() >= self.e)):
            raise ConfigError(f"rotary pairs must be distinct head dims below {self.e}")
        if self.inv_freq.shape != self.a.shape:
            raise ConfigError("one inverse frequency per rotary pair")

    @property
    def n_pairs(self) -> int:
        return int(self.a.size)

    @property
    def unrotated(self) -> np.ndarray:
        """[e - 2p] head dims that no pair rotates (partial rotary): offset-independent."""
        return np.setdiff1d(np.arange(self.e), np.concatenate([self.a, self.b]))

    def tiled(self, n: int) -> "RotaryLayout":
        """The same pairs in each of ``n`` stacked heads (inner dim n*e): a layer's concatenated factors."""
        shift = (np.arange(n) * self.e)[:, None]
        return RotaryLayout(self.e * n, (self.a[None] + shift).ravel(), (self.b[None] + shift).ravel(),
                            np.tile(self.inv_freq, n), self.pairing, self.rope_type, self.scale, self.note,
                            self.window)  # fmt: skip


def make_layout(e: int, rotated: int, inv_freq: np.ndarray, pairing: str, **kw: Any) -> RotaryLayout:
    """Pairs over the first ``rotated`` dims of a head of ``e``: half-split ``(j, j + r/2)`` or adjacent ``(2j, 2j+1)``."""
    if rotated % 2 or not 0 < rotated <= e:
        raise ConfigError(f"rotary dims must be even and in 1..{e} (the head dim), not {rotated}")
    p = rotated // 2
    j = np.arange(p)
    a, b = (j, j + p) if pairing == HALF_SPLIT else (2 * j, 2 * j + 1)
    inv = np.asarray(inv_freq, dtype=np.float64).reshape(-1)
    if inv.size != p:
        raise ConfigError(f"{inv.size} rotary frequencies for {p} pairs")
    return RotaryLayout(e, a, b, inv, pairing, **kw)


def default_inv_freq(base: float, rotated: int) -> np.ndarray:
    """``base^(-2j / r)`` for j < r/2: the original RoPE frequencies (float64)."""
    if not np.isfinite(base) or base <= 1:
        raise ConfigError(f"rope base (rope_theta) must be a number > 1, not {base}")
    return base ** (-np.arange(0, rotated, 2, dtype=np.float64) / rotated)


# ---- Hugging Face configs ----------------------------------------------------------------------


def _rope_params(config: dict[str, Any], layer_type: str | None) -> dict[str, Any]:
    """The rope parameters of one layer type, from ``rope_parameters`` (transformers 5) or the 4.x keys."""
    rp = config.get("rope_parameters")
    if isinstance(rp, dict) and layer_type is not None and isinstance(rp.get(layer_type), dict):
        return dict(rp[layer_type])
    if isinstance(rp, dict) and "rope_theta" in rp:
        return dict(rp)
    out = dict(config.get("rope_scaling") or {})
    if layer_type == "sliding_attention" and config.get("rope_local_base_freq") is not None:  # Gemma 3, 4.x
        return {"rope_type": "default", "rope_theta": config["rope_local_base_freq"]}
    if layer_type == "sliding_attention" and config.get("local_rope_theta") is not None:  # ModernBERT, 4.x
        return {"rope_type": "default", "rope_theta": config["local_rope_theta"]}
    theta = config.get("rope_theta", config.get("global_rope_theta", config.get("rotary_emb_base", 10000.0)))
    out.setdefault("rope_theta", theta)
    return out


def _rotated_dims(config: dict[str, Any], params: dict[str, Any], e: int) -> int:
    mt = config.get("model_type")
    if mt == "gptj":
        return int(config.get("rotary_dim") or e)
    frac = params.get("partial_rotary_factor", config.get("partial_rotary_factor", config.get("rotary_pct", 1.0)))
    return int(e * float(frac))


def _layer_type(config: dict[str, Any], layer: int) -> str | None:
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        if layer >= len(types):
            raise ConfigError(f"{config.get('model_type')} config: layer_types lists {len(types)} layers, not {layer + 1}")
        return str(types[layer])
    return None


def _transformers_inv_freq(config: dict[str, Any], rope_type: str, layer_type: str | None) -> tuple[np.ndarray, float]:
    """transformers' own inverse frequencies for a scaled rope type (its ``ROPE_INIT_FUNCTIONS``)."""
    try:
        import transformers
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError:
        raise UnsupportedError(f"rope type {rope_type!r} needs transformers installed to compute its frequencies") from None
    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise UnsupportedError(f"rope type {rope_type!r} is not known to the installed transformers")
    cfg = {k: v for k, v in config.items() if k not in ("model_type", "gguf_metadata")}
    if int(transformers.__version__.split(".")[0]) < 5 and not cfg.get("rope_scaling"):
        # transformers 4.x reads rope_scaling and rope_theta; a 5.x-style config holds rope_parameters
        params = _rope_params(config, layer_type)
        cfg["rope_theta"] = params.get("rope_theta", cfg.get("rope_theta"))
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        if rope_type == "longrope":  # 4.x validates exactly these three keys; the length is a config key there
            cfg.setdefault("original_max_position_embeddings", scaling.get("original_max_position_embeddings"))
            scaling = {"type": "longrope", "short_factor": scaling.get("short_factor"),
                       "long_factor": scaling.get("long_factor")}
        cfg["rope_scaling"] = {**scaling, "rope_type": rope_type} if rope_type != "longrope" else scaling
    hf = transformers.AutoConfig.for_model(config["model_type"], **cfg)
    fn = ROPE_INIT_FUNCTIONS[rope_type]
    try:
        inv, factor = fn(hf, None, layer_type=layer_type) if layer_type else fn(hf, None)
    except TypeError:  # transformers 4.x: no layer_type argument
        inv, factor = fn(hf, None)
    return np.asarray(inv.double().numpy()), float(factor)


def hf_layout(config: dict[str, Any], e: int, layer: int) -> RotaryLayout:
    """The rotary layout of ``layer`` of a Hugging Face rotary model (see the module docstring)."""
    mt = str(config.get("model_type"))
    pairing = ADJACENT if mt in HF_ADJACENT else HALF_SPLIT
    layer_type = _layer_type(config, layer)
    params = _rope_params(config, layer_type)
    rope_type = str(params.get("rope_type") or params.get("type") or "default")
    rotated = _rotated_dims(config, params, e)
    note, scale = "", 1.0
    if rope_type == "mrope" or "mrope_section" in params or "mrope_section" in config:
        raise UnsupportedError(f"{mt}: multimodal rotary positions (M-RoPE) are not handled by --offsets")
    if rope_type in _DEFAULT_TYPES:
        inv = default_inv_freq(float(params.get("rope_theta", 10000.0)), rotated)
        if rope_type == "linear":
            inv = inv / float(params["factor"])
    else:
        inv, scale = _transformers_inv_freq(config, rope_type, layer_type)
        if rope_type == "dynamic":
            note = "dynamic NTK scaling: scored at the trained length (the unscaled frequencies)"
        elif rope_type == "longrope":
            note = ("longrope: scored with its short factors (sequences up to original_max_position_embeddings; "
                    "longer sequences use the long factors)")
        if inv.size != rotated // 2:
            raise UnsupportedError(f"{mt}: rope type {rope_type!r} gave {inv.size} frequencies for {rotated // 2} pairs")
    if layer_type is not None and not note:
        note = f"layer type {layer_type}"
    return make_layout(e, rotated, inv, pairing, rope_type=rope_type, scale=scale, note=note)


# ---- GGUF metadata -----------------------------------------------------------------------------

#: llama.cpp's fixed values for Gemma 3 (llama-model.cpp): sliding layers' base, one full layer per 6
GEMMA3_LOCAL_BASE = 10000.0
GEMMA3_PATTERN = 6


def gguf_layout(config: dict[str, Any], e: int, layer: int, source: "WeightSource | None") -> RotaryLayout | None:
    """The rotary layout of ``layer`` of a GGUF file, from llama.cpp's rope type and the file's metadata."""
    arch = str(config.get("architecture"))
    if arch not in GGUF_ROPE:
        raise UnsupportedError(f"GGUF arch {arch!r}: its llama.cpp rope type is not known to attnscope, so --offsets "
                               "cannot be computed")
    pairing = GGUF_ROPE[arch]
    if pairing is None:
        return None
    meta = config.get("gguf_metadata") or {}
    stated = meta.get(f"{arch}.rope.dimension_count")
    rotated = e if stated is None else stated
    if isinstance(rotated, bool) or not isinstance(rotated, (int, np.integer)) or not 0 < rotated <= e or rotated % 2:
        raise FormatError(f"{arch}.rope.dimension_count is {stated!r}: the rotated dimensions of a head are an even "
                         f"number from 2 to the head dimension {e}")
    rotated = int(rotated)
    base = float(meta.get(f"{arch}.rope.freq_base") or 10000.0)
    stype = str(meta.get(f"{arch}.rope.scaling.type") or "none")
    factor = float(meta.get(f"{arch}.rope.scaling.factor") or 1.0)
    # llama.cpp: Gemma 3 files with a sliding window have 5 sliding layers then 1 full layer, repeated
    sliding = (arch == "gemma3" and bool(meta.get(f"{arch}.attention.sliding_window"))
               and layer % GEMMA3_PATTERN < GEMMA3_PATTERN - 1)  # fmt: skip
    note = ""
    if sliding:
        base, stype, note = GEMMA3_LOCAL_BASE, "none", "sliding layer (llama.cpp: local base 10000)"
    inv = default_inv_freq(base, rotated)
    if stype == "linear" and factor != 1.0:
        inv = inv / factor
    elif stype not in ("none", "linear"):
        raise UnsupportedError(f"{source.name if source else arch}: GGUF rope scaling {stype!r} is not handled by --offsets "
                               "(linear and none are)")
    rope_type = "linear" if stype == "linear" and factor != 1.0 else "default"
    if source is not None and source.has("rope_freqs.weight") and not sliding:
        ff = np.asarray(source.get("rope_freqs.weight").double().numpy()).reshape(-1)
        if ff.size != inv.size or not np.all(np.isfinite(ff)) or np.any(ff <= 0):
            raise FormatError(f"{source.name}: rope_freqs.weight has {ff.size} factors for {inv.size} pairs")
        inv, rope_type = inv / ff, "llama3"  # llama.cpp divides each pair's frequency by its factor
    window = int(meta.get(f"{arch}.attention.sliding_window") or 0) if sliding else 0
    return make_layout(e, rotated, inv, pairing, rope_type=rope_type, note=note, window=window or None)


# ---- the entry point ---------------------------------------------------------------------------

#: families whose position information is not a rotation of q and k (one line says so)
NOT_ROTARY_NOTE = "{stack} stack: positions are not a rotation of q and k ({how}); the form is the same at every offset"


def rotary_layout(config: dict[str, Any], info: "StackInfo", layer: int,
                  source: "WeightSource | None" = None) -> RotaryLayout | None:  # fmt: skip
    """The rotary layout of one layer of one stack, or None when the model has no rotary positions."""
    mt = str(config.get("model_type"))
    e = info.d_head
    if mt.startswith("gguf:"):
        return gguf_layout(config, e, layer, source)
    if mt == "attnscope":
        if config.get("pos") != "rotary":
            return None
        return make_layout(e, e, default_inv_freq(10000.0, e), HALF_SPLIT)
    if mt == "falcon" and config.get("alibi"):
        return None
    if mt in HF_HALF_SPLIT or mt in HF_ADJACENT:
        layout = hf_layout(config, e, layer)
        window = config.get("sliding_window")
        sliding = _layer_type(config, layer) == "sliding_attention" or (
            mt in HF_SLIDING_EVERY_LAYER and config.get("layer_types") is None)
        if info.stack == "decoder" and sliding and window:
            layout = dataclasses.replace(layout, window=int(window))  # transformers masks keys >= W tokens back
        return layout
    if mt.startswith(("ct2:", "onnx:", "lens:")):
        raise UnsupportedError(f"{mt}: attnscope does not read how this format encodes positions (rotary or not), "
                               "so offsets and frequencies are not available for it")
    rotary_keys = [k for k in ("rope_theta", "rope_parameters", "rotary_dim", "rotary_pct", "rope_scaling") if k in config]
    if rotary_keys:  # a family attnscope reads but whose rotary convention it does not know: never guess
        raise UnsupportedError(f"{mt}: its config has {rotary_keys[0]} but attnscope does not know this family's "
                               "rotary pairs; offsets and frequencies are not available for it")
    return None


def position_kind(config: dict[str, Any]) -> str:
    """How a non-rotary family encodes positions, for the one-line note."""
    mt = str(config.get("model_type"))
    if mt == "bloom" or (mt == "falcon" and config.get("alibi")):
        return "ALiBi, an additive bias outside W_qk"
    if mt in ("t5", "mt5", "umt5") or "relative_attention_num_buckets" in config:
        return "a relative bias added to the logits, outside W_qk"
    if mt == "attnscope":
        return f"{config.get('pos', 'learned')} absolute positions"
    return "absolute positions, relative terms added outside W_qk, or none"
