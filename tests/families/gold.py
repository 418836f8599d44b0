"""Gold-test machinery: the model's own pre-softmax logits per head vs ``x Q[h] K[g(h)]^T x'^T`` from our factors.

A :class:`Case` builds a tiny random model from its real Hugging Face config class (no download),
zeroes every bias, runs one forward pass and captures, for every attention call, the model's own
per-head query and key (as its modeling code splits them) plus the inputs of its q and k projections.
Everything is read through public interfaces only (module hooks, transformers' AttentionInterface, torch
function modes), so the same cases run on transformers 4.x and 5.x. Capture routes, chosen per case:

* ``interface``: a custom attention function registered with transformers' public AttentionInterface
  receives the real ``query [b, h, i, e]`` and ``key [b, g, j, e]`` (before repeat_kv). Where this
  transformers has no AttentionInterface, or the model's modeling code does not dispatch through it
  (older releases of many files), the model runs with eager attention and the ``matmul`` route is used;
* ``matmul``: inside the attention module's forward (entered and left with public forward hooks), the
  first ``query @ key^T`` product (matmul, bmm or baddbmm) whose shapes are ``[.., i, e] @ [.., e, j]``
  with ``i``, ``j`` the lengths of the q and k projection inputs: eager attention's own product;
* ``mha``: torch's ``multi_head_attention_forward`` (WavLM) projects x with the q/k weights itself;
* ``proj``: the q/k projection outputs are split per head as ``view(b, t, h, e)`` (only for separate
  nn.Linear projections whose modeling code does exactly that).

Where the q projection is a separate module and no QK-norm follows it, the captured query is divided by
``|query| / |q_proj(x)|`` (Frobenius norms: layout-free), which must be 1 or ``e**-0.5``: whether the
modeling code multiplies q by the softmax scale before the product differs between transformers releases.
Fused projections give no such reference; ``Case.prescaled`` says it there (DeBERTa v1).

Rotary models are run with all ``position_ids`` = 0 (rotation = identity), so q.k is the un-rotated form.
The model's logit for query head h uses transformers' own ``repeat_kv``; ours uses ``kv_head_index``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

CAPTURE_NAME = "attnscope_gold_capture"


@dataclass(frozen=True)
class ConfigOf:
    """``transformers.<cls>(**kw)``, built on call; ``cls`` names the class a test needs."""

    cls: str
    kw: dict = field(default_factory=dict)

    def __call__(self) -> Any:
        import transformers

        return getattr(transformers, self.cls)(**self.kw)


@dataclass
class Case:
    id: str
    config: Callable[[], Any]  # -> a transformers PretrainedConfig (a ConfigOf where the class is one name)
    model: str  # transformers class name
    attn: dict[str, str]  # regex on the attention module's qualified name (group 1 = layer) -> stack
    q_in: str  # child of the attention module whose input is x (query side); "a|b" = alternatives
    k_in: str  # child whose input is x' (key side); "" = the attention module itself
    inputs: Callable[[Any], dict[str, torch.Tensor]] = field(default=lambda cfg: text_inputs(cfg))
    capture: str = "interface"  # "interface" | "matmul" | "proj" | "mha"
    rope: bool = False  # run with position_ids = 0
    prescaled: bool = False  # a FUSED projection's q is multiplied by d_head**-0.5 before the product (DeBERTa)
    #: q/k RMSNorm after the projection: "head" (over each head's e, Qwen3 / Gemma 3) or "proj" (over the
    #: whole projection h*e, OLMo-2); scored with fold_norms="qk" and the normalisation held fixed
    qk_norm: str = ""

    def classes(self) -> list[str]:
        """The transformers classes this case builds."""
        return [*([self.config.cls] if isinstance(self.config, ConfigOf) else []), self.model]


def unavailable(case: Case) -> str | None:
    """Why ``case`` cannot run on the installed transformers (a class it needs is absent), or None."""
    import transformers

    missing = [name for name in case.classes() if not hasattr(transformers, name)]
    if not missing:
        return None
    return f"gold case {case.id}: transformers {transformers.__version__} has no {', '.join(missing)}"

def text_inputs(cfg: Any, t: int = 7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(3, cfg.vocab_size, (2, t), generator=g)}


def cross_text_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    """Text plus encoder states for a BERT-style decoder with cross-attention."""
    g = torch.Generator().manual_seed(12)
    return {"input_ids": torch.randint(3, cfg.vocab_size, (2, 7), generator=g),
            "encoder_hidden_states": torch.randn(2, 6, cfg.hidden_size, generator=g)}


def seq2seq_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return {
        "input_ids": torch.randint(3, cfg.vocab_size, (2, 7), generator=g),
        "decoder_input_ids": torch.randint(3, cfg.vocab_size, (2, 5), generator=g),
    }


def image_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {"pixel_values": torch.randn(2, cfg.num_channels, cfg.image_size, cfg.image_size, generator=g)}


def detr_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(10)
    return {"pixel_values": torch.randn(1, 3, 64, 64, generator=g)}


def clip_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    """Text and image together (CLIP, GIT)."""
    g = torch.Generator().manual_seed(11)
    vc = cfg.vision_config
    vocab = cfg.text_config.vocab_size if hasattr(cfg, "text_config") else cfg.vocab_size
    return {"input_ids": torch.randint(3, vocab, (2, 7), generator=g),
            "pixel_values": torch.randn(2, vc.num_channels, vc.image_size, vc.image_size, generator=g)}


def audio_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return {"input_values": torch.randn(2, 400, generator=g)}


def speech_to_text_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(6)
    n_feat = cfg.input_feat_per_channel * cfg.input_channels
    return {"input_features": torch.randn(2, 16, n_feat, generator=g),
            "decoder_input_ids": torch.randint(3, cfg.vocab_size, (2, 5), generator=g)}


def hidden_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    """SpeechT5 without pre-nets takes hidden states directly, on both sides."""
    g = torch.Generator().manual_seed(7)
    return {"input_values": torch.randn(2, 7, cfg.hidden_size, generator=g),
            "decoder_input_values": torch.randn(2, 5, cfg.hidden_size, generator=g)}


def musicgen_config(text_width: int = 24) -> Any:
    """A tiny MusicGen: T5 text encoder, a 2-codebook audio-token decoder and a tiny EnCodec."""
    import transformers as t

    text = t.T5Config(vocab_size=99, d_model=text_width, d_kv=8, d_ff=37, num_layers=2, num_heads=3)
    audio = t.EncodecConfig(hidden_size=8, num_filters=4, codebook_size=16, codebook_dim=8, upsampling_ratios=[2, 2],
                            num_residual_layers=1, audio_channels=1, sampling_rate=100)
    return t.MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=audio.to_dict(),
                            decoder=musicgen_decoder_config().to_dict())


def musicgen_decoder_config() -> Any:
    import transformers as t

    return t.MusicgenDecoderConfig(vocab_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                   ffn_dim=37, num_codebooks=2, pad_token_id=15, bos_token_id=15)


def musicgen_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(8)
    n_cb = cfg.decoder.num_codebooks
    return {"input_ids": torch.randint(3, cfg.text_encoder.vocab_size, (2, 7), generator=g),
            "decoder_input_ids": torch.randint(0, 15, (2 * n_cb, 5), generator=g)}


def musicgen_decoder_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(9)
    return {"input_ids": torch.randint(0, 15, (2 * cfg.num_codebooks, 5), generator=g),
            "encoder_hidden_states": torch.randn(2, 6, cfg.hidden_size, generator=g)}


def whisper_inputs(cfg: Any) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return {
        "input_features": torch.randn(2, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g),
        "decoder_input_ids": torch.randint(3, cfg.vocab_size, (2, 5), generator=g),
    }


@dataclass
class Call:
    """One attention call as the model made it."""

    stack: str
    layer: int
    query: torch.Tensor  # [b, h, i, e]
    key: torch.Tensor  # [b, g, j, e]
    x: torch.Tensor  # [b, i, d]   input of the q projection
    xk: torch.Tensor  # [b, j, d_k] input of the k projection
    via: str = ""  # the capture route that saw it: "interface" | "matmul" | "proj" | "mha"


@dataclass
class _Frame:
    """One forward call of an attention module, filled in by the hooks while it runs."""

    module: torch.nn.Module
    x: torch.Tensor | None = None  # [b, i, d] input of the q projection
    xk: torch.Tensor | None = None  # [b, j, d_k] input of the k projection
    q_out: torch.Tensor | None = None  # output of the q projection
    k_out: torch.Tensor | None = None
    qk: tuple[torch.Tensor, torch.Tensor] | None = None  # the model's own ([b, h, i, e], [b, g, j, e])
    via: str = ""
    mode: Any = None  # the FirstProduct torch function mode watching this call


_FRAMES: list[_Frame] = []  # attention calls in progress (innermost last)
_WATCHING: list[bool] = []  # non-empty while run() watches a forward pass (build's probe pass is not watched)


def _register_capture() -> bool:
    """Register the capture function with transformers' AttentionInterface; False where there is none."""
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    except ImportError:
        return False

    def capture(module, query, key, value, attention_mask, **kwargs):
        if _WATCHING:
            frame = _FRAMES[-1] if _FRAMES else None
            assert frame is not None and frame.module is module, f"attention call from unexpected {module}"
            frame.qk, frame.via = (query.detach().clone(), key.detach().clone()), "interface"
        for unsupported in ("position_bias", "softcap"):
            kwargs.pop(unsupported, None)
        return sdpa_attention_forward(module, query, key, value, None, **kwargs)

    AttentionInterface.register(CAPTURE_NAME, capture)
    return True


