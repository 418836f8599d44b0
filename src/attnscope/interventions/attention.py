"""The registered attention function that intervenes on single heads, and the context that switches it on.

Einstein legend: c batch copy, h query head, g key/value head, i/j query/key position, d head dim.

transformers' attention modules hand their post-rotary q [c, h, i, d], k and v [c, g, j, d], the mask,
the scaling and (Gemma) the softcap to whatever ``config._attn_implementation`` names in
``ALL_ATTENTION_FUNCTIONS``. :func:`patched` registers :data:`NAME` there (and the eager mask builder
under the same name in ``ALL_MASK_ATTENTION_FUNCTIONS``, so the mask, sliding windows included, is the
one eager attention gets) and switches the model to it; :func:`_attention` then calls the model's own
``eager_attention_forward`` (its modeling file's: scaling, softcap, mask add, softmax all stay the
model's code), changing only its inputs or its output for the heads a :class:`Plan` names:

* ``sym`` / ``anti``: the head's scores become S_sym = (Q K^T + K Q^T) / 2 or S_anti = (Q K^T - K Q^T) / 2
  before scaling, softcap and mask (each copy's one head through the eager function, its other heads
  through SDPA: :func:`_intervened_heads`; with a softcap, or ``on_scores`` set, every head eager). Both are inner products of longer vectors, so the model's own
  function computes them: with q' = [a q, b k] and k' = [a k, c q] (head dim 2d), q'_i . k'_j =
  a^2 q_i.k_j + b c k_i.q_j; (a, b, c) = (1, 0, 0) keeps the scores, (1/sqrt2, 1/sqrt2, +-1/sqrt2) gives
  sym / anti. k and v are repeated to the query heads first (GQA), and the function sees a view of the
  module with ``num_key_value_groups = 1``; the scaling is passed as the model passes it (never from the
  longer head dim).
* ``ablate`` / ``mean``: the head's output [c, i, h, d] (before the output projection) becomes 0 or the
  head's mean output over the clean text windows' positions (:attr:`Plan.means`).

Each batch copy c of the intervened layer carries its own (kind, head) (:attr:`Plan.copies`): one forward
intervenes on every head of a layer, the batch being expanded at that layer (:func:`expand_at`), the
layers before it running once on the clean input, or not at all where a clean forward kept their outputs
(:func:`keep_outputs`, :func:`reuse_outputs`). In such a forward the other layers, whose maps nobody
reads, run transformers' own SDPA function on the same mask (a fused kernel; eager where the model has a
softcap, which SDPA lacks); a clean forward (``layer`` None) is eager throughout, its maps being read.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from attnscope.errors import InputError, UnsupportedError

from .kinds import NAMES as KINDS, OUTPUT_KINDS, SCORE_NAMES as SCORE_KINDS  # noqa: F401 (re-exported)
from .kinds import coefficients, is_score, rank_of, score_function

if TYPE_CHECKING:  # pragma: no cover
    import torch

NAME = "attnscope_intervene"
#: the kind of a batch copy left as it is (the clean reference the others' differences are taken from)
CLEAN = "clean"


class StopForward(Exception):
    """Raised by the attention function after the intervened layer when nothing later is needed."""


@dataclass
class Plan:
    """What the attention function does in the current forward of one model.

    ``layer``: the layer intervened (None: a clean forward). ``copies``: (kind, head) of each batch copy
    at that layer (kind :data:`CLEAN`: left as it is). ``means``: layer -> [h, d] mean head output (for
    ``mean``). ``on_maps(layer, probs)`` receives every layer's probabilities [c, h, i, j] of a clean
    forward, and the score-intervened copies' own maps [1, s, i, j] of the intervened layer (s: those
    copies, in their order). ``on_output(layer, out)`` receives each layer's head
    outputs [c, i, h, d] of a clean forward. ``on_scores(layer, q, k)``: the (intervened) q' and k'
    handed to the model's function (tests). ``stop``: raise :class:`StopForward` after the intervened layer.
    """

    layer: int | None = None
    copies: Sequence[tuple[str, int]] = ()
    means: dict[int, "torch.Tensor"] = field(default_factory=dict)
    on_maps: Callable[[int, "torch.Tensor"], None] | None = None
    on_output: Callable[[int, "torch.Tensor"], None] | None = None
    on_scores: Callable[[int, "torch.Tensor", "torch.Tensor"], None] | None = None
    stop: bool = False
    #: a clean forward's every layer: ``on_attention(layer, call, out, probs)`` with the layer's
    #: :class:`AttentionCall` (its post-rotary q, k, v, mask and the model's own function), the head outputs
    #: out [c, i, h, d] and maps [c, h, i, j]; what it returns (a tensor) replaces ``out`` (the screen adds a
    #: zero leaf there, to take the loss's gradient with respect to every head's output)
    on_attention: Callable[[int, "AttentionCall", "torch.Tensor", "torch.Tensor"], Any] | None = None
    #: layer -> [i, h, d] the head outputs of another text window (``resample``)
    resample: dict[int, "torch.Tensor"] = field(default_factory=dict)


class _Controller:
    """The plan of one patched model and the layer each of its submodules belongs to."""

    def __init__(self, layer_of: dict[int, int]) -> None:
        self.layer_of = layer_of
        self.plan = Plan()


#: id(attention submodule) -> its model's controller (only while the model is patched)
_ACTIVE: dict[int, _Controller] = {}


class _Flat:
    """A view of an attention module whose k and v were already repeated to the query heads."""

    num_key_value_groups = 1

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _own_eager(module: Any) -> Callable[..., Any]:
    """The ``eager_attention_forward`` of the module's modeling file (softcap, scaling as the model has them)."""
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise UnsupportedError(f"{type(module).__name__}: its modeling file has no eager attention function to wrap")
    return fn


