"""Family specs of causal language models (stack ``decoder``): GPT-2 and its Conv1D kin, GPT-Neo,
GPT-J, GPT-NeoX/Pythia, BLOOM, Falcon, GPT-BigCode (StarCoder), the LLaMA line (grouped-query
attention: also Mistral, Qwen2, Gemma, OPT, StableLM, StarCoder2, Granite, OLMo, Cohere), Phi, Phi-3.

Einstein legend: h head, d model dim, e head dim, three the q|k|v axis of a fused projection.
"""

from __future__ import annotations

from typing import Any

from .declarative import CONV1D, DeclarativeSpec, Stack, Variant, fused, fused_blocks, per_model_type, separate

_GPT2_KEYS = dict(n_layers=("n_layer",), n_heads=("n_head",), d_model=("n_embd",))
_HF = dict(n_layers=("num_hidden_layers",), n_heads=("num_attention_heads",), d_model=("hidden_size",))
#: grouped-query models: kv heads and an explicit head dim when the config has them
_GQA = dict(_HF, n_kv_heads=("num_key_value_heads",), d_head=("head_dim",))

_CONV1D_QKV = fused("h.{i}.attn.c_attn.weight", CONV1D.replace("(h e)", "(three h e)").replace("-> h", "-> three h"))
_FALCON_QKV = "h.{i}.self_attention.query_key_value.weight"
_LLAMA_QK = separate("layers.{i}.self_attn.q_proj.weight", "layers.{i}.self_attn.k_proj.weight")


_INPUT_NORM = "layers.{i}.input_layernorm.weight"
#: per-head RMSNorm on q and k after the projection (Qwen3, Gemma 3, OLMo-2)
_QK_NORM = dict(q_norm="layers.{i}.self_attn.q_norm.weight", k_norm="layers.{i}.self_attn.k_norm.weight")


def _llama_like(
    name: str, *model_types: str, note: str = "", refuse_if: tuple[str, ...] = (), input_norm: str | None = _INPUT_NORM,
    **norms: Any,
) -> DeclarativeSpec:
    """LLaMA tensor names; ``norms`` declares q/k-norm gains (``q_norm``, ``k_norm``, ``norm_offset``)."""
    stack = Stack("decoder", *_LLAMA_QK, **_GQA, refuse_if=refuse_if, input_norm=input_norm, **norms)
    return DeclarativeSpec(name, model_types, (stack,), note=note)