def _product_operands(func: Callable, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """The two factors of a matmul / bmm / baddbmm call (baddbmm's added input is not one)."""
    if func in (torch.baddbmm, torch.Tensor.baddbmm):
        rest = list(args[1:3])
        return kwargs.get("batch1", rest[0] if rest else None), kwargs.get("batch2", rest[1] if len(rest) > 1 else None)
    return (args[0], args[1]) if len(args) > 1 else (None, None)


def _first_product_mode(frame: _Frame) -> Any:
    """A torch function mode that records into ``frame`` the first ``query @ key^T`` it sees.

    A product counts when its factors are ``[.., i, e] @ [.., e, j]`` (3-d or 4-d, e > 1) with ``i`` and
    ``j`` the token counts of the q and k projection inputs: rotary tables and the like do not match. A
    3-d ``[(b h), i, e]`` product is unfolded with b taken from the q projection input.
    """
    from torch.overrides import TorchFunctionMode

    products = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm,
                torch.baddbmm, torch.Tensor.baddbmm)

    class FirstProduct(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if frame.qk is None and frame.x is not None and frame.xk is not None and func in products:
                a, b = _product_operands(func, args, kwargs)
                n, i, j = frame.x.shape[0], frame.x.shape[-2], frame.xk.shape[-2]
                if _is_qk_product(a, b, n, i, j):
                    frame.qk = _unfold(a.detach().clone(), b.detach().transpose(-1, -2).clone(), n, i)
                    frame.via = "matmul"
            return func(*args, **kwargs)

    return FirstProduct()


def _is_qk_product(a: Any, b: Any, n: int, i: int, j: int) -> bool:
    """``[.., i, e] @ [.., e, j]``, or multi-query's ``[n, (i h), e] @ [n, e, j]`` (GPTBigCode before 4.48)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() != b.dim() or a.dim() not in (3, 4):
        return False
    if b.shape[-1] != j or not a.shape[-1] == b.shape[-2] > 1:
        return False
    return a.shape[-2] == i or (a.dim() == 3 and a.shape[0] == b.shape[0] == n and a.shape[-2] % i == 0)


def _unfold(q: torch.Tensor, k: torch.Tensor, n: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """3-d factors back to ``q [n, h, i, e]``, ``k [n, g, j, e]``."""
    if q.dim() == 4:
        return q, k
    if q.shape[-2] == i:  # [(n h), i, e]
        return q.view(n, -1, *q.shape[1:]), k.view(n, -1, *k.shape[1:])
    return q.view(n, i, -1, q.shape[-1]).transpose(1, 2), k.unsqueeze(1)  # [n, (i h), e], one key head


def _heads_of(module: torch.nn.Module) -> int:
    for attr in ("num_attention_heads", "num_heads", "n_heads"):
        if hasattr(module, attr):
            return int(getattr(module, attr))
    raise AttributeError(f"cannot tell the head count of {type(module).__name__}")


def _child(module: torch.nn.Module, spec: str) -> torch.nn.Module | None:
    """The first of the ``|``-separated child names that ``module`` has ("" = the module itself)."""
    for name in spec.split("|"):
        try:
            return module.get_submodule(name)
        except AttributeError:
            continue
    return None


def saved_tensors(model: torch.nn.Module, tmp_path: Any) -> dict[str, torch.Tensor]:
    """The state dict as ``save_pretrained`` writes it (on-disk names, which transformers may rename on load)."""
    from safetensors.torch import load_file

    model.save_pretrained(tmp_path)
    return load_file(str(tmp_path / "model.safetensors"))


def build(case: Case) -> tuple[torch.nn.Module, Any]:
    """The case's tiny model with random weights well away from zero and zero biases, and its config.

    An ``interface`` case runs through the capture function where this transformers can (the model class
    accepts the registered name); otherwise with eager attention, read by the ``matmul`` route.
    """
    cfg = case.config()
    if case.capture == "interface" and _register_capture():
        try:  # modeling code that picks its attention class or function by name from its own table refuses it
            model = _init(case, cfg, CAPTURE_NAME)
            with torch.no_grad():
                model(**_inputs(case, cfg))
            return model, cfg
        except (KeyError, ValueError) as err:
            if CAPTURE_NAME not in str(err):
                raise
    return _init(case, cfg, "eager"), cfg


def _init(case: Case, cfg: Any, attn_implementation: str) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    cfg._attn_implementation = attn_implementation
    model = getattr(transformers, case.model)(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            last = name.rsplit(".", 1)[-1]
            if last == "bias" or last.endswith("_bias"):
                p.zero_()
            elif p.dim() >= 2 and "embed" not in name and "shared" not in name:
                p.normal_(0.0, 0.3)  # well away from zero: logits of order 1
            elif p.dim() == 1 and any(n in name for n in ("q_norm", "k_norm", "input_layernorm")):
                p.uniform_(0.5, 1.5)  # norm gains away from their init (1, or 0 for Gemma's 1 + w): folding shows
    return model


def _attention_modules(case: Case, model: torch.nn.Module) -> dict[torch.nn.Module, tuple[str, int, dict]]:
    """Attention module -> (stack, layer, {"q": q-side child, "k": k-side child})."""
    found = {}
    for n, m in model.named_modules():
        for pattern, stack in case.attn.items():
            hit = re.search(pattern + "$", n)
            subs = {role: _child(m, spec) for role, spec in (("q", case.q_in), ("k", case.k_in))}
            if hit and None not in subs.values():
                found[m] = (stack, int(hit.group(1)), subs)
    assert found, f"{case.id}: no attention module matched {list(case.attn)}"
    return found


def _hook(case: Case, m: torch.nn.Module, subs: dict, done: list[_Frame]) -> list:
    """Forward hooks that fill one _Frame per call of attention module ``m`` into ``done``."""
    watch = case.capture in ("interface", "matmul")

    def enter(mod, args, kwargs):
        frame = _Frame(m)
        _FRAMES.append(frame)
        if watch:
            frame.mode = _first_product_mode(frame)
            frame.mode.__enter__()

    def leave(mod, args, out):
        frame = _FRAMES.pop()
        if frame.mode is not None:
            frame.mode.__exit__(None, None, None)
        done.append(frame)

    handles = [m.register_forward_pre_hook(enter, with_kwargs=True)]
    for role, sub in subs.items():
        def seen(mod, args, kwargs, role=role):
            x = args[0] if args else next(iter(kwargs.values()))
            setattr(_FRAMES[-1], "x" if role == "q" else "xk", x.detach().clone())

        def made(mod, args, out, role=role):
            setattr(_FRAMES[-1], f"{role}_out", out.detach().clone())

        handles.append(sub.register_forward_pre_hook(seen, with_kwargs=True))
        if sub is not m:
            handles.append(sub.register_forward_hook(made))
    handles.append(m.register_forward_hook(leave))  # after the children's hooks on m itself
    return handles


def _inputs(case: Case, cfg: Any) -> dict[str, torch.Tensor]:
    inputs = case.inputs(cfg)
    if case.rope:
        first = next(iter(inputs.values()))
        inputs["position_ids"] = torch.zeros(first.shape[:2], dtype=torch.long)
    return inputs


def run(case: Case, model: torch.nn.Module, cfg: Any) -> list[Call]:
    """One forward pass, returning every attention call with its inputs."""
    modules = _attention_modules(case, model)
    names = {m: n for n, m in model.named_modules()}
    frames: list[_Frame] = []
    handles = [h for m, (_, _, subs) in modules.items() for h in _hook(case, m, subs, frames)]
    _WATCHING.append(True)
    try:
        with torch.no_grad():
            model(**_inputs(case, cfg))
    finally:
        _WATCHING.clear()
        for h in handles:
            h.remove()
        while _FRAMES:  # a forward that raised leaves its frames (and their torch function modes) open
            frame = _FRAMES.pop()
            if frame.mode is not None:
                frame.mode.__exit__(None, None, None)
    calls = []
    for frame in frames:
        stack, layer, subs = modules[frame.module]
        q, k = _query_key(case, frame, subs, names[frame.module])
        calls.append(Call(stack, layer, q, k, frame.x, frame.xk, frame.via or case.capture))
    return calls


def _query_key(case: Case, frame: _Frame, subs: dict, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own per-head (query [b, h, i, e], key [b, g, j, e]) of one call, q un-prescaled."""
    if case.capture in ("proj", "mha"):
        if case.capture == "mha":  # torch's multi_head_attention_forward projects with the q/k weights itself
            with torch.no_grad():
                frame.q_out = torch.nn.functional.linear(frame.x, subs["q"].get_submodule("q_proj").weight)
                frame.k_out = torch.nn.functional.linear(frame.xk, subs["k"].get_submodule("k_proj").weight)
        n_h = _heads_of(frame.module)
        split = [o.view(*o.shape[:2], n_h, -1).transpose(1, 2) for o in (frame.q_out, frame.k_out)]
        return split[0], split[1]
    assert frame.qk is not None, (f"{case.id}: {name} ran no query-key product that could be seen (neither "
                                  "through AttentionInterface nor an eager matmul)")
    q, k = frame.qk
    if case.q_in != case.k_in and not case.qk_norm and subs["q"] is not frame.module:
        ratio = float(q.double().norm() / frame.q_out.double().norm())
        rope = _rope_attention_factor(getattr(frame.module, "config", None))
        if rope is not None and np.isclose(ratio, rope, rtol=1e-4):
            return q, k  # yarn / longrope scale cos and sin: part of the logits, and of attnscope's rotated form
        assert np.isclose(ratio, 1.0, rtol=1e-4) or np.isclose(ratio, q.shape[-1] ** -0.5, rtol=1e-4), (
            f"{case.id}: {name}'s query is {ratio:g} x its q projection: neither 1 nor e**-0.5")
        q = q / ratio
    return q, k


def _rope_attention_factor(config) -> float | None:
    """The factor a scaled rotary embedding (yarn, longrope) multiplies cos and sin by, from transformers' own
    rope functions; None for plain rotary positions or none at all."""
    scaling = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None)
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    if kind in (None, "default", "linear", "dynamic", "llama3"):
        return None
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    _, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    return float(factor)