def _sdpa() -> Callable[..., Any]:
    """transformers' own scaled-dot-product attention function (GQA, masks and scaling as it handles them)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


#: query positions per call of the fused attention in an intervention forward: each block of queries is
#: given only the keys its mask lets one of them see (a causal window of 256 costs 5/8 of the square)
SDPA_BLOCK = 64


def _fused(module: Any, query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
           mask: "torch.Tensor | None", kwargs: dict[str, Any]) -> "torch.Tensor":
    """transformers' SDPA function's output [c, i, h, d], by blocks of :data:`SDPA_BLOCK` queries that each
    read keys 0..k-1 only, k past the last key the mask [b, 1 | h, i, j] lets any of them see. The keys left
    out have the mask's minimum added (an exactly-0 weight), so each query's softmax has the same terms;
    without a 4-d mask, or with a query that sees no key at all (a padded row, whose weights are uniform over
    masked keys), one call over everything."""
    import torch

    sdpa = _sdpa()
    n, m = query.shape[2], key.shape[2]
    if mask is not None and mask.dim() == 4 and mask.shape[-1] > m:
        mask = mask[..., :m]  # as transformers' own attention functions read it (GPT-2 in 4.54 passes one key more)
    if mask is None or mask.dim() != 4 or n <= SDPA_BLOCK or tuple(mask.shape[-2:]) != (n, m):
        return sdpa(module, query, key, value, mask, **kwargs)[0]
    seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min  # [b, *, i, j] reachable
    reach = (seen.flatten(0, 1).any(0) * torch.arange(1, m + 1, device=mask.device)).amax(-1)  # [i] last key + 1
    if bool((reach == 0).any()):
        return sdpa(module, query, key, value, mask, **kwargs)[0]
    edges = list(range(0, n, SDPA_BLOCK)) + [n]
    keys = [int(reach[a:b].max()) for a, b in zip(edges, edges[1:])]
    if min(keys) == m:  # nothing to leave out
        return sdpa(module, query, key, value, mask, **kwargs)[0]
    parts = [sdpa(module, query[:, :, a:b], key[:, :, :k], value[:, :, :k], mask[:, :, a:b, :k], **kwargs)[0]
             for a, b, k in zip(edges, edges[1:], keys)]  # each [c, b - a, h, d]
    return torch.cat(parts, dim=1)


def _repeat(x: "torch.Tensor", groups: int) -> "torch.Tensor":
    """[c, g, j, d] -> [c, g * groups, j, d], each key/value head repeated for its query heads."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _attention(module: Any, query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
               attention_mask: "torch.Tensor | None", **kwargs: Any) -> tuple["torch.Tensor", Any]:
    """The function registered as :data:`NAME` (see the module docstring)."""
    import torch

    ctl = _ACTIVE.get(id(module))
    eager = _own_eager(module)
    if ctl is None:  # a module of a model that is not patched now: plain eager attention
        return eager(module, query, key, value, attention_mask, **kwargs)
    plan, layer = ctl.plan, ctl.layer_of[id(module)]
    here = plan.layer == layer
    if plan.layer is not None and not here and kwargs.get("softcap") is None:
        # a layer around the intervened one: nothing of it is read but its output, so the fused kernel
        # (4x eager's speed for 28 copies x 256 tokens on a CPU; the mask is the same eager mask)
        return _fused(module, query, key, value, attention_mask, kwargs), None
    if kwargs.get("scaling") is None:  # never let a longer head dim change the scale
        kwargs["scaling"] = getattr(module, "scaling", None) or query.shape[-1] ** -0.5
    if attention_mask is not None and attention_mask.shape[0] not in (1, query.shape[0]):
        attention_mask = attention_mask.repeat_interleave(query.shape[0] // attention_mask.shape[0], dim=0)
    if here and plan.on_scores is None:
        return _intervened_heads(module, eager, plan, layer, query, key, value, attention_mask, kwargs)
    scored = here and any(is_score(kind) for kind, _ in plan.copies)
    if scored:
        c, h = query.shape[:2]
        if c != len(plan.copies):
            raise RuntimeError(f"layer {layer}: batch of {c} copies, plan of {len(plan.copies)}")
        groups = h // key.shape[1]
        key, value = _repeat(key, groups), _repeat(value, groups)  # [c, h, j, d]
        coef = torch.zeros(3, c, h, 1, 1, dtype=query.dtype, device=query.device)
        coef[0] = 1.0
        for ci, (kind, head) in enumerate(plan.copies):
            if is_score(kind):
                abc = coefficients(kind)
                if abc is None:
                    raise UnsupportedError(f"{kind}: on_scores (every head in one eager call) takes sym, anti and "
                                           "scale:A only")
                coef[:, ci, head] = torch.tensor(abc, dtype=query.dtype, device=query.device).view(3, 1, 1)
        a, b, cc = coef
        query, key = torch.cat([a * query, b * key], dim=-1), torch.cat([a * key, cc * query], dim=-1)
        module_view: Any = _Flat(module)
    else:
        module_view = module
    if here and plan.on_scores is not None:
        plan.on_scores(layer, query, key)
    out, probs = eager(module_view, query, key, value, attention_mask, **kwargs)  # out [c, i, h, d]
    if plan.layer is None:
        if plan.on_maps is not None:
            plan.on_maps(layer, probs)
        if plan.on_output is not None:
            plan.on_output(layer, out)
        if plan.on_attention is not None:
            replaced = plan.on_attention(layer, AttentionCall(module, eager, query, key, value, attention_mask, kwargs),
                                         out, probs)
            if replaced is not None:
                out = replaced
    elif here:
        out = _replace_outputs(out, plan, layer)
        if plan.on_maps is not None and scored:
            idx = [(ci, head) for ci, (kind, head) in enumerate(plan.copies) if is_score(kind)]
            own = torch.stack([probs[ci, head] for ci, head in idx])[None]  # [1, c, i, j]
            plan.on_maps(layer, own)
        if plan.stop:
            raise StopForward
    return out, probs


def _intervened_heads(module: Any, eager: Callable[..., Any], plan: Plan, layer: int, query: "torch.Tensor",
                      key: "torch.Tensor", value: "torch.Tensor", attention_mask: "torch.Tensor | None",
                      kwargs: dict[str, Any]) -> tuple["torch.Tensor", None]:
    """The intervened layer, each copy's one head apart: every head through SDPA as it is, then each
    score-intervened copy's own head again through the model's eager function with q' and k' (its map read
    there), its output put in place; ``ablate`` / ``mean`` replace outputs. Equal to intervening with every
    head in the eager function (tested), at one head's cost instead of all of them."""
    import torch

    c, h = query.shape[:2]
    if c != len(plan.copies):
        raise RuntimeError(f"layer {layer}: batch of {c} copies, plan of {len(plan.copies)}")
    if plan.stop:
        out = None
    elif kwargs.get("softcap") is None:
        out = _fused(module, query, key, value, attention_mask, kwargs)  # [c, i, h, d]
    else:  # SDPA has no softcap: every head through the model's own function
        out = eager(module, query, key, value, attention_mask, **kwargs)[0]
    chosen = [(ci, head, kind) for ci, (kind, head) in enumerate(plan.copies) if is_score(kind)]
    if chosen:
        call = AttentionCall(module, eager, query, key, value, attention_mask, kwargs)
        ci = torch.tensor([x[0] for x in chosen], device=query.device)
        hi = torch.tensor([x[1] for x in chosen], device=query.device)
        own, probs = call.heads_under(ci, hi, [x[2] for x in chosen], layer)  # own [s, i, 1, d], probs [s, 1, i, j]
        if plan.on_maps is not None:
            plan.on_maps(layer, probs[:, 0][None])  # [1, s, i, j]
        if out is not None:
            out[ci, :, hi] = own[:, :, 0].to(out.dtype)
    if plan.stop:
        raise StopForward
    assert out is not None
    return _replace_outputs(out, plan, layer), None


@dataclass
class AttentionCall:
    """One call of a layer's attention as transformers makes it: the module, the model's own eager function,
    post-rotary query [c, h, i, d], key and value [c, g, j, d], the mask and the keyword arguments (scaling,
    softcap, sliding window) as :func:`_attention` hands them to that function."""

    module: Any
    eager: Callable[..., Any]
    query: "torch.Tensor"
    key: "torch.Tensor"
    value: "torch.Tensor"
    mask: "torch.Tensor | None"
    kwargs: dict[str, Any]

    def heads_under(self, copies: "torch.Tensor", heads: "torch.Tensor", kinds: Sequence[str], layer: int = -1
                    ) -> tuple["torch.Tensor", "torch.Tensor"]:
        """Each (copy, head, score intervention) [s] apart through the model's eager function: (head output
        [s, i, 1, d], map [s, 1, i, j]). ``sym``, ``anti``, ``scale:A``: with q' and k' of the module docstring;
        ``sym~``, ``anti~`` and custom ones (:mod:`.kinds`): their changed scores S' [i, j] as q' = S' against
        k' = the identity [j, j], so that q' k'^T = S' goes through the model's own scaling, softcap, mask and
        softmax. The head's key/value head is ``head // (h / g)`` (GQA); the mask row of its copy (or the one
        mask all copies share)."""
        import torch

        query, key, value, mask = self.query, self.key, self.value, self.mask
        c, h = query.shape[:2]
        gi = heads // (h // key.shape[1])  # the key/value head of each query head (GQA)
        q, k, v = query[copies, heads][:, None], key[copies, gi][:, None], value[copies, gi][:, None]  # [s, 1, i, d]
        if mask is not None and mask.shape[0] == c:
            mask = mask[copies]
        by_coef = [n for n, kind in enumerate(kinds) if coefficients(kind) is not None]
        by_scores = [n for n in range(len(kinds)) if n not in by_coef]
        parts: list[tuple[list[int], Any, Any]] = []
        if by_coef:
            idx = torch.tensor(by_coef, device=query.device)
            coef = torch.tensor([coefficients(kinds[n]) for n in by_coef], dtype=query.dtype,
                                device=query.device)  # [s', 3]
            a, b, cc = (coef[:, n].view(-1, 1, 1, 1) for n in range(3))
            qs, ks = q[idx], k[idx]
            sub_mask = mask[idx] if mask is not None and mask.shape[0] == len(kinds) > 1 else mask
            out, probs = self.eager(_Flat(self.module), torch.cat([a * qs, b * ks], dim=-1),
                                    torch.cat([a * ks, cc * qs], dim=-1), v[idx], sub_mask, **self.kwargs)
            parts.append((by_coef, out, probs))
        if by_scores:
            idx = torch.tensor(by_scores, device=query.device)
            sub_mask = mask[idx] if mask is not None and mask.shape[0] == len(kinds) > 1 else mask
            new = torch.stack([self._changed_scores(q[n, 0], k[n, 0], kinds[n], layer, int(heads[n]),
                                                    sub_mask[min(i, sub_mask.shape[0] - 1), 0]
                                                    if sub_mask is not None else None)
                               for i, n in enumerate(by_scores)])[:, None]  # [s'', 1, i, j]
            eye = torch.eye(new.shape[-1], dtype=new.dtype, device=new.device).expand(len(by_scores), 1, -1, -1)
            out, probs = self.eager(_Flat(self.module), new, eye, v[idx], sub_mask, **self.kwargs)
            parts.append((by_scores, out, probs))
        if len(parts) == 1:
            return parts[0][1], parts[0][2]
        where = torch.tensor(parts[0][0] + parts[1][0], device=query.device)
        back = torch.empty_like(where)
        back[where] = torch.arange(len(where), device=query.device)
        return (torch.cat([parts[0][1], parts[1][1]])[back], torch.cat([parts[0][2], parts[1][2]])[back])

    def _changed_scores(self, q: "torch.Tensor", k: "torch.Tensor", kind: str, layer: int, head: int,
                        mask: "torch.Tensor | None") -> "torch.Tensor":
        """One head's scores [i, j] (q [i, d], k [j, d]; before scaling and mask) under ``kind``: ``sym~`` /
        ``anti~`` norm-matched per query over the keys ``mask`` [i, j] lets it see, or a custom function's."""
        import torch

        scores = q @ k.T  # [i, j]
        fn = score_function(kind)
        if fn is not None:
            new = fn(scores, q, k, layer, head)
            if not isinstance(new, torch.Tensor) or tuple(new.shape) != tuple(scores.shape):
                raise InputError(f"custom intervention {kind!r} must return scores of shape "
                                 f"{tuple(scores.shape)} (a tensor), not {getattr(new, 'shape', type(new).__name__)}",
                                 params="custom")
            return new.to(scores.dtype)
        rank = rank_of(kind)
        if rank is not None:  # one part replaced by its best rank-R approximation, the other kept whole
            sym, anti = (scores + scores.T) / 2, (scores - scores.T) / 2
            low = _best_rank(anti if rank[0] == "anti" else sym, rank[1])
            return (sym + low if rank[0] == "anti" else low + anti).to(scores.dtype)
        part = (scores + scores.T) / 2 if kind == "sym~" else (scores - scores.T) / 2
        if mask is None:
            seen = torch.ones_like(scores, dtype=torch.bool)
        else:
            mask = mask[..., : scores.shape[-1]]
            seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
        return part * _spread_ratio(scores.float(), part.float(), seen).to(part.dtype)[:, None]


def _replace_outputs(out: "torch.Tensor", plan: Plan, layer: int) -> "torch.Tensor":
    """The copies' head outputs [c, i, h, d] with ``ablate`` / ``mean`` applied."""
    kinds = [k for k, _ in plan.copies]
    if not any(k in OUTPUT_KINDS for k in kinds):
        return out
    out = out.clone()
    for ci, (kind, head) in enumerate(plan.copies):
        if kind == "ablate":
            out[ci, :, head] = 0
        elif kind == "mean":
            if layer not in plan.means:
                raise InputError(f"mean ablation of layer {layer} needs its mean head outputs (a clean pass first)")
            out[ci, :, head] = plan.means[layer][head].to(out.dtype)
        elif kind == "resample":
            if layer not in plan.resample:
                raise InputError(f"resampling layer {layer} needs another window's head outputs (a clean pass first)")
            out[ci, :, head] = plan.resample[layer][:, head].to(out.dtype)
    return out


def _best_rank(x: "torch.Tensor", rank: int) -> "torch.Tensor":
    """The best rank-``rank`` approximation of x [i, j] in the Frobenius (and spectral) norm: its truncated SVD,
    computed in float64 (Eckart-Young)."""
    import torch

    if rank >= min(x.shape):
        return x
    u, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
    return ((u[:, :rank] * s[:rank]) @ vh[:rank]).to(x.dtype)


def _spread_ratio(scores: "torch.Tensor", part: "torch.Tensor", seen: "torch.Tensor") -> "torch.Tensor":
    """Per query [i]: sd over its visible keys of ``scores`` / sd of ``part`` ([i, j] each; ``seen`` [i, j]
    bool); 1 where either is 0 or a query sees fewer than two keys."""
    import torch

    w = seen.to(scores.dtype)
    n = w.sum(-1)  # [i]

    def sd(x: "torch.Tensor") -> "torch.Tensor":
        mean = (x * w).sum(-1) / n.clamp(min=1)
        return (((x - mean[:, None]) ** 2) * w).sum(-1).div(n.clamp(min=1)).sqrt()

    a, b = sd(scores), sd(part)
    ok = (n >= 2) & (a > 0) & (b > 0)
    return torch.where(ok, a / b.clamp(min=torch.finfo(b.dtype).tiny), torch.ones_like(a))


def register() -> None:
    """Register :data:`NAME` with transformers' attention interface (and the eager mask under that name)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, _attention)
    try:  # transformers >= 4.53 builds masks per implementation name
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, eager_mask
    except ImportError:  # pragma: no cover - older transformers build the eager mask for unknown names
        return
    if NAME not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionMaskInterface.register(NAME, eager_mask)


def layer_list(model: Any) -> Any:
    """The model's ModuleList of transformer layers (the one as long as the config's layer count)."""
    import torch

    cfg = model.config
    n = getattr(cfg, "num_hidden_layers", None) or getattr(getattr(cfg, "text_config", None), "num_hidden_layers", None)
    found = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    if not found:
        raise UnsupportedError(f"{type(model).__name__}: no list of {n} layers to intervene on")
    return found[0]


def _configs(model: Any) -> list[Any]:
    """The model's config and its sub-configs (Gemma 3's text config) that carry an attention implementation."""
    seen, out = set(), []
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and id(cfg) not in seen and hasattr(cfg, "_attn_implementation"):
            seen.add(id(cfg))
            out.append(cfg)
    return out


@contextmanager
def patched(model: Any) -> Iterator[_Controller]:
    """Within the block, ``model`` (a transformers model) runs its attention through :data:`NAME`;
    set ``ctl.plan`` to intervene. The model's implementation and training flag are put back after."""
    register()
    layers = layer_list(model)
    layer_of = {id(sub): li for li, block in enumerate(layers) for sub in block.modules()}
    ctl = _Controller(layer_of)
    configs = _configs(model)
    before = [cfg._attn_implementation for cfg in configs]
    training = model.training
    for cfg in configs:
        cfg._attn_implementation = NAME
    for key in layer_of:
        _ACTIVE[key] = ctl
    model.eval()
    try:
        yield ctl
    finally:
        for key in layer_of:
            _ACTIVE.pop(key, None)
        for cfg, impl in zip(configs, before):
            cfg._attn_implementation = impl
        model.train(training)