#: layouts, grouped; SPECS has one spec per model_type (the ``family`` of a score record)
FAMILIES = [
    DeclarativeSpec("gpt2", ("gpt2",), (Stack("decoder", *_CONV1D_QKV, **_GPT2_KEYS),),
                    note="Conv1D c_attn [d, 3d], columns [q | k | v]"),
    DeclarativeSpec("openai-gpt", ("openai-gpt",), (Stack("decoder", *_CONV1D_QKV, **_GPT2_KEYS),),
                    note="GPT-1, same Conv1D layout as GPT-2"),
    DeclarativeSpec("imagegpt", ("imagegpt",), (Stack("decoder", *_CONV1D_QKV, **_GPT2_KEYS),),
                    note="same Conv1D layout as GPT-2"),
    DeclarativeSpec(
        "gpt-neo",
        ("gpt_neo",),
        (Stack("decoder", *separate("h.{i}.attn.attention.q_proj.weight", "h.{i}.attn.attention.k_proj.weight"),
               n_layers=("num_layers",), n_heads=("num_heads",), d_model=("hidden_size",)),),
    ),
    DeclarativeSpec(
        "gpt-j",
        ("gptj",),
        (Stack("decoder", *separate("h.{i}.attn.q_proj.weight", "h.{i}.attn.k_proj.weight"), **_GPT2_KEYS),),
    ),
    DeclarativeSpec(
        "gpt-neox",
        ("gpt_neox",),
        (Stack("decoder", *fused("layers.{i}.attention.query_key_value.weight", "(h three e) d -> three h d e"),
               **_HF),),
        note="fused query_key_value rows interleaved per head (h three e); Pythia",
    ),
    _llama_like("llama", "llama", "mobilellm", note="also MobileLLM (remote-code config, llama tensor names)"),
    _llama_like("mistral", "mistral", "mixtral"),
    _llama_like("qwen2", "qwen2", "qwen2_moe"),
    _llama_like("qwen3", "qwen3", "qwen3_moe", note="q/k RMSNorm per head (gains folded with fold_norms)", **_QK_NORM),
    _llama_like("gemma", "gemma", "gemma2", norm_offset=1.0, note="RMSNorm gains are 1 + weight"),
    _llama_like("gemma3_text", "gemma3_text", norm_offset=1.0, **_QK_NORM,
                note="Gemma 3 text: q/k RMSNorm per head, gains 1 + weight"),
    _llama_like("phi", "phi", note="Phi-1, Phi-1.5, Phi-2", refuse_if=("qk_layernorm",)),
    _llama_like("opt", "opt", note="OPT (decoder.layers...)", input_norm=None),
    _llama_like("stablelm", "stablelm", refuse_if=("qk_layernorm",)),
    _llama_like("starcoder2", "starcoder2"),
    _llama_like("granite", "granite"),
    _llama_like("olmo", "olmo", note="OLMo 1 (non-parametric LayerNorm: no gain)", input_norm=None),
    _llama_like("olmo2", "olmo2", input_norm=None, **_QK_NORM,
                note="OLMo 2: q/k RMSNorm over the whole projection (h e); norms after attention, not before"),
    _llama_like("cohere", "cohere", refuse_if=("use_qk_norm",)),
    DeclarativeSpec(
        "bloom",
        ("bloom",),
        (Stack("decoder", *fused("h.{i}.self_attention.query_key_value.weight", "(h three e) d -> three h d e"),
               n_layers=("n_layer",), n_heads=("n_head",), d_model=("hidden_size",)),),
        note="fused query_key_value rows interleaved per head (h three e); ALiBi not in W_qk",
    ),
    DeclarativeSpec(
        "falcon",
        ("falcon",),
        # neither flag: per-head interleaved q|k|v, as BLOOM
        (Stack("decoder", *fused(_FALCON_QKV, "(h three e) d -> three h d e"), **_HF),),
        variants=(
            # falcon-40b/180b: kv groups of [q_1 .. q_r | k | v]
            Variant((("new_decoder_architecture", True),),
                    (Stack("decoder", *fused_blocks(_FALCON_QKV, grouped=True), **_HF, n_kv_heads=("num_kv_heads",)),)),
            # falcon-7b: [q (n_q e) | k (e) | v (e)], one key head
            Variant((("multi_query", True),), (Stack("decoder", *fused_blocks(_FALCON_QKV), **_HF, n_kv_heads=(1,)),)),
        ),
        note="fused query_key_value; layout set by new_decoder_architecture / multi_query",
    ),
    DeclarativeSpec(
        "gpt_bigcode",
        ("gpt_bigcode",),
        (Stack("decoder", *fused("h.{i}.attn.c_attn.weight", "(h three e) d -> three h d e"), **_GPT2_KEYS),),
        variants=(Variant((("multi_query", True),),
                          (Stack("decoder", *fused_blocks("h.{i}.attn.c_attn.weight"), **_GPT2_KEYS,
                                 n_kv_heads=(1,)),)),),
        note="StarCoder/SantaCoder: c_attn rows [q | k | v] with one key head (multi_query), else (h three e)",
    ),
    DeclarativeSpec(
        "phi3",
        ("phi3",),
        (Stack("decoder", *fused_blocks("layers.{i}.self_attn.qkv_proj.weight"), **_GQA),),
        note="fused qkv_proj rows [q (n_q e) | k (n_kv e) | v (n_kv e)]",
    ),
]

SPECS = per_model_type(FAMILIES)
