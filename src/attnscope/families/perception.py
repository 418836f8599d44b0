"""Family specs of vision and speech Transformer encoders (stack ``encoder``): ViT, DeiT, DINOv2,
BEiT, ViT-MAE, Data2Vec-vision; HuBERT, Wav2Vec2, WavLM, Data2Vec-audio, UniSpeech(-SAT); and the
vision-language pairs CLIP and GIT (vision tower = ``encoder``, causal text tower = ``decoder``).

Einstein legend: h head, d model dim, e head dim.
"""

from __future__ import annotations

from .declarative import DeclarativeSpec, Proj, Stack, per_model_type, separate

_HF = dict(n_layers=("num_hidden_layers",), n_heads=("num_attention_heads",), d_model=("hidden_size",))

#: on-disk names first; transformers >= 5 renames the live modules (q_proj/k_proj, some drop "encoder.layer")
_VISION_Q = ("encoder.layer.{i}.attention.attention.query.weight", "encoder.layer.{i}.attention.q_proj.weight",
             "layers.{i}.attention.q_proj.weight")
_VISION = (Stack("encoder", Proj(_VISION_Q), Proj(tuple(t.replace("query", "key").replace("q_proj", "k_proj")
                                                       for t in _VISION_Q)), **_HF),)
_SPEECH = (Stack("encoder", *separate("encoder.layers.{i}.attention.q_proj.weight",
                                      "encoder.layers.{i}.attention.k_proj.weight"), **_HF),)

#: CLIP-style vision tower (nested ``vision_config``)
_CLIP_VISION = Stack("encoder", *separate("vision_model.encoder.layers.{i}.self_attn.q_proj.weight",
                                          "vision_model.encoder.layers.{i}.self_attn.k_proj.weight"),
                     n_layers=("vision_config.num_hidden_layers",), n_heads=("vision_config.num_attention_heads",),
                     d_model=("vision_config.hidden_size",))

#: layouts, grouped; SPECS has one spec per model_type (the ``family`` of a score record)
FAMILIES = [
    DeclarativeSpec("vit", ("vit", "deit", "dinov2", "vit_mae"), _VISION, note="ViT, DeiT, DINOv2, ViT-MAE"),
    DeclarativeSpec("beit", ("beit", "data2vec-vision"), _VISION, note="relative position bias not in W_qk"),
    DeclarativeSpec("wav2vec2", ("wav2vec2", "hubert", "data2vec-audio", "unispeech", "unispeech-sat"), _SPEECH,
                    note="Wav2Vec2, HuBERT, Data2Vec-audio, UniSpeech(-SAT)"),
    DeclarativeSpec("wavlm", ("wavlm",), _SPEECH, note="gated relative position bias not in W_qk"),
    DeclarativeSpec(
        "clip",
        ("clip",),
        (_CLIP_VISION,
         Stack("decoder", *separate("text_model.encoder.layers.{i}.self_attn.q_proj.weight",
                                    "text_model.encoder.layers.{i}.self_attn.k_proj.weight"),
               n_layers=("text_config.num_hidden_layers",), n_heads=("text_config.num_attention_heads",),
               d_model=("text_config.hidden_size",))),
        note="vision tower = encoder; the text tower is causal, so it scores as decoder",
    ),
    DeclarativeSpec(
        "git",
        ("git",),
        (_CLIP_VISION,
         Stack("decoder", *separate("encoder.layer.{i}.attention.self.query.weight",
                                    "encoder.layer.{i}.attention.self.key.weight"), **_HF)),
        note="CLIP image encoder + BERT-style text decoder (causal over text, bidirectional over the image prefix)",
    ),
]

SPECS = per_model_type(FAMILIES)
