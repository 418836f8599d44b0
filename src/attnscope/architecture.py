"""The configuration of attnscope's own Transformer: :class:`ModelConfig`, the presets, and the
``config.json`` form every reader finds (:func:`hf_config`).

It sits below both the trainer (:mod:`attnscope.training.model`, which builds the model from it) and
the weight sources (:mod:`attnscope.sources.loaded`, which reads a live model's config), so a source
never imports the trainer. No torch here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from attnscope.errors import ConfigError

MODEL_TYPE = "attnscope"
NORMS = ("post", "pre")
POSITIONS = ("learned", "sinusoidal", "rotary")


@dataclass
class ModelConfig:
    """Architecture of one model. ``vocab_size=None`` means: take it from the tokenizer."""

    n_layers: int = 4  # number of Transformer blocks
    n_heads: int = 4  # query heads per layer
    n_kv_heads: int | None = None  # key/value heads (GQA); None = n_heads
    d_model: int = 256  # residual stream width
    d_ff: int = 1024  # MLP hidden width
    vocab_size: int | None = None  # token vocabulary (None: the tokenizer's)
    max_seq_len: int = 512  # longest sequence (learned positions table size)
    causal: bool = False  # decoder (causal mask) or encoder (bidirectional)
    norm: str = "post"  # "post" (BERT) or "pre" (GPT-2) LayerNorm placement
    pos: str = "learned"  # "learned" | "sinusoidal" | "rotary"
    dropout: float = 0.1  # embeddings, attention probabilities, residual branches
    tie_embeddings: bool = True  # output projection = token embedding
    attn_pattern: str | None = None  # sparse-attention preset name or pattern file (attnscope.sparse), None = dense
    # the heads attn_pattern held when the model was made (config.json keeps them: a checkpoint never needs the file)
    attn_pattern_heads: list[dict[str, Any]] | None = None
    tie_qk: bool = False  # keep W_q = W_k for all of training (k_proj is the only parameter)
    bias: bool = True  # biases in linear layers

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> "ModelConfig":
        """Raise ConfigError (one line) for a configuration that makes no sense."""
        for name in ("n_layers", "n_heads", "n_kv_heads", "d_model", "d_ff", "max_seq_len"):
            val = getattr(self, name)
            if not isinstance(val, int) or val <= 0:
                raise ConfigError(f"{name} must be a positive integer, not {val!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {', '.join(NORMS)}, not {self.norm!r}", params="norm")
        if self.pos not in POSITIONS:
            raise ConfigError(f"pos must be one of {', '.join(POSITIONS)}, not {self.pos!r}", params="pos")
        if self.pos == "rotary" and self.d_head % 2:
            raise ConfigError(f"rotary positions need an even head dim, got {self.d_head}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), not {self.dropout!r}", params="dropout")
        if self.vocab_size is not None and (not isinstance(self.vocab_size, int) or self.vocab_size <= 0):
            raise ConfigError(f"vocab_size must be a positive integer, not {self.vocab_size!r}")
        if self.attn_pattern is not None:
            self.pattern()  # one-line error for a bad pattern
        return self

    def pattern(self) -> Any:
        """The sparse :class:`~attnscope.sparse.Pattern` (None: dense): the recorded heads where there are some,
        else what ``attn_pattern`` names now."""
        if self.attn_pattern is None:
            return None
        from attnscope.sparse.patterns import load_pattern

        if self.attn_pattern_heads is not None:
            if not isinstance(self.attn_pattern_heads, list):
                raise ConfigError(f"attn_pattern_heads must be a list of head patterns, not {self.attn_pattern_heads!r}")
            return load_pattern(self.attn_pattern_heads, n_heads=self.n_heads)
        return load_pattern(self.attn_pattern, n_heads=self.n_heads)

    def with_pattern_heads(self) -> "ModelConfig":
        """This config with ``attn_pattern_heads`` filled from ``attn_pattern`` as it reads now (dense: unchanged)."""
        if self.attn_pattern is not None and self.attn_pattern_heads is None:
            self.attn_pattern_heads = self.pattern().to_dict()["heads"]
        return self

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if out["attn_pattern_heads"] is None:  # dense (or not yet read): config.json as it always was
            del out["attn_pattern_heads"]
        out["d_head"] = self.d_head
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


#: presets: name -> ModelConfig fields (vocab None = from the tokenizer)
PRESETS: dict[str, dict[str, Any]] = {
    "bert-mini": dict(n_layers=4, n_heads=4, d_model=256, d_ff=1024, max_seq_len=512, norm="post"),
    "bert-base": dict(n_layers=12, n_heads=12, d_model=768, d_ff=3072, max_seq_len=512, norm="post"),
    "bert-large": dict(n_layers=24, n_heads=16, d_model=1024, d_ff=4096, max_seq_len=512, norm="post"),
    "byte-12l": dict(
        n_layers=12, n_heads=8, d_model=512, d_ff=2048, max_seq_len=1024, vocab_size=256, norm="pre", causal=True
    ),
}


def preset_config(name: str, **overrides: Any) -> ModelConfig:
    """A preset's config with overrides applied (``None`` overrides are ignored)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    kw = dict(PRESETS[name])
    kw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return ModelConfig(**kw).validate()
    except TypeError as exc:
        raise ConfigError(f"bad model option: {exc}") from None


def hf_config(config: ModelConfig, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """config.json content: our fields plus HF-style head-count keys so any reader finds them."""
    out = {"model_type": MODEL_TYPE, **config.to_dict()}
    out.update(
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads,
        hidden_size=config.d_model,
    )
    out.update(extra or {})
    return out
