"""The attnscope Transformer: one readable model file (nanoGPT-like), encoder or decoder.

Einstein legend: b batch, t sequence (i query / j key positions), h query head, g kv head,
d model dim, e head dim, v vocabulary.

Owns the model built from :class:`~attnscope.architecture.ModelConfig` (the config and its presets
``bert-mini``, ``bert-base``, ``bert-large``, ``byte-12l`` live in :mod:`attnscope.architecture`,
re-exported here): the model (:class:`Transformer`: token + position embeddings,
post-LN (BERT) or pre-LN blocks, multi-head / grouped-query attention through
``scaled_dot_product_attention``, GELU MLP, tied output embedding, dropout, causal or bidirectional),
the initialisations (``default``, ``symmetric``, ``symmetric-paper``, optional W_q = W_k tying),
and safetensors save / :func:`load_model`.

State-dict names are a cross-team interface: ``blocks.{i}.attn.q_proj.weight`` [h*e, d] and
``blocks.{i}.attn.k_proj.weight`` [g*e, d] (``nn.Linear``, rows = output features).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnscope.architecture import MODEL_TYPE, PRESETS, ModelConfig, hf_config, preset_config  # re-exported
from attnscope.errors import ConfigError, FormatError, InputError

INITS = ("default", "symmetric", "symmetric-paper")

AttnCallback = Callable[[int, torch.Tensor], None]


# --------------------------------------------------------------------------- positions


def sinusoidal_table(n: int, dim: int) -> torch.Tensor:
    """[n, dim] fixed sinusoidal position embeddings (Vaswani et al.)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    inv = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    out = torch.zeros(n, dim)
    out[:, 0::2] = torch.sin(pos * inv)
    out[:, 1::2] = torch.cos(pos * inv[: dim // 2])
    return out


def rotary_tables(n: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [n, e] for rotate-half rotary embeddings."""
    inv = 1.0 / (10000.0 ** (torch.arange(0, e, 2, dtype=torch.float32) / e))
    ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]  # [n, e/2]
    ang = torch.cat([ang, ang], dim=-1)  # [n, e]
    return ang.cos(), ang.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [b, h, t, e] rotated by position (cos/sin [t, e])."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def repeat_kv(x: torch.Tensor, n_rep: int, dim: int) -> torch.Tensor:
    """Repeat each kv head ``n_rep`` times along ``dim``: query head h reads kv head h // n_rep (HF's repeat_kv)."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=dim)


# --------------------------------------------------------------------------- blocks


class Attention(nn.Module):
    """Multi-head (or grouped-query) self-attention with separate q, k, v projections."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.d_head = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
        self.causal, self.dropout, self.tie_qk = cfg.causal, cfg.dropout, cfg.tie_qk
        self.pattern = cfg.attn_pattern
        self._loaded: tuple[str, Any] | None = None  # (spec, Pattern): read at the first call, see _read_pattern
        self._config = cfg  # its recorded pattern heads serve while self.pattern is still cfg.attn_pattern
        # FlexAttention plans by (length, device, dtype, with gradients, pattern, causal), made on eager calls (_sparse)
        self._flex_plans: dict[tuple[Any, ...], Any] = {}
        kv_dim = cfg.n_kv_heads * cfg.d_head
        if not cfg.tie_qk:
            self.q_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.k_proj = nn.Linear(cfg.d_model, kv_dim, bias=cfg.bias)
        self.v_proj = nn.Linear(cfg.d_model, kv_dim, bias=cfg.bias)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)

    def expanded_k(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """W_k [h*e, d] and b_k [h*e] repeated over each kv group: query head h's key projection."""
        r = self.n_heads // self.n_kv
        w = repeat_kv(self.k_proj.weight.view(self.n_kv, self.d_head, -1), r, dim=0)  # [h, e, d]
        b = self.k_proj.bias
        b = None if b is None else repeat_kv(b.view(self.n_kv, self.d_head), r, dim=0).reshape(-1)
        return w.reshape(self.n_heads * self.d_head, -1), b

    def q_weight(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """W_q [h*e, d] and b_q: the own parameter, or k's expanded over each kv group when tied."""
        if not self.tie_qk:
            return self.q_proj.weight, self.q_proj.bias
        return self.expanded_k()

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, need_probs: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, t, _ = x.shape
        wq, bq = self.q_weight()
        q = F.linear(x, wq, bq).view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # [b, h, t, e]
        k = self.k_proj(x).view(b, t, self.n_kv, self.d_head).transpose(1, 2)  # [b, g, t, e]
        v = self.v_proj(x).view(b, t, self.n_kv, self.d_head).transpose(1, 2)  # [b, g, t, e]
        if rope is not None:
            cos, sin = rope[0][:t], rope[1][:t]
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        r = self.n_heads // self.n_kv
        k, v = repeat_kv(k, r, dim=1), repeat_kv(v, r, dim=1)  # [b, h, t, e]
        p_drop = self.dropout if self.training else 0.0
        probs = None
        if self.pattern is not None:
            y, probs = self._sparse(q, k, v, need_probs)
        elif need_probs:  # explicit softmax so the maps can be handed out; same maths as SDPA
            logits = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_head)  # [b, h, i, j]
            if self.causal:
                mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
                logits = logits.masked_fill(~mask, float("-inf"))
            probs = logits.softmax(dim=-1)
            y = F.dropout(probs, p_drop, self.training) @ v  # [b, h, t, e]
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=self.causal)
        y = y.transpose(1, 2).reshape(b, t, -1)  # [b, t, d]
        return self.o_proj(y), probs

    def _sparse(self, q, k, v, need_probs):
        """The pattern's attention (no dropout on its probabilities). Where FlexAttention runs it, the first eager
        call per length keeps its plan, and later calls (traced ones too) run that plan's tensor work alone:
        torch.compile then traces the whole model without a graph break."""
        from attnscope.sparse.flex import attend

        # a plan holds kernel options chosen for one dtype and the layout of one pattern: a model moved to another
        # dtype (or given another pattern) makes a new plan, never reuses a stale one
        key = (q.shape[2], q.device, q.dtype, torch.is_grad_enabled() and q.requires_grad, self.pattern, self.causal)
        if not need_probs and key in self._flex_plans:
            return attend(q, k, v, self._flex_plans[key]), None
        return self._unplanned(q, k, v, need_probs, key)

    @torch.compiler.disable
    def _unplanned(self, q, k, v, need_probs, key):
        """The pattern's attention without a plan (the first call; the gathered kernel on CPU), always eager: under
        torch.compile the graph breaks around it and the rest of the model compiles (dynamo tracing the gathered
        kernel's chunk loops took over 10 minutes for a 4-layer model on CPU); keeps the plan where there is one."""
        from attnscope.sparse.attention import flex_plan, sparse_attention

        pattern = self._read_pattern()
        out = sparse_attention(q, k, v, pattern, causal=bool(self.causal), return_probs=bool(need_probs))
        if need_probs:
            return out
        fp = flex_plan(q, k, v, pattern, causal=self.causal)  # None where the pattern is gathered
        if fp is not None:
            self._flex_plans[key] = fp
        return out, None

    def _read_pattern(self) -> Any:
        """The :class:`~attnscope.sparse.Pattern` of ``self.pattern``, read once per spec and kept: a pattern file
        edited while a model runs does not change its attention midway (a resume checks the file, see
        :func:`~attnscope.training.config.check_same_pattern`)."""
        spec = self.pattern
        if spec is None:
            return None
        if self._loaded is None or self._loaded[0] != spec:
            from attnscope.sparse.patterns import load_pattern

            own = spec == self._config.attn_pattern  # the config's pattern: its recorded heads, no file needed
            self._loaded = (spec, self._config.pattern() if own else load_pattern(spec, n_heads=self.n_heads))
        return self._loaded[1]


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """One Transformer block; ``norm='post'``: x = LN(x + f(x)); ``'pre'``: x = x + f(LN(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn, self.mlp = Attention(cfg), MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, rope, need_probs):
        if self.pre:
            a, probs = self.attn(self.ln1(x), rope, need_probs)
            x = x + self.drop(a)
            return x + self.drop(self.mlp(self.ln2(x))), probs
        a, probs = self.attn(x, rope, need_probs)
        x = self.ln1(x + self.drop(a))
        return self.ln2(x + self.drop(self.mlp(x))), probs


class Transformer(nn.Module):
    """Token + position embeddings, ``n_layers`` blocks, (tied) output projection to the vocabulary."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        config.validate()
        if config.vocab_size is None:
            raise ConfigError("vocab_size is not set (it normally comes from the tokenizer)")
        self.config = cfg = config
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.pos == "learned":
            self.pos_emb = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        elif cfg.pos == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_table(cfg.max_seq_len, cfg.d_model), persistent=False)
        else:
            cos, sin = rotary_tables(cfg.max_seq_len, cfg.d_head)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        # post-LN (BERT) normalises the embeddings; pre-LN (GPT-2) normalises the final stream
        self.ln_emb = nn.LayerNorm(cfg.d_model) if cfg.norm == "post" else nn.Identity()
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        init_weights(self, "default", generator=None)

    def forward(
        self,
        idx: torch.Tensor,
        *,
        return_attn: bool = False,
        attn_callback: AttnCallback | None = None,
        select: torch.Tensor | None = None,
    ):
        """idx [b, t] -> logits [b, t, v]; with ``return_attn`` also the per-layer maps [b, h, i, j].

        ``select`` (bool [b, t], or int64 [n] positions in the flattened b*t) projects only the chosen
        positions to the vocabulary and returns logits [n, v]: masked-LM training needs 15% of them, and
        the output projection is the most expensive layer of a small model with a large vocabulary.
        The int64 form (computed on the host) lets a GPU step run without a host synchronisation.
        """
        b, t = idx.shape
        if t > self.config.max_seq_len:
            raise InputError(f"sequence length {t} exceeds the model's max_seq_len {self.config.max_seq_len}")
        x = self.tok_emb(idx)  # [b, t, d]
        rope = None
        if self.config.pos == "learned":
            x = x + self.pos_emb(torch.arange(t, device=idx.device))
        elif self.config.pos == "sinusoidal":
            x = x + self.pos_table[:t]
        else:
            rope = (self.rope_cos, self.rope_sin)
        x = self.drop(self.ln_emb(x))
        need = return_attn or attn_callback is not None
        maps: list[torch.Tensor] = []
        for i, block in enumerate(self.blocks):
            x, probs = block(x, rope, need)
            if attn_callback is not None:
                attn_callback(i, probs)
            if return_attn:
                maps.append(probs)
        x = self.ln_f(x)
        if select is not None:
            x = x[select] if select.dtype == torch.bool else x.flatten(0, 1)[select]  # [n, d]
        logits = self.lm_head(x)  # [b, t, v] (or [n, v])
        return (logits, maps) if return_attn else logits

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# --------------------------------------------------------------------------- initialisation


def _residual_params(model: Transformer) -> set[str]:
    return {f"blocks.{i}.attn.o_proj.weight" for i in range(model.config.n_layers)} | {
        f"blocks.{i}.mlp.down.weight" for i in range(model.config.n_layers)
    }


@torch.no_grad()
def init_weights(model: Transformer, init: str = "default", generator: torch.Generator | None = None) -> None:
    """Initialise in place.

    ``default``: N(0, 0.02) weights and embeddings, zero biases, LayerNorm (1, 0), residual output
    projections N(0, 0.02 / sqrt(2 n_layers)). ``symmetric``: the same draw, then W_q := W_k in every
    layer (query head h copies key head h // (n_heads / n_kv_heads); biases equal), so every head's
    W_q W_k^T is symmetric PSD at step 0. ``symmetric-paper``: the original code's variant: fresh
    PyTorch-default q, k, v (Kaiming-uniform, random biases), then W_q := W_k (confounded by the
    different distribution).
    """
    if init not in INITS:
        raise ConfigError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
    n_layers = model.config.n_layers
    residual = _residual_params(model)
    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            p.zero_()
        elif ".ln" in name or name.startswith("ln_"):
            p.fill_(1.0)
        else:
            std = 0.02 / math.sqrt(2 * n_layers) if name in residual else 0.02
            p.normal_(0.0, std, generator=generator)
    if init == "default":
        return
    for block in model.blocks:
        attn = block.attn
        if init == "symmetric-paper":
            for lin in (getattr(attn, "q_proj", None), attn.k_proj, attn.v_proj):
                if lin is not None:
                    _torch_default_linear(lin, generator)
        if not attn.tie_qk:
            w, b = attn.expanded_k()
            attn.q_proj.weight.copy_(w)
            if b is not None:
                attn.q_proj.bias.copy_(b)


def _torch_default_linear(lin: nn.Linear, generator: torch.Generator | None) -> None:
    """nn.Linear.reset_parameters (Kaiming-uniform a=sqrt(5), bias U(+-1/sqrt(fan_in))) with a generator."""
    bound = 1.0 / math.sqrt(lin.in_features)
    lin.weight.uniform_(-bound, bound, generator=generator)
    if lin.bias is not None:
        lin.bias.uniform_(-bound, bound, generator=generator)


# --------------------------------------------------------------------------- save / load


def export_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Contiguous CPU tensors for safetensors: no tied lm_head copy; q_proj materialised when tie_qk."""
    model = getattr(model, "module", model)  # unwrap DDP
    sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        sd.pop("lm_head.weight", None)
    if model.config.tie_qk:
        for i, block in enumerate(model.blocks):
            w, b = block.attn.q_weight()
            sd[f"blocks.{i}.attn.q_proj.weight"] = w.detach().cpu().clone(memory_format=torch.contiguous_format)
            if b is not None:
                sd[f"blocks.{i}.attn.q_proj.bias"] = b.detach().cpu().clone(memory_format=torch.contiguous_format)
    return sd


def import_state_dict(model: Transformer, sd: dict[str, torch.Tensor]) -> None:
    """Inverse of :func:`export_state_dict` (strict about everything else)."""
    sd = dict(sd)
    if model.config.tie_qk:
        sd = {k: v for k, v in sd.items() if ".attn.q_proj." not in k}
    if model.config.tie_embeddings:
        sd["lm_head.weight"] = sd.get("tok_emb.weight")
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise FormatError(f"checkpoint does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}")


def save_model(model: Transformer, ckpt_dir: str | Path, extra_config: dict[str, Any] | None = None) -> Path:
    """Write ``model.safetensors`` + ``config.json`` into ``ckpt_dir`` (each atomically)."""
    from safetensors.torch import save

    from attnscope.tables import atomic_write_bytes, atomic_write_json

    model = getattr(model, "module", model)
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(ckpt_dir / "model.safetensors", save(export_state_dict(model), metadata={"format": "pt"}))
    atomic_write_json(ckpt_dir / "config.json", hf_config(model.config, extra_config))
    return ckpt_dir


def read_config(ckpt_dir: str | Path) -> dict[str, Any]:
    path = Path(ckpt_dir) / "config.json"
    if not path.is_file():
        raise InputError(f"{ckpt_dir}: not an attnscope checkpoint (no config.json)")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise FormatError(f"{path}: corrupt config ({exc})") from None
    if cfg.get("model_type") != MODEL_TYPE:
        raise FormatError(f"{path}: model_type is {cfg.get('model_type')!r}, not {MODEL_TYPE!r}")
    return cfg


def load_model(ckpt_dir: str | Path, device: str | torch.device = "cpu") -> tuple[Transformer, ModelConfig]:
    """Load a checkpoint directory written by the trainer; the model is returned in eval mode."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    cfg_dict = read_config(ckpt_dir)
    try:
        config = ModelConfig.from_dict(cfg_dict).validate()
    except TypeError as exc:
        raise FormatError(f"{ckpt_dir}: bad model config ({exc})") from None
    weights = Path(ckpt_dir) / "model.safetensors"
    if not weights.is_file():
        raise InputError(f"{ckpt_dir}: no model.safetensors")
    try:
        sd = load_file(str(weights), device=str(device))
    except (SafetensorError, OSError, ValueError) as exc:
        raise FormatError(f"{weights}: corrupt weights file ({exc})") from None
    model = Transformer(config)
    import_state_dict(model, sd)
    return model.to(device).eval(), config


__all__ = [
    "ModelConfig",
    "PRESETS",
    "INITS",
    "Transformer",
    "preset_config",
    "init_weights",
    "export_state_dict",
    "import_state_dict",
    "save_model",
    "load_model",
    "read_config",
    "hf_config",
]
