"""In-memory models as weight sources: the notebook path (a model already loaded, never re-read from disk).

:func:`from_object` turns a live object into a :class:`~attnscope.sources.base.WeightSource`:

* a ``torch.nn.Module`` with a transformers-style ``.config`` (``model_type`` picks the family), or any
  module given ``config=``;
* a state dict (any mapping of name -> tensor) plus ``config=`` (a dict or a transformers config);
* attnscope's own training ``Transformer`` (its ``ModelConfig`` becomes the ``attnscope`` config);
* a TransformerLens-style object exposing ``W_Q`` / ``W_K`` as ``[layer, head, d_model, d_head]``
  (duck typed, no import of that library; grouped keys through ``n_key_value_heads``), read per block
  from ``obj.blocks[i].attn`` when it has them so the stacked ``[layer, ...]`` copy is never built.

Nothing is copied: tensors are read one layer at a time by the family spec, which moves them to CPU
float32 (so a model on a GPU crosses to the host one layer at a time).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from attnscope.errors import ConfigError, FormatError, InputError

from .base import DictSource, WeightSource

if TYPE_CHECKING:  # pragma: no cover
    pass

#: the internal ``model_type`` of TransformerLens-style objects (see attnscope.families.lens)
LENS_MODEL_TYPE = "lens:transformer_lens"

_MISSING = object()

ACCEPTED = (
    "a path, hub id or WeightSource; a torch.nn.Module with a transformers-style .config (or with config=); "
    "a state dict / mapping of name -> tensor with config=; an attnscope Transformer; "
    "or a TransformerLens-style object with W_Q/W_K [layer, head, d_model, d_head]"
)


def config_dict(config: Any) -> dict[str, Any]:
    """A config as a plain dict with ``model_type``: a dict, a transformers config (``to_dict``), or
    an attnscope ``ModelConfig``; anything else is one InputError."""
    from attnscope.architecture import ModelConfig, hf_config

    if isinstance(config, ModelConfig):
        return hf_config(config)
    if isinstance(config, Mapping):
        out = dict(config)
    elif callable(getattr(config, "to_dict", None)):
        out = dict(config.to_dict())
        if "model_type" not in out and getattr(config, "model_type", None):
            out["model_type"] = config.model_type
    else:
        raise InputError(f"config must be a dict or a transformers config, not {type(config).__name__}")
    if not out.get("model_type"):
        raise ConfigError("the config has no model_type, so the architecture is unknown")
    return out


def _is_tensor_mapping(obj: Any) -> bool:
    import torch

    if not isinstance(obj, Mapping) or not obj:
        return False
    return all(isinstance(k, str) for k in obj) and any(isinstance(v, torch.Tensor) for v in obj.values())


def _has(obj: Any, attr: str) -> bool:
    """``hasattr`` without evaluating properties (a HookedTransformer's ``W_Q`` stacks every layer)."""
    return inspect.getattr_static(obj, attr, _MISSING) is not _MISSING


def _looks_like_lens(obj: Any) -> bool:
    return _has(obj, "W_Q") and _has(obj, "W_K") and _has(obj, "cfg")


def _module_name(obj: Any, config: dict[str, Any]) -> str:
    path = config.get("_name_or_path") or config.get("name_or_path")
    return str(path) if path else f"<{type(obj).__name__}>"


def _from_module(obj: Any, config: Any, name: str | None) -> WeightSource:
    """A module's parameters and buffers by name (references, no copy)."""
    if _is_attnscope_model(obj):
        return _from_attnscope(obj, name)
    if config is None:
        config = getattr(obj, "config", None)
        if config is None:
            raise InputError(f"{type(obj).__name__} has no .config; pass config= (a dict with model_type)")
    cfg = config_dict(config)
    params = dict(obj.named_parameters())
    params.update(dict(obj.named_buffers()))
    getters = {k: (lambda t=t: t.detach()) for k, t in params.items()}
    return DictSource(getters, cfg, name or _module_name(obj, cfg))


def _is_attnscope_model(obj: Any) -> bool:
    """attnscope's own Transformer (or one wrapped by DDP): a module whose ``.config`` is a ModelConfig
    and that has ``blocks`` (read by shape, so this source never imports the trainer)."""
    import torch

    from attnscope.architecture import ModelConfig

    model = getattr(obj, "module", obj)
    return (isinstance(model, torch.nn.Module) and isinstance(getattr(model, "config", None), ModelConfig)
            and hasattr(model, "blocks"))


def _from_attnscope(model: Any, name: str | None) -> WeightSource:
    """attnscope's own Transformer: its parameters, with W_q read through ``q_weight`` (tied q/k models)."""
    from attnscope.architecture import hf_config

    model = getattr(model, "module", model)  # DDP
    getters: dict[str, Callable[[], Any]] = {k: (lambda t=t: t.detach()) for k, t in model.named_parameters()}
    for i, block in enumerate(model.blocks):
        getters[f"blocks.{i}.attn.q_proj.weight"] = lambda a=block.attn: a.q_weight()[0].detach()
    return DictSource(getters, hf_config(model.config), name or "<attnscope Transformer>")


def _cfg_get(cfg: Any, key: str) -> Any:
    return cfg.get(key) if isinstance(cfg, Mapping) else getattr(cfg, key, None)


def _from_lens(obj: Any, name: str | None) -> WeightSource:
    """A TransformerLens-style object: per layer W_Q [h, d, e] and W_K [g or h, d, e]."""
    cfg = obj.cfg
    blocks = getattr(obj, "blocks", None)
    per_block = blocks is not None and all(hasattr(getattr(b, "attn", None), "W_Q") for b in blocks)
    if per_block:
        n_layers = len(blocks)
        wq0 = blocks[0].attn.W_Q
    else:
        wq_all = obj.W_Q
        if getattr(wq_all, "ndim", 0) != 4:
            raise FormatError(f"W_Q has shape {tuple(getattr(wq_all, 'shape', ()))}, not [layer, head, d_model, d_head]")
        n_layers = int(wq_all.shape[0])
        wq0 = wq_all[0]
    if getattr(wq0, "ndim", 0) != 3:
        raise FormatError(f"W_Q per layer has shape {tuple(getattr(wq0, 'shape', ()))}, not [head, d_model, d_head]")
    n_heads, d_model, d_head = (int(s) for s in wq0.shape)
    n_kv = _cfg_get(cfg, "n_key_value_heads") or getattr(obj, "n_key_value_heads", None) or n_heads
    n_kv = int(n_kv)
    if n_kv <= 0 or n_heads % n_kv:
        raise ConfigError(f"{n_heads} query heads cannot be grouped over n_key_value_heads={n_kv}")

    def q_of(i: int) -> Any:
        return blocks[i].attn.W_Q if per_block else obj.W_Q[i]

    def k_of(i: int) -> Any:
        wk = blocks[i].attn.W_K if per_block else obj.W_K[i]
        if wk.ndim != 3 or int(wk.shape[1]) != d_model or int(wk.shape[2]) != d_head:
            raise FormatError(f"layer {i}: W_K has shape {tuple(wk.shape)}, not [head, {d_model}, {d_head}]")
        g = int(wk.shape[0])
        if g == n_kv:
            return wk.detach()
        if g == n_heads:  # keys expanded to every query head (repeat_interleave): keep one per kv group
            r = n_heads // n_kv
            kept = wk[::r]
            if not bool((wk.reshape(n_kv, r, d_model, d_head) == kept[:, None]).all()):
                raise FormatError(
                    f"layer {i}: W_K has {g} heads that are not {n_kv} groups of {r} repeated heads "
                    f"(n_key_value_heads={n_kv})"
                )
            return kept.detach()
        raise FormatError(f"layer {i}: W_K has {g} heads; expected {n_kv} (n_key_value_heads) or {n_heads}")

    getters: dict[str, Callable[[], Any]] = {}
    for i in range(n_layers):
        getters[f"blocks.{i}.attn.W_Q"] = lambda i=i: q_of(i).detach()
        getters[f"blocks.{i}.attn.W_K"] = lambda i=i: k_of(i)
    config = {"model_type": LENS_MODEL_TYPE, "n_layers": n_layers, "n_heads": n_heads,
              "n_key_value_heads": n_kv, "d_model": d_model, "d_head": d_head}  # fmt: skip
    label = _cfg_get(cfg, "model_name")
    return DictSource(getters, config, name or (str(label) if label else f"<{type(obj).__name__}>"))


def from_object(obj: Any, *, config: Any = None, name: str | None = None) -> WeightSource:
    """A live object as a WeightSource (see the module docstring), or one InputError naming what is accepted."""
    import torch

    if _is_attnscope_model(obj):
        return _from_attnscope(obj, name)
    if _looks_like_lens(obj):
        return _from_lens(obj, name)
    if isinstance(obj, torch.nn.Module):
        return _from_module(obj, config, name)
    if _is_tensor_mapping(obj):
        if config is None:
            raise InputError("a state dict needs config= (a dict with model_type, or a transformers config)")
        cfg = config_dict(config)
        tensors = dict(obj)  # references only
        getters = {k: (lambda v=v: v) for k, v in tensors.items() if isinstance(v, torch.Tensor)}
        return DictSource(getters, cfg, name or _module_name(obj, cfg))
    raise InputError(f"cannot read weights from a {type(obj).__name__}; accepted: {ACCEPTED}")
