"""The one generic mechanism behind every family spec: tensor names, einops layouts and config keys as data.

Einstein legend: l layer, h query head (or the heads of one projection), g kv head, d model dim
(input side), e head dim, three the q|k|v axis of a fused projection.

A family is declared, not coded: a :class:`DeclarativeSpec` lists its attention :class:`Stack` s; each
stack names where W_q and W_k of layer ``i`` live (a :class:`Proj`: a tensor-name template, resolved
by *suffix* against the source's keys so any checkpoint prefix works, plus an einops pattern from the
stored tensor to ``[h, d, e]``) and which config keys hold its layer and head counts.

Resolution reads ``source.keys()`` once per source; each tensor's shape is checked against the config
before it is rearranged, and every problem is a one-line :class:`~attnscope.errors.FormatError` or
:class:`~attnscope.errors.ConfigError`.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from attnscope.errors import AttnscopeError, ConfigError, FormatError, UnsupportedError

from .base import AttentionFactors, FamilySpec, StackInfo, check_grouping, fold_gains

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from attnscope.sources.base import WeightSource

#: config keys tried in order (dotted = nested sub-config); an ``int`` entry is a literal default
ConfigKeys = tuple[Union[str, int], ...]

LINEAR = "(h e) d -> h d e"  # nn.Linear.weight [out = h*e, in = d]
CONV1D = "d (h e) -> h d e"  # HF Conv1D.weight, already input-by-output


@dataclass(frozen=True)
class Proj:
    """Where one projection (W_q or W_k) of layer ``{i}`` lives, and how it is laid out.

    ``pattern`` is an einops pattern from the stored tensor to ``h d e`` (or ``three h d e`` for a
    fused q|k|v tensor, with ``part`` choosing 0 = q, 1 = k). Axis sizes: ``h`` = heads of this
    projection (n_q for W_q, n_kv for W_k), ``e`` = head dim, ``d`` = input dim, ``three`` = 3.
    ``blocks`` declares a fused tensor whose rows are blocks of unequal height, e.g. Phi-3's
    ``("q", "kv", "kv")`` = [n_q e | n_kv e | n_kv e]; then ``part`` picks the block and ``pattern``
    applies to it. With ``grouped`` the blocks repeat once per kv group, each 1/n_kv as tall
    (Falcon's new decoder architecture: rows ``(g [q_1 .. q_r | k | v] e)``).
    """

    tensor: str | tuple[str, ...]  # name template(s); alternatives tried in order (on-disk vs renamed live modules)
    pattern: str = LINEAR
    part: int | None = None
    blocks: tuple[str, ...] | None = None
    grouped: bool = False

    @property
    def templates(self) -> tuple[str, ...]:
        return (self.tensor,) if isinstance(self.tensor, str) else tuple(self.tensor)


@dataclass(frozen=True)
class Stack:
    """One attention stack of a family: its q/k tensors and the config keys of its sizes."""

    stack: str  # "encoder" | "decoder" | "cross"
    q: Proj
    k: Proj
    n_layers: ConfigKeys
    n_heads: ConfigKeys
    d_model: ConfigKeys
    n_kv_heads: ConfigKeys = ()  # empty: same as n_heads
    d_head: ConfigKeys = ()  # empty: d_model // n_heads
    d_model_kv: ConfigKeys = ()  # empty: d_model (cross-attention keys may live in another width)
    #: skipped when the source holds none of its tensors (an encoder-only export of a seq2seq model)
    optional: bool = False
    #: config flags that make the logits non-bilinear in x (e.g. a per-head norm on q and k): refused
    refuse_if: tuple[str, ...] = ()
    #: (config key, the only value this layout reads correctly); another value is refused, never misread
    require: tuple[tuple[str, Any], ...] = ()
    #: norm gains folded in with ``fold`` (name templates resolved like ``Proj``): a per-head RMSNorm gain on q
    #: and k after the projection ([e] shared by the heads, or [h e] over the whole projection, OLMo-2) ...
    q_norm: str | None = None
    k_norm: str | None = None
    #: ... and the gain of the norm applied to x before both projections ([d]; ``fold="all"`` only)
    input_norm: str | None = None
    #: added to every stored gain (Gemma's RMSNorm multiplies by ``1 + weight``)
    norm_offset: float = 0.0


def _lookup(config: dict[str, Any], key: str) -> Any:
    """``config[key]``; a dotted key walks nested sub-configs (``"decoder.num_hidden_layers"``)."""
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _config_int(config: dict[str, Any], keys: ConfigKeys, what: str, model_type: str) -> int | None:
    """The first of ``keys`` the config sets, as an int >= 1; a float (``1e6``), a bool, a string or a
    count below 1 is one ConfigError (a count is an integer; the weights bound how large it may be)."""
    for key in keys:
        if isinstance(key, int):
            return key
        value = _lookup(config, key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{model_type} config: {key}={value!r} is not a valid {what} (an integer >= 1)")
            return int(value)
    return None


def _required(config: dict[str, Any], keys: ConfigKeys, what: str, model_type: str) -> int:
    value = _config_int(config, keys, what, model_type)
    if value is None:
        names = ", ".join(str(k) for k in keys)
        raise ConfigError(f"{model_type} config has no {what} (looked for: {names})")
    return value


class _KeyIndex:
    """Tensor names of one source, with template -> concrete-name resolution by suffix."""

    def __init__(self, source: "WeightSource") -> None:
        self.name = getattr(source, "name", repr(source))
        self.keys = list(source.keys())
        self.keyset = set(self.keys)
        self._prefix: dict[str, str | None] = {}

    def prefix(self, template: str, layer: int = 0) -> str | None:
        """The checkpoint prefix in front of ``template`` (found once, at ``layer``), or None."""
        if template not in self._prefix:
            probe = template.format(i=layer)
            found = sorted(
                {k[: len(k) - len(probe)] for k in self.keys if k == probe or k.endswith("." + probe)}
            )
            if len(found) > 1:
                shown = ", ".join(repr(p + probe) for p in found[:3])
                raise FormatError(
                    f"{self.name}: several tensors end in {probe!r} ({shown}); cannot tell which to score"
                )
            self._prefix[template] = found[0] if found else None
        return self._prefix[template]

    def template_of(self, proj: Proj) -> str | None:
        """The first of ``proj``'s name templates that this source uses, or None."""
        for template in proj.templates:
            if self.prefix(template) is not None:
                return template
        return None

    def resolve(self, proj: Proj, layer: int) -> str | None:
        """The concrete tensor name of ``proj`` at ``layer``, or None when the source lacks it."""
        template = self.template_of(proj)
        if template is None:
            return None
        name = self.prefix(template) + template.format(i=layer)
        return name if name in self.keyset else None


_INDEX: "weakref.WeakKeyDictionary[Any, _KeyIndex]" = weakref.WeakKeyDictionary()


def key_index(source: "WeightSource") -> _KeyIndex:
    """The (cached) key index of ``source``: ``source.keys()`` is read once per source."""
    try:
        idx = _INDEX.get(source)
    except TypeError:  # not weak-referenceable: no cache
        return _KeyIndex(source)
    if idx is None:
        idx = _KeyIndex(source)
        _INDEX[source] = idx
    return idx


_GROUP = re.compile(r"\([^)]*\)|\S+")


def pattern_shape(pattern: str, sizes: dict[str, int]) -> tuple[int, ...]:
    """Shape of the stored tensor that the left side of ``pattern`` describes, e.g. ``(h e) d`` -> (h*e, d)."""
    lhs = pattern.split("->")[0]
    shape = []
    for group in _GROUP.findall(lhs):
        n = 1
        for axis in group.strip("()").split():
            n *= sizes[axis]
        shape.append(n)
    return tuple(shape)


def _to_float32(t: "torch.Tensor") -> "torch.Tensor":
    import torch

    t = t.detach()
    if not torch.is_floating_point(t):
        raise FormatError(f"tensor of dtype {t.dtype} is not a floating-point weight (quantized checkpoint?)")
    if t.element_size() == 1:  # fp8 weights carry separate (often block-wise) scales: upcasting alone is wrong
        raise UnsupportedError(f"{t.dtype} (fp8-quantized) weights are not supported; use the bf16/fp16 checkpoint")
    return t.to(device="cpu", dtype=torch.float32)


@dataclass(frozen=True)
class Variant:
    """A layout used instead of the default one when every ``(config key, value)`` in ``when`` holds."""

    when: tuple[tuple[str, Any], ...]
    layout: tuple[Stack, ...]

    def matches(self, config: dict[str, Any]) -> bool:
        return all(_lookup(config, key) == value for key, value in self.when)


@dataclass(frozen=True)
class DeclarativeSpec(FamilySpec):
    """A family as data: its name, the ``model_type`` values it handles, and its attention stacks."""

    name: str
    model_types: tuple[str, ...]
    layout: tuple[Stack, ...] = ()
    #: one line for docs/families.md and error messages
    note: str = ""
    #: layouts chosen by config flags, first match wins (e.g. Falcon's multi_query); else ``layout``
    variants: tuple[Variant, ...] = ()

    def layout_for(self, config: dict[str, Any]) -> tuple[Stack, ...]:
        for variant in self.variants:
            if variant.matches(config):
                return variant.layout
        return self.layout

    # -- sizes ---------------------------------------------------------------------------------
    def stack_info(self, config: dict[str, Any], st: Stack) -> StackInfo:
        mt = str(config.get("model_type", self.name))
        for flag in st.refuse_if:
            if config.get(flag):
                raise UnsupportedError(
                    f"{mt} with {flag}={config[flag]!r} normalises q and k per head, so its logits are not "
                    "the bilinear form x W_q W_k^T x'^T; not supported (see docs/families.md)"
                )
        for key, wanted in st.require:
            actual = _lookup(config, key)
            if actual is not None and actual != wanted:
                raise UnsupportedError(f"{mt} with {key}={actual!r} is not supported (only {key}={wanted!r})")
        n_layers = _required(config, st.n_layers, f"{st.stack} layer count", mt)
        n_heads = _required(config, st.n_heads, f"{st.stack} head count", mt)
        d_model = _required(config, st.d_model, "model width", mt)
        n_kv = _config_int(config, st.n_kv_heads, "key/value head count", mt) or n_heads
        d_head = _config_int(config, st.d_head, "head dim", mt)
        if d_head is None:
            if n_heads == 0 or d_model % n_heads:
                raise ConfigError(f"{mt} config: width {d_model} is not divisible by {n_heads} heads")
            d_head = d_model // n_heads
        d_kv = _config_int(config, st.d_model_kv, "key-side width", mt) or d_model
        check_grouping(n_heads, n_kv)  # one clear ConfigError (an index array of a config's 2^31 heads would not fit)
        return StackInfo(st.stack, n_layers, n_heads, n_kv, d_model, d_head, d_kv if d_kv != d_model else None)

    def stacks(self, config: dict[str, Any], source: "WeightSource | None" = None) -> list[StackInfo]:
        out, absent, present = [], [], []
        for st in self.layout_for(config):
            if st.optional and source is not None and key_index(source).template_of(st.q) is None:
                absent.append(st)
                continue
            present += [st] if st.optional else []
            out.append(self.stack_info(config, st))
        if source is not None and not out:
            raise FormatError(f"{source.name}: holds none of the {self.name} attention tensors")
        if absent and present and source is not None:  # a decoder without its cross-attention (or the reverse)
            st = absent[0]
            raise FormatError(f"{source.name}: holds the {self.name} {present[0].stack} stack but not its {st.stack} "
                              f"stack (no tensor named like {st.q.templates[0]}); a file whose tensor names do not "
                              "give every stack of its architecture is not scored")
        return out

    def _stack(self, name: str, config: dict[str, Any]) -> Stack:
        for st in self.layout_for(config):
            if st.stack == name:
                return st
        raise ValueError(f"{self.name} has no {name!r} stack")

    # -- tensors -------------------------------------------------------------------------------
    def _read(
        self, source: "WeightSource", info: StackInfo, layer: int, proj: Proj, n: int, d: int,
        cache: dict[str, "torch.Tensor"] | None = None,
    ) -> np.ndarray:
        """One projection of one layer as float32 ``[n, d, e]`` (shape-checked against the config).

        ``cache`` (name -> float32 tensor) lets W_q and W_k of one fused tensor share a single read.
        """
        from einops import rearrange

        idx = key_index(source)
        name = idx.resolve(proj, layer)
        if name is None:
            template = idx.template_of(proj) or proj.templates[0]
            raise FormatError(
                f"{source.name}: missing tensor ending in {template.format(i=layer)!r} "
                f"({self.name} {info.stack} layer {layer} of {info.n_layers} in the config)"
            )
        heads = {"q": info.n_heads, "kv": info.n_kv_heads}
        e = info.d_head
        sizes = {"h": n, "e": e, "d": d, "three": 3}
        if proj.blocks is not None:
            rows = [heads[b] * e for b in proj.blocks]
            expected: tuple[int, ...] = (sum(rows), d)
        else:
            expected = pattern_shape(proj.pattern, sizes)
        if cache is not None and name in cache:
            t = cache[name]
        else:
            t = source.get(name)
            if tuple(t.shape) != expected:
                raise FormatError(
                    f"{source.name}: tensor {name!r} has shape {tuple(t.shape)}, but the config "
                    f"(heads={info.n_heads}, kv_heads={info.n_kv_heads}, d_head={e}, d_model={d}) needs {expected}"
                )
            try:
                t = _to_float32(t)
            except AttnscopeError as err:
                raise type(err)(f"{source.name}: {name}: {err}") from None
            if cache is not None:
                cache[name] = t
        if proj.blocks is not None:
            if proj.grouped:  # [g, rows per group, d]: the blocks repeat in every kv group
                g = info.n_kv_heads
                per = [r // g for r in rows]
                start = sum(per[: proj.part])
                t = t.reshape(g, sum(per), d)[:, start : start + per[proj.part]].reshape(-1, d)
            else:
                start = sum(rows[: proj.part])
                t = t[start : start + rows[proj.part]]
        used = {a: v for a, v in sizes.items() if re.search(rf"\b{a}\b", proj.pattern.split("->")[0])}
        out = rearrange(t, proj.pattern, **used)
        if "three" in proj.pattern.split("->")[1]:
            out = out[proj.part]
        return np.asarray(out.numpy(), dtype=np.float32)  # [n, d, e], a view: the kernels read it strided

    def layer_factors(self, source: "WeightSource", info: StackInfo, layer: int, fold: str = "none") -> AttentionFactors:
        st = self._stack(info.stack, source.config)
        cache: dict[str, torch.Tensor] = {}  # a fused q|k|v tensor is read once for both
        q = self._read(source, info, layer, st.q, info.n_heads, info.d_model, cache)  # [h, d, e]
        k = self._read(source, info, layer, st.k, info.n_kv_heads, info.d_model_kv or info.d_model, cache)  # [g, d, e]
        if fold != "none":
            q, k = self._fold(source, info, st, layer, q, k, fold)
        return AttentionFactors(info.stack, layer, q, k)

    def _gain(self, source: "WeightSource", template: str, layer: int, offset: float) -> np.ndarray:
        name = key_index(source).resolve(Proj(template), layer)
        if name is None:
            raise FormatError(f"{source.name}: missing norm gain ending in {template.format(i=layer)!r} ({self.name})")
        return _to_float32(source.get(name)).numpy().reshape(-1) + np.float32(offset)

    def _fold(
        self, source: "WeightSource", info: StackInfo, st: Stack, layer: int, q: np.ndarray, k: np.ndarray, fold: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fold the stack's declared gains (``fold`` = "qk" or "all") into ``q [h, d, e]``, ``k [g, d, e]``."""
        if fold == "all" and st.input_norm is None:
            raise UnsupportedError(
                f"{self.name} {info.stack}: its spec declares no input-norm gain, so fold_norms='all' is not "
                "available (fold_norms='qk' is)"
            )
        off = st.norm_offset
        return fold_gains(
            q, k,
            q_gain=self._gain(source, st.q_norm, layer, off) if st.q_norm else None,
            k_gain=self._gain(source, st.k_norm, layer, off) if st.k_norm else None,
            in_gain=self._gain(source, st.input_norm, layer, off) if fold == "all" and st.input_norm else None,
        )  # fmt: skip


def per_model_type(groups: list[DeclarativeSpec]) -> list[DeclarativeSpec]:
    """One spec per ``model_type`` (named after it, so the ``family`` column of a score record is the
    config's own model_type, as in the zoo registry), sharing the group's layout."""
    import dataclasses

    return [dataclasses.replace(g, name=mt, model_types=(mt,)) for g in groups for mt in g.model_types]


def separate(q: str, k: str, pattern: str = LINEAR) -> tuple[Proj, Proj]:
    """W_q and W_k in two tensors of the same layout."""
    return Proj(q, pattern), Proj(k, pattern)


def fused(tensor: str, pattern: str) -> tuple[Proj, Proj]:
    """W_q and W_k in one q|k|v tensor whose pattern has a ``three`` axis (0 = q, 1 = k)."""
    return Proj(tensor, pattern, part=0), Proj(tensor, pattern, part=1)


def fused_blocks(
    tensor: str, blocks: tuple[str, ...] = ("q", "kv", "kv"), pattern: str = LINEAR, grouped: bool = False
) -> tuple[Proj, Proj]:
    """W_q and W_k as the first two row blocks of a fused tensor of unequal blocks (Phi-3), or of
    blocks repeated per kv group (``grouped``, Falcon's new decoder architecture)."""
    return (Proj(tensor, pattern, part=0, blocks=blocks, grouped=grouped),
            Proj(tensor, pattern, part=1, blocks=blocks, grouped=grouped))
