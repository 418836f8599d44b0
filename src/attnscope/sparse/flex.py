"""Sparse patterns through FlexAttention: the CUDA path of :func:`sparse_attention`, and its fallback.

The pattern runs over the packed key layout of :mod:`attnscope.sparse.layout`: keys and values are
rearranged as ``[shared-key segment | sequence]`` (one gather and one concatenation, O(L e)), the mask is
the layout's ``mask_mod`` (per-head table lookups, never an L x L tensor) and the BlockMask holds exactly the
blocks :func:`~attnscope.sparse.layout.block_occupancy` finds, so FlexAttention's cost follows the
pattern's block density (``layout_stats``), not the 64-67% of blocks the sequence's own order touches.
The kernel options (tile sizes, warps, stages) come from :mod:`.tuning` (:func:`options_for`). All of
that host-side set-up is one :class:`FlexPlan` (:func:`plan`); :func:`attend` runs a plan with tensor work
alone, so a model that keeps its plan (``attnscope.training.model.Attention``) compiles without graph breaks.

Einstein legend: b batch, h head, i/j query/key positions (L of them), e head dim.

Compiling FlexAttention can fail (a torch older than the declared minimum, an unsupported GPU, an
``InductorError``). :func:`try_flex` compiles it once per input signature on a probe (forward, and
backward when gradients are needed) before the real call; when that fails it warns in one line, and
``impl="auto"`` runs the gathered kernel from then on, so training goes on. FlexAttention has no CPU
backward: on CPU this path serves inference and tests only. Rows with no allowed key give the zero vector.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

from attnscope.errors import ConfigError

from . import tuning
from .layout import BLOCK, DEFAULT_MASK, arrange_keys, block_mask, key_layout, segment_index
from .patterns import Pattern

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .tuning import Options

#: The oldest torch attnscope declares (pyproject.toml: torch>=2.13); a compile failure below it says so.
TORCH_MIN = (2, 13)

_verified: set[tuple] = set()  # input signatures whose compiled FlexAttention ran (forward / backward)
_failed: list[str] = []  # the one-line reason, once compiling has failed in this process


def available() -> bool:
    """True when this torch has FlexAttention (torch >= 2.5)."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def usable() -> bool:
    """FlexAttention exists and compiling it has not failed in this process."""
    return available() and not _failed


@lru_cache(maxsize=1)
def _compiled_flex() -> Callable[..., Any]:
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@dataclass(frozen=True, eq=False)
class FlexPlan:
    """What FlexAttention needs for one pattern at one length on one device, made once outside any compiled
    region, so that :func:`attend` is tensor work alone and a compiled model traces it without a graph break."""

    index: "torch.Tensor | None"  # [h, S] int64: the key each segment slot holds (None: no segment)
    block_mask: Any  # FlexAttention's BlockMask over the layout
    options: "Options"  # kernel options ({}: FlexAttention's own)
    scale: float
    compiled: bool  # eager calls go through the compiled kernel (CUDA); a traced model inlines it anyway


def plan(pattern: Pattern, L: int, causal: bool, device: "str | torch.device", scale: float, compiled: bool,
         options: "Options | None" = None, block: int = BLOCK, mask: str = DEFAULT_MASK) -> FlexPlan:
    """The :class:`FlexPlan` of ``pattern`` at length L (layout, block mask and index cached per device)."""
    layout = key_layout(pattern, L, causal, block)
    index = segment_index(layout, str(device)) if layout.S else None
    return FlexPlan(index, block_mask(pattern, L, causal, str(device), block, mask), dict(options or {}),
                    float(scale), compiled)


