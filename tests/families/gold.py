"""Gold-test machinery: the model's own pre-softmax logits per head vs ``x Q[h] K[g(h)]^T x'^T`` from our factors.

A :class:`Case` builds a tiny random model from its real Hugging Face config class (no download),
zeroes every bias, runs one forward pass and captures, for every attention call, the model's own
per-head query and key (as its modeling code splits them) plus the inputs of its q and k projections.
Three capture routes, chosen per case:

* ``interface``: a custom attention function registered with transformers' AttentionInterface
  receives the real ``query [b, h, i, e]`` and ``key [b, g, j, e]`` (before repeat_kv);
* ``attn_method``: the attention module's ``_attn(query, key, ...)`` method is wrapped (older files);
* ``split:<method>``: the module's own head-splitting method (returning q, k, v as [b, h, t, e]) is
  wrapped and its outputs recorded (BLOOM's ``_reshape``);
* ``matmul``: the first 4-d ``torch.matmul(query, key^T)`` inside the attention module's forward
  (modeling code that splits a fused projection itself, e.g. DeBERTa v1);
* ``mha``: torch's ``multi_head_attention_forward`` (WavLM) projects x with the q/k weights itself;
* ``proj``: the q/k projection outputs are split per head as ``view(b, t, h, e)`` (only for separate
  nn.Linear projections whose modeling code does exactly that).

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


@dataclass
class Case:
    id: str
    config: Callable[[], Any]  # -> a transformers PretrainedConfig
    model: str  # transformers class name
    attn: dict[str, str]  # regex on the attention module's qualified name (group 1 = layer) -> stack
    q_in: str  # child of the attention module whose input is x (query side); "a|b" = alternatives
    k_in: str  # child whose input is x' (key side); "" = the attention module itself
    inputs: Callable[[Any], dict[str, torch.Tensor]] = field(default=lambda cfg: text_inputs(cfg))
    capture: str = "interface"  # "interface" | "attn_method" | "split:<method>" | "matmul" | "proj" | "mha"
    k_transposed: bool = False  # _attn receives key as [b, h, e, j] (openai-gpt)
    rope: bool = False  # run with position_ids = 0
    prescaled: bool = False  # the modeling code multiplies q by d_head**-0.5 before the attention call (Whisper)
    split_bthe: bool = False  # the split method returns [b, t, h, e] (Falcon), not [b, h, t, e]
    #: q/k RMSNorm after the projection: "head" (over each head's e, Qwen3 / Gemma 3) or "proj" (over the
    #: whole projection h*e, OLMo-2); scored with fold_norms="qk" and the normalisation held fixed
    qk_norm: str = ""


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


_SINK: list = []  # (attention module, query, key) of every call through the capture function


def _register_capture() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def capture(module, query, key, value, attention_mask, **kwargs):
        _SINK.append((module, query.detach().clone(), key.detach().clone()))
        for unsupported in ("position_bias", "softcap"):
            kwargs.pop(unsupported, None)
        return sdpa_attention_forward(module, query, key, value, None, **kwargs)

    AttentionInterface.register(CAPTURE_NAME, capture)


def _heads_of(module: torch.nn.Module) -> int:
    for attr in ("num_attention_heads", "num_heads", "n_heads"):
        if hasattr(module, attr):
            return int(getattr(module, attr))
    raise AttributeError(f"cannot tell the head count of {type(module).__name__}")


def _first_matmul(module: torch.nn.Module, forward: Callable, sink: list) -> Callable:
    """Wrap ``forward`` to record the first matmul it makes: the model's own (query, key^T).

    4-d ``[b, h, i, e] @ [b, h, e, j]`` as is; 3-d ``bmm`` over ``[(b h), i, e]`` is unfolded with b
    taken from the module's first input.
    """
    from torch.overrides import TorchFunctionMode

    class FirstMatmul(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.args: tuple | None = None

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if self.args is None and func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm):
                if all(isinstance(a, torch.Tensor) and a.dim() in (3, 4) for a in args[:2]):
                    self.args = (args[0].detach().clone(), args[1].detach().transpose(-1, -2).clone())
            return func(*args, **(kwargs or {}))

    def wrapped(*args, **kwargs):
        with FirstMatmul() as mode:
            out = forward(*args, **kwargs)
        assert mode.args is not None, f"{type(module).__name__} made no matmul"
        q, k = mode.args
        if q.dim() == 3:
            b = (args[0] if args else next(iter(kwargs.values()))).shape[0]
            q, k = q.view(b, -1, *q.shape[1:]), k.view(b, -1, *k.shape[1:])
        sink.append((module, q, k))
        return out

    return wrapped


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
    import transformers

    torch.manual_seed(0)
    cfg = case.config()
    if case.capture == "interface":
        _register_capture()
        cfg._attn_implementation = CAPTURE_NAME
    else:
        cfg._attn_implementation = "eager"
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
    return model, cfg


def run(case: Case, model: torch.nn.Module, cfg: Any) -> list[Call]:
    """One forward pass, returning every attention call with its inputs."""
    names = {id(m): n for n, m in model.named_modules()}
    attn_mods: dict[int, tuple[str, int]] = {}
    children: dict[tuple[int, str], torch.nn.Module] = {}
    for n, m in model.named_modules():
        for pattern, stack in case.attn.items():
            hit = re.search(pattern + "$", n)
            subs = {role: _child(m, spec) for role, spec in (("q", case.q_in), ("k", case.k_in))}
            if hit and None not in subs.values():
                attn_mods[id(m)] = (stack, int(hit.group(1)))
                children.update({(id(m), role): sub for role, sub in subs.items()})
    assert attn_mods, f"{case.id}: no attention module matched {list(case.attn)}"

    inputs_seen: dict[tuple[int, str], list[torch.Tensor]] = {}
    qk_out: dict[tuple[int, str], list[torch.Tensor]] = {}
    handles = []
    _SINK.clear()
    sink = _SINK
    mods = dict(model.named_modules())
    for n, m in mods.items():
        if id(m) not in attn_mods:
            continue
        for role in ("q", "k"):
            sub = children[(id(m), role)]

            def pre(mod, args, kwargs, key=(id(m), role)):
                x = args[0] if args else next(iter(kwargs.values()))
                inputs_seen.setdefault(key, []).append(x.detach().clone())

            def post(mod, args, out, key=(id(m), role)):
                qk_out.setdefault(key, []).append(out.detach().clone())

            handles.append(sub.register_forward_pre_hook(pre, with_kwargs=True))
            if case.capture == "proj":
                handles.append(sub.register_forward_hook(post))
        if case.capture == "attn_method":
            orig = m._attn

            def wrapped(query, key, *a, _orig=orig, _m=m, **kw):
                k = key.transpose(-1, -2) if case.k_transposed else key
                sink.append((_m, query.detach().clone(), k.detach().clone()))
                return _orig(query, key, *a, **kw)

            m._attn = wrapped
        if case.capture.startswith("split:"):
            method = case.capture.split(":", 1)[1]
            orig_split = getattr(m, method)

            def split(*a, _orig=orig_split, _m=m, **kw):
                out = _orig(*a, **kw)
                q, k = (o.detach().transpose(1, 2) if case.split_bthe else o.detach() for o in out[:2])
                sink.append((_m, q.clone(), k.clone()))
                return out

            setattr(m, method, split)
        if case.capture == "matmul":
            m.forward = _first_matmul(m, m.forward, sink)

    inputs = case.inputs(cfg)
    if case.rope:
        first = next(iter(inputs.values()))
        inputs["position_ids"] = torch.zeros(first.shape[:2], dtype=torch.long)
    with torch.no_grad():
        model(**inputs)
    for h in handles:
        h.remove()

    if case.capture == "mha":  # torch's multi_head_attention_forward projects with the q/k weights itself
        for (mid, role), xs in inputs_seen.items():
            w = children[(mid, role)].get_submodule(role + "_proj").weight
            with torch.no_grad():
                qk_out[(mid, role)] = [torch.nn.functional.linear(x, w) for x in xs]
    if case.capture in ("proj", "mha"):
        for mid, (stack, layer) in attn_mods.items():
            m = next(mm for mm in mods.values() if id(mm) == mid)
            n_h = _heads_of(m)
            for qo, ko in zip(qk_out[(mid, "q")], qk_out[(mid, "k")]):
                q = qo.view(*qo.shape[:2], n_h, -1).transpose(1, 2)
                k = ko.view(*ko.shape[:2], n_h, -1).transpose(1, 2)
                sink.append((m, q, k))

    calls = []
    counters: dict[tuple[int, str], int] = {}
    for m, q, k in sink:
        assert id(m) in attn_mods, f"{case.id}: attention call from unexpected module {names.get(id(m))}"
        stack, layer = attn_mods[id(m)]
        nth = counters.get((id(m), "n"), 0)
        counters[(id(m), "n")] = nth + 1
        x = inputs_seen[(id(m), "q")][nth]
        xk = inputs_seen[(id(m), "k")][nth]
        calls.append(Call(stack, layer, q, k, x, xk))
    return calls


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
