"""Cheaper matrix products for intervened copies: every copy's linear layers computed as the clean copy's
output plus the product of the copy's difference from the clean input, that product in bfloat16.

Einstein legend: c batch copy (copy 0: the clean reference), i position, n input features, m output
features, v vocabulary.

For a linear map y = x W^T + b, y_c = y_0 + (x_c - x_0) W^T exactly. :func:`delta_linears` makes every
``nn.Linear`` (and GPT-2's ``Conv1D``) of the layers after an intervention compute the clean copy 0 in the
model's own dtype and the other copies' difference product in bfloat16 (float32 accumulation). The
rounding then errs by ~2^-8 of the *difference* a copy makes, not of the activation: a copy equal to the
clean one comes out equal to it (its difference is exactly 0), and a small effect is measured to a small
fraction of itself. Norms, softmax, nonlinearities, the residual stream and the clean copy keep the
model's dtype; :func:`delta_logits` does the same for the output matrix.

``precision``: ``"full"`` (every product in the model's dtype), ``"bf16-delta"`` (the above) or
``"auto"``: bf16-delta where the device multiplies bfloat16 natively (a CPU with AVX512-BF16 or AMX, a
CUDA GPU with bf16), full elsewhere (emulated bfloat16 would be slower than float32).
"""

from __future__ import annotations

import math

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from attnscope.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import torch

PRECISIONS = ("auto", "full", "bf16-delta")
DESCRIBE = {
    "full": "every matrix product in the model's dtype",
    "bf16-delta": "intervened copies' linear layers and logits as the clean copy's plus their difference's "
                  "product in bfloat16 (float32 accumulation): rounding ~2^-8 of each effect",
}


def native_bf16(device: Any = "cpu") -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware (else bfloat16 is emulated and slow)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if dev.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)
    return False


def resolve_precision(precision: str, device: Any = "cpu") -> str:
    """``auto`` -> ``bf16-delta`` where :func:`native_bf16`, else ``full``; the others checked and returned."""
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}", params="precision")
    if precision == "auto":
        return "bf16-delta" if native_bf16(device) else "full"
    return precision


def _linear_kind(module: Any) -> str | None:
    """``"linear"`` (weight [m, n]), ``"conv1d"`` (GPT-2's Conv1D, weight [n, m]) or None."""
    import torch

    if isinstance(module, torch.nn.Linear):
        return "linear"
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):
        return "conv1d"
    return None


class LowWeights:
    """bfloat16 copies [m, n] of a model's linear weights, made once per module on first use."""

    def __init__(self, dtype: "torch.dtype | None" = None) -> None:
        import torch

        self.dtype = dtype or torch.bfloat16
        self._cache: dict[tuple[int, bool], torch.Tensor] = {}

    def prepare(self, modules: Iterable[Any], *weights: "torch.Tensor | None") -> "LowWeights":
        """Make the copies of every linear among ``modules`` and of ``weights`` now, before a long run: made
        lazily inside the first forward, these long-lived blocks land between its large temporaries and pin the
        heap's holes (SmolLM2: 4.8 GB peak instead of 2.7 GB under :func:`attnscope.heap.reused_heap`); made
        before a fork, the workers share them."""
        for mod in modules:
            kind = _linear_kind(mod)
            if kind is not None:
                self.of(mod.weight, transposed=kind == "conv1d")
        for weight in weights:
            if weight is not None:
                self.of(weight)
        return self

    def of(self, weight: "torch.Tensor", transposed: bool = False) -> "torch.Tensor":
        key = (id(weight), transposed)
        low = self._cache.get(key)
        if low is None:
            w = weight.detach().t() if transposed else weight.detach()
            low = self._cache[key] = w.to(self.dtype).contiguous()
        return low


def low_difference(x: "torch.Tensor", dtype: "torch.dtype") -> "torch.Tensor":
    """x [c, ..., n] -> (x_c - x_0) for c = 1.. in ``dtype`` [c-1, ..., n]."""
    return (x[1:] - x[:1]).to(dtype)