def model_logits(call: Call, prescaled: bool = False) -> np.ndarray:
    """The model's own un-scaled logits [b, h, i, j], key heads expanded by transformers' repeat_kv."""
    from transformers.models.llama.modeling_llama import repeat_kv

    n_rep = call.query.shape[1] // call.key.shape[1]
    k = repeat_kv(call.key.double(), n_rep)
    q = call.query.double()
    if prescaled:
        q = q * q.shape[-1] ** 0.5
    return torch.matmul(q, k.transpose(-1, -2)).numpy()


def our_logits(call: Call, q: np.ndarray, k: np.ndarray, kv_index: np.ndarray) -> np.ndarray:
    """x_i Q[h] K[g(h)]^T x'_j^T for every head, in float64: [b, h, i, j]."""
    x = call.x.double().numpy()
    xk = call.xk.double().numpy()
    qx = np.einsum("bid,hde->bhie", x, q.astype(np.float64))
    kx = np.einsum("bjd,gde->bgje", xk, k.astype(np.float64))[:, kv_index]
    return np.einsum("bhie,bhje->bhij", qx, kx)


def rms_scales(call: Call, q: np.ndarray, k: np.ndarray, kv_index: np.ndarray, eps: float, scope: str) -> np.ndarray:
    """The RMSNorm denominators r_q[b, h, i] * r_k[b, g(h), j] of a QK-norm model, from the UNFOLDED factors.

    The model's q is ``(x W_q,h) * gamma / r_q`` with ``r_q = sqrt(mean((x W_q,h)^2) + eps)`` (mean over the
    head dim, or over all heads for scope "proj"); so its logits are our folded form divided by r_q r_k.
    """
    x = call.x.double().numpy()
    xk = call.xk.double().numpy()
    qx = np.einsum("bid,hde->bhie", x, q.astype(np.float64))  # [b, h, i, e]
    kx = np.einsum("bjd,gde->bgje", xk, k.astype(np.float64))  # [b, g, j, e]
    if scope == "proj":
        rq = np.sqrt((qx**2).mean(axis=(1, 3), keepdims=True) + eps)[:, :, :, 0]  # [b, 1, i]
        rk = np.sqrt((kx**2).mean(axis=(1, 3), keepdims=True) + eps)[:, :, :, 0]  # [b, 1, j]
        rq, rk = np.broadcast_to(rq, qx.shape[:3]), np.broadcast_to(rk, kx.shape[:3])
    else:
        rq = np.sqrt((qx**2).mean(axis=3) + eps)  # [b, h, i]
        rk = np.sqrt((kx**2).mean(axis=3) + eps)  # [b, g, j]
    return rq[:, :, :, None] * rk[:, kv_index][:, :, None, :]
