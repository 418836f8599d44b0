"""Family specs of encoder-decoder models: T5, BART/mBART/Marian/Pegasus, Whisper, Speech2Text and
SpeechT5, each with three
stacks: ``encoder`` (self-attention), ``decoder`` (causal self-attention) and ``cross``
(decoder queries against encoder keys; a different object, scored separately).

Decoder and cross stacks are optional: an encoder-only export (e.g. a T5EncoderModel) scores its
encoder alone.

Einstein legend: h head, d model dim, e head dim.
"""

from __future__ import annotations

from .declarative import DeclarativeSpec, Stack, separate

_T5 = dict(n_heads=("num_heads",), d_model=("d_model",), d_head=("d_kv",))


def _t5_stacks() -> tuple[Stack, ...]:
    def qk(where: str) -> tuple:
        return separate(f"{where}.q.weight", f"{where}.k.weight")

    dec_layers = ("num_decoder_layers", "num_layers")
    return (
        Stack("encoder", *qk("encoder.block.{i}.layer.0.SelfAttention"), n_layers=("num_layers",), **_T5),
        Stack("decoder", *qk("decoder.block.{i}.layer.0.SelfAttention"), n_layers=dec_layers, optional=True, **_T5),
        Stack("cross", *qk("decoder.block.{i}.layer.1.EncDecAttention"), n_layers=dec_layers, optional=True, **_T5),
    )


def _bart_stacks(encoder: str = "encoder.layers.{i}.self_attn", decoder: str = "decoder.layers.{i}",
                 d_model: str = "d_model") -> tuple[Stack, ...]:
    """BART-style names: ``q_proj``/``k_proj`` under the encoder's self-attention and the decoder's
    ``self_attn`` (causal) and ``encoder_attn`` (cross)."""

    def qk(where: str) -> tuple:
        return separate(f"{where}.q_proj.weight", f"{where}.k_proj.weight")

    enc = dict(n_layers=("encoder_layers",), n_heads=("encoder_attention_heads",), d_model=(d_model,))
    dec = dict(n_layers=("decoder_layers",), n_heads=("decoder_attention_heads",), d_model=(d_model,))
    return (
        Stack("encoder", *qk(encoder), **enc),
        Stack("decoder", *qk(f"{decoder}.self_attn"), optional=True, **dec),
        Stack("cross", *qk(f"{decoder}.encoder_attn"), optional=True, **dec),
    )


SPECS = [
    DeclarativeSpec("t5", ("t5", "mt5", "umt5"), _t5_stacks(),
                    note="no 1/sqrt(d) scaling in the model; head dim from d_kv; relative bias not in W_qk"),
    DeclarativeSpec("bart", ("bart", "mbart", "marian", "pegasus"), _bart_stacks(), note="BART, mBART, Marian, Pegasus"),
    DeclarativeSpec("whisper", ("whisper",), _bart_stacks(), note="audio encoder + text decoder"),
    DeclarativeSpec("speech_to_text", ("speech_to_text",), _bart_stacks(), note="S2T: speech encoder + text decoder"),
    DeclarativeSpec("speecht5", ("speecht5",),
                    _bart_stacks("encoder.wrapped_encoder.layers.{i}.attention", "decoder.wrapped_decoder.layers.{i}",
                                 d_model="hidden_size"),
                    note="the shared encoder/decoder of SpeechT5 (pre/post-nets carry no attention)"),
]