@contextmanager
def expand_at(layers: Any, layer: int, copies: int) -> Iterator[None]:
    """Within the block, the hidden states entering ``layers[layer]`` [1, i, e] become ``copies`` copies."""

    def hook(mod: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if args:
            hs = args[0]
            return (hs.expand(copies, *hs.shape[1:]).contiguous(), *args[1:]), kwargs
        hs = kwargs["hidden_states"]
        kwargs["hidden_states"] = hs.expand(copies, *hs.shape[1:]).contiguous()
        return args, kwargs

    handle = layers[layer].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def keep_outputs(layers: Any, into: list[Any] | None) -> Iterator[None]:
    """Within the block, each forward of ``layers[l]`` puts its output (as the layer returns it) in ``into[l]``
    (None: nothing kept)."""
    if into is None:
        yield
        return

    def keeper(li: int) -> Callable[..., None]:
        def hook(mod: Any, args: tuple, out: Any) -> None:
            into[li] = out
        return hook

    with forward_hooks((block, keeper(li)) for li, block in enumerate(layers)):
        yield


@contextmanager
def forward_hooks(pairs: Any) -> Iterator[None]:
    """Within the block, each (module, hook) of ``pairs`` is registered as the module's forward hook."""
    handles = [module.register_forward_hook(hook) for module, hook in pairs]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def reuse_outputs(layers: Any, upto: int, outputs: Sequence[Any] | None) -> Iterator[None]:
    """Within the block, ``layers[:upto]`` return ``outputs[l]`` (their clean outputs on this input, kept by
    :func:`keep_outputs`) without computing anything; None: every layer runs."""
    if outputs is None or upto == 0:
        yield
        return
    skipped = list(layers)[:upto]
    for li, block in enumerate(skipped):
        block.forward = lambda *args, _out=outputs[li], **kwargs: _out
    try:
        yield
    finally:
        for block in skipped:
            del block.forward