def attend(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", fp: FlexPlan) -> "torch.Tensor":
    """q,k,v [b,h,L,e] -> out [b,h,L,e] over the plan's layout: tensor work only (traceable whole)."""
    import torch

    k2, v2 = arrange_keys(k, fp.index), arrange_keys(v, fp.index)
    kw = {"kernel_options": dict(fp.options)} if fp.options else {}
    if torch.compiler.is_compiling():  # inside a compiled model: traced with it
        return flex_attention_op()(q, k2, v2, block_mask=fp.block_mask, scale=fp.scale, **kw)
    if fp.compiled:
        return _compiled_flex()(q, k2, v2, block_mask=fp.block_mask, scale=fp.scale, **kw)
    import warnings

    with warnings.catch_warnings():  # eager CPU flex materialises scores: fine for inference and tests
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention_op()(q, k2, v2, block_mask=fp.block_mask, scale=fp.scale, **kw)


def flex_attention_op() -> Callable[..., Any]:
    """torch's ``flex_attention`` (imported on use: torch < 2.5 lacks it)."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention


def _run(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", pattern: Pattern, causal: bool,
         scale: float, compiled: bool, block: int = BLOCK, options: "Options | None" = None,
         mask: str = DEFAULT_MASK) -> "torch.Tensor":
    """One FlexAttention call over the layout with kernel ``options`` (None / {}: FlexAttention's own)."""
    return attend(q, k, v, plan(pattern, q.shape[2], causal, q.device, scale, compiled, options, block, mask))


def _needs_grad(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor") -> bool:
    import torch

    return torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))


def options_for(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", pattern: Pattern, causal: bool,
                scale: float) -> tuple["Options", str]:
    """(kernel options, why) this process uses for these inputs (:mod:`.tuning`: the table, or autotuned once
    per signature on a probe of the same shape: forward, and backward when the inputs need gradients)."""
    import torch

    needs_grad = _needs_grad(q, k, v)

    def run(options: "Options") -> None:
        with torch.enable_grad() if needs_grad else torch.no_grad():
            probe = [torch.zeros_like(x, requires_grad=needs_grad) for x in (q, k, v)]
            out = _run(*probe, pattern, causal, scale, compiled=True, options=options)
            if needs_grad:
                out.sum().backward()

    key = (tuple(q.shape), q.dtype, pattern, causal, float(scale), needs_grad)
    return tuning.kernel_options(q, None if torch.compiler.is_compiling() else run, key)


def _check(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", pattern: Pattern) -> None:
    import torch

    if not available():
        raise ConfigError("impl='flex' needs torch >= 2.5 (torch.nn.attention.flex_attention)")
    if pattern.n_heads != q.shape[1]:
        raise ConfigError(f"the pattern has {pattern.n_heads} heads, the input {q.shape[1]}")
    if q.device.type == "cpu" and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ConfigError("FlexAttention has no backward on CPU: use impl='gather' (the default there) to train")


def flex_sparse_attention(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", pattern: Pattern,
                          causal: bool, scale: float, kernel_options: "Options | None" = None,
                          mask: str = DEFAULT_MASK) -> "torch.Tensor":
    """q,k,v [b,h,L,e] -> out [b,h,L,e] through FlexAttention over the packed key layout (compiled on CUDA);
    ``kernel_options`` None: chosen by :func:`options_for`; ``mask``: the ``mask_mod`` variant
    (:data:`~attnscope.sparse.layout.MASK_KINDS`, the same mask computed two ways)."""
    _check(q, k, v, pattern)
    cuda = q.device.type == "cuda"
    options = kernel_options if kernel_options is not None else options_for(q, k, v, pattern, causal, scale)[0]
    return _run(q, k, v, pattern, causal, scale, compiled=cuda, options=options, mask=mask)


def _torch_version() -> tuple[str, bool]:
    """This torch's version and whether it is below :data:`TORCH_MIN`."""
    import re

    import torch

    text = str(torch.__version__)
    nums = tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0])[:2])
    return text, nums < TORCH_MIN


def _failure_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0][:160]
    version, old = _torch_version()
    why = f"; torch {version} is below the declared minimum {'.'.join(map(str, TORCH_MIN))}" if old else ""
    return (f"FlexAttention failed to compile ({type(exc).__name__}: {first}){why}; sparse attention goes on "
            "with the gathered kernel (same results, slower on a GPU)")


def try_flex(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", pattern: Pattern, causal: bool,
             scale: float, kernel_options: "Options | None" = None) -> "torch.Tensor | None":
    """Compiled FlexAttention, or None when compiling it fails (then warned once; :func:`usable` turns False).

    The first call per input signature runs a probe of the same shape (forward, and backward when the
    inputs need gradients) so that a compile failure surfaces here, not later inside ``loss.backward()``.
    """
    import torch

    if _failed:
        return None
    needs_grad = _needs_grad(q, k, v)
    options = kernel_options
    key = (tuple(q.shape), q.dtype, str(q.device), pattern, causal, float(scale), needs_grad,
           None if options is None else tuple(sorted(options.items())))
    if key not in _verified and not torch.compiler.is_compiling():
        try:
            if options is None:
                options = options_for(q, k, v, pattern, causal, scale)[0]
            with torch.enable_grad() if needs_grad else torch.no_grad():
                probe = [torch.zeros_like(x, requires_grad=needs_grad) for x in (q, k, v)]
                out = _run(*probe, pattern, causal, scale, compiled=True, options=options)
                if needs_grad:
                    out.sum().backward()
        except Exception as exc:  # dynamo / inductor / triton raise many types (InductorError, ...)
            if isinstance(exc, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)):
                raise
            from attnscope.errors import warn

            _failed.append(_failure_line(exc))
            warn(_failed[0])
            return None
        _verified.add(key)
    if options is None:
        options = options_for(q, k, v, pattern, causal, scale)[0]
    return _run(q, k, v, pattern, causal, scale, compiled=True, options=options)