def delta_product(x: "torch.Tensor", clean_out: "torch.Tensor", low: "torch.Tensor",
                  dx: "torch.Tensor | None" = None) -> "torch.Tensor":
    """x [c, ..., n] (copy 0 clean), clean_out [1, ..., m] = copy 0's exact output -> [c, ..., m]:
    copy 0 as given, copy c as clean_out + (x_c - x_0) low^T with the difference in ``low``'s dtype
    (``dx``: that difference, when it is already at hand)."""
    import torch

    if dx is None:
        dx = low_difference(x, low.dtype)
    dy = torch.nn.functional.linear(dx, low)  # [c-1, ..., m]
    out = torch.empty((x.shape[0], *clean_out.shape[1:]), dtype=clean_out.dtype, device=clean_out.device)
    out[:1].copy_(clean_out)
    out[1:].copy_(dy).add_(clean_out)  # widen, then add: two fast passes (a mixed-dtype add is 5x slower)
    return out


def _version(x: "torch.Tensor") -> int | None:
    try:
        return x._version
    except RuntimeError:  # an inference-mode tensor keeps no version counter
        return None


class _LastDifference:
    """The difference of the last input seen, reused while the same tensor object comes again (q, k and v,
    or gate and up, read one normalised hidden state). A tensor with a version counter must also be
    unchanged; inference-mode tensors have none, and the modeling files never change a linear layer's
    input in place between two layers reading it (every family's copies are checked against full
    precision in tests/interventions/test_deltas.py)."""

    def __init__(self) -> None:
        self._x: Any = None  # weakref to the input
        self._version: int | None = None
        self._dx: Any = None

    def of(self, x: "torch.Tensor", dtype: "torch.dtype") -> "torch.Tensor":
        import weakref

        if (self._x is not None and self._x() is x and _version(x) == self._version
                and self._dx.dtype == dtype):
            return self._dx
        self._dx = low_difference(x, dtype)
        self._x, self._version = weakref.ref(x), _version(x)
        return self._dx


def out_features(module: Any) -> int:
    """The output width of a linear module (``nn.Linear`` or GPT-2's ``Conv1D``); 0 for anything else."""
    kind = _linear_kind(module)
    return 0 if kind is None else int(module.out_features if kind == "linear" else module.nf)


@contextmanager
def record_clean_outputs(modules: Iterable[Any], into: dict[int, Any] | None) -> Iterator[None]:
    """Within the block (one clean forward of one window), each linear among ``modules`` puts its output
    [1, ..., m] in ``into[id(module)]`` for :func:`delta_linears` (None: nothing recorded). A module called
    twice in the forward keeps None (its later calls are computed)."""
    if into is None:
        yield
        return

    def hook(mod: Any, args: tuple, out: Any) -> None:
        into[id(mod)] = None if id(mod) in into else out

    from .attention import forward_hooks

    with forward_hooks((mod, hook) for mod in modules if _linear_kind(mod) is not None):
        yield


@contextmanager
def delta_linears(modules: Iterable[Any], low: LowWeights, clean: dict[int, Any] | None = None) -> Iterator[int]:
    """Within the block, every linear among ``modules`` computes copies 1.. of its input [c, ..., n] by
    :func:`delta_product`; yields how many were switched. Copy 0's output is the module's own forward on
    it, or ``clean[id(module)]`` where a clean forward of the same window recorded one of its shape
    (:func:`record_clean_outputs`): that clean output then stands for copy 0's as a common offset of every
    copy, which keeps each copy's difference from copy 0 as it is (0 for a copy that changes nothing) and
    moves all of them by the rounding that separates the two clean forwards (their attention kernels)."""
    switched = []
    last = _LastDifference()
    for mod in modules:
        kind = _linear_kind(mod)
        if kind is None or "forward" in vars(mod):
            continue
        own = mod.forward

        def forward(x: "torch.Tensor", _own: Any = own, _mod: Any = mod, _t: bool = kind == "conv1d") -> "torch.Tensor":
            if x.dim() < 2 or x.shape[0] < 2:
                return _own(x)
            w = low.of(_mod.weight, transposed=_t)
            y0 = clean.get(id(_mod)) if clean else None
            if y0 is None or y0.shape[0] != 1 or y0.shape[1:-1] != x.shape[1:-1] or y0.shape[-1] != w.shape[0]:
                y0 = _own(x[:1])
            return delta_product(x, y0, w, last.of(x, w.dtype))

        mod.forward = forward
        switched.append(mod)
    try:
        yield len(switched)
    finally:
        for mod in switched:
            del mod.forward


def delta_logits(diff: "torch.Tensor", clean_logits: "torch.Tensor", out_low: "torch.Tensor") -> "torch.Tensor":
    """One copy's logits [i, v]: the clean copy's logits [i, v] plus its hidden state's difference from the
    clean one, diff [i, e], times the output matrix ``out_low`` [v, e], that product in ``out_low``'s dtype."""
    import torch

    dz = torch.nn.functional.linear(diff.to(out_low.dtype), out_low)  # [i, v]
    return torch.empty_like(clean_logits).copy_(dz).add_(clean_logits)


