"""Family specs of encoder-decoder models: T5, BART/mBART/Marian/Pegasus, Whisper, Speech2Text,
SpeechT5, MusicGen and DETR, each with three
stacks: ``encoder`` (self-attention), ``decoder`` (causal self-attention) and ``cross``
(decoder queries against encoder keys; a different object, scored separately).

Decoder and cross stacks are optional: an encoder-only export (e.g. a T5EncoderModel) scores its
encoder alone.

Einstein legend: h head, d model dim, e head dim.
"""

from __future__ import annotations

from .declarative import DeclarativeSpec, Stack, per_model_type, separate

_T5 = dict(n_heads=("num_heads",), d_model=("d_model",), d_head=("d_kv",))


def _t5_encoder(sub: str = "") -> Stack:
    """T5's encoder self-attention; ``sub`` = the nested config holding it (MusicGen's ``text_encoder.``)."""
    keys = dict(n_heads=(f"{sub}num_heads",), d_model=(f"{sub}d_model",), d_head=(f"{sub}d_kv",))
    return Stack("encoder", *separate("encoder.block.{i}.layer.0.SelfAttention.q.weight",
                                      "encoder.block.{i}.layer.0.SelfAttention.k.weight"),
                 n_layers=(f"{sub}num_layers",), **keys)


def _t5_stacks() -> tuple[Stack, ...]:
    def qk(where: str) -> tuple:
        return separate(f"{where}.q.weight", f"{where}.k.weight")

    dec_layers = ("num_decoder_layers", "num_layers")
    return (
        _t5_encoder(),
        Stack("decoder", *qk("decoder.block.{i}.layer.0.SelfAttention"), n_layers=dec_layers, optional=True, **_T5),
        Stack("cross", *qk("decoder.block.{i}.layer.1.EncDecAttention"), n_layers=dec_layers, optional=True, **_T5),
    )


def _bart_decoder(decoder: str = "decoder.layers.{i}", d_model: str = "d_model", sub: str = "",
                  layers: str = "decoder_layers", heads: str = "decoder_attention_heads") -> tuple[Stack, Stack]:
    """BART-style decoder: causal ``self_attn`` and cross ``encoder_attn``, both optional."""

    def qk(where: str) -> tuple:
        return separate(f"{where}.q_proj.weight", f"{where}.k_proj.weight")

    dec = dict(n_layers=(sub + layers,), n_heads=(sub + heads,), d_model=(sub + d_model,))
    return (Stack("decoder", *qk(f"{decoder}.self_attn"), optional=True, **dec),
            Stack("cross", *qk(f"{decoder}.encoder_attn"), optional=True, **dec))


def _bart_stacks(encoder: str = "encoder.layers.{i}.self_attn", decoder: str = "decoder.layers.{i}",
                 d_model: str = "d_model") -> tuple[Stack, ...]:
    """BART-style names: ``q_proj``/``k_proj`` under the encoder's self-attention and the decoder's
    ``self_attn`` (causal) and ``encoder_attn`` (cross)."""

    def qk(where: str) -> tuple:
        return separate(f"{where}.q_proj.weight", f"{where}.k_proj.weight")

    enc = dict(n_layers=("encoder_layers",), n_heads=("encoder_attention_heads",), d_model=(d_model,))
    return (Stack("encoder", *qk(encoder), **enc), *_bart_decoder(decoder, d_model))


#: layouts, grouped; SPECS has one spec per model_type (the ``family`` of a score record)
FAMILIES = [
    DeclarativeSpec("t5", ("t5", "mt5", "umt5"), _t5_stacks(),
                    note="no 1/sqrt(d) scaling in the model; head dim from d_kv; relative bias not in W_qk"),
    DeclarativeSpec("bart", ("bart", "mbart", "marian", "pegasus"), _bart_stacks(),
                    note="BART, mBART, Marian, Pegasus"),
    DeclarativeSpec("whisper", ("whisper",), _bart_stacks(), note="audio encoder + text decoder"),
    DeclarativeSpec("speech_to_text", ("speech_to_text",), _bart_stacks(), note="S2T: speech encoder + text decoder"),
    DeclarativeSpec("speecht5", ("speecht5",),
                    _bart_stacks("encoder.wrapped_encoder.layers.{i}.attention", "decoder.wrapped_decoder.layers.{i}",
                                 d_model="hidden_size"),
                    note="the shared encoder/decoder of SpeechT5 (pre/post-nets carry no attention)"),
    DeclarativeSpec("detr", ("detr",), _bart_stacks(),
                    note="object detector: its decoder self-attention (over object queries) is NOT causal"),
    DeclarativeSpec("musicgen", ("musicgen",),
                    (_t5_encoder("text_encoder."),
                     *_bart_decoder(sub="decoder.", d_model="hidden_size", layers="num_hidden_layers",
                                    heads="num_attention_heads")),
                    note="T5 text encoder + audio-token decoder (nested text_encoder/decoder configs)"),
    DeclarativeSpec("musicgen_decoder", ("musicgen_decoder",),
                    _bart_decoder(d_model="hidden_size", layers="num_hidden_layers", heads="num_attention_heads"),
                    note="MusicGen's decoder alone (MusicgenForCausalLM)"),
]

SPECS = per_model_type(FAMILIES)