#: the growth of a position's normaliser, sum_v p0 (e^dz - 1), past which it takes the plain route (e^3 - 1)
GROWN = math.exp(3.0) - 1.0


class LossDeltas:
    """The change in mean next-token cross-entropy of copies whose logits differ from a clean copy's by dz.

    With p0 = softmax(z0) the clean distribution [i, v], a copy's log-normaliser at position i moves by
    log sum_v p0_v e^{dz_v} = log1p(sum_v p0_v expm1(dz_v)) and its target logit by dz_t, so
    delta loss = mean_i [log1p(sum_v p0_iv expm1(dz_iv)) - dz_it]: every term is a product with dz, so its
    rounding (dz in bfloat16) is a fraction of the effect; the sum is taken as sum_v p0 e^dz - sum_v p0 in
    float32, which adds an error of the order of float32's resolution near 1, ~1e-7 nats (and none where
    dz is 0). Never the difference of two losses of ~3 nats each. A position where that fails (an effect
    so large that the clean distribution keeps < 5% of its weight there or the normaliser grows past e^3,
    where dz's bfloat16 rounding would be a larger error than the plain route's, or dz past exp's range) takes
    the plain route instead, alone: the clean and the copy's logits there as full products (a few positions), and
    the difference of the two cross-entropies (an effect of > 3 nats, far above their rounding).

    ``p0`` may come from an earlier forward of the same clean window (it only weighs each dz; the plain
    route reads the clean hidden state of the forward at hand), so a window's distribution is made once
    for every layer's copies (:meth:`distribution`).
    """

    def __init__(self, p0: "torch.Tensor", target: "torch.Tensor", out_weight: "torch.Tensor",
                 out_low: "torch.Tensor") -> None:
        import torch

        self.p0 = p0  # [i, v] float32 clean distribution
        self.total = p0.sum(-1)  # [i] sum_v p0, ~1 (summed as every copy's sum_v p0 e^dz is: equal for dz = 0)
        self.target = target[:, None]  # [i, 1]
        self.out_weight = out_weight  # [v, e] in the model's dtype (the plain route's positions)
        self.out_low = out_low  # [v, e] bfloat16
        self._buf = torch.empty_like(p0)  # [i, v] one copy's expm1(dz), reused

    @staticmethod
    def distribution(clean_logits: "torch.Tensor") -> "torch.Tensor":
        """The clean distribution p0 [i, v] (float32) of clean logits [i, v]."""
        import torch

        return torch.softmax(clean_logits.float(), dim=-1)

    def of(self, diff: "torch.Tensor", clean_hidden: "torch.Tensor") -> float:
        """diff [i, e]: a copy's hidden state minus the clean one's, clean_hidden [i, e] -> its loss minus
        the clean loss."""
        return float(self.per_position(diff, clean_hidden).mean())

    def per_position(self, diff: "torch.Tensor", clean_hidden: "torch.Tensor") -> "torch.Tensor":
        """As :meth:`of`, position by position: [i] float32, the change in each position's cross-entropy
        (their mean is :meth:`of`)."""
        import torch

        dz = torch.nn.functional.linear(diff.to(self.out_low.dtype), self.out_low)  # [i, v]
        grown = self._buf.copy_(dz).exp_()  # [i, v] e^dz in float32 (widened first; exp is vectorised, expm1 is not)
        shift = grown.mul_(self.p0).sum(-1) - self.total  # [i] sum_v p0 (e^dz - 1)
        dz_target = dz.gather(1, self.target)[:, 0].float()  # [i]
        per = torch.log1p(shift) - dz_target  # [i]
        # the normaliser falls below 5% or grows past e^3 (an effect of > 3 nats either way), or dz past exp's range
        far = ~(torch.isfinite(shift) & (shift >= -0.95) & (shift <= GROWN))  # [i] (NaN: not finite)
        if bool(far.any()):
            rows = far.nonzero()[:, 0]  # [r]
            h0 = clean_hidden[rows]  # [r, e]
            z0, z = ((h @ self.out_weight.T).float() for h in (h0, h0 + diff[rows]))  # [r, v] full products
            t = self.target[rows]  # [r, 1]
            per[rows] = (torch.logsumexp(z, -1) - torch.logsumexp(z0, -1)) - (z - z0).gather(1, t)[:, 0]
        return per
