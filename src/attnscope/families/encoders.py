"""Family specs of bidirectional text encoders: BERT and its descendants, DeBERTa (v1, v2), DistilBERT,
ALBERT and ModernBERT. All score as the ``encoder`` stack, except BERT-style configs with
``is_decoder`` (causal ``decoder``, plus ``cross`` with ``add_cross_attention``).

Einstein legend: h head, d model dim, e head dim, three the q|k|v axis of a fused projection.
"""

from __future__ import annotations

from .declarative import DeclarativeSpec, Stack, Variant, fused, per_model_type, separate

#: Hugging Face's BERT-style config keys
_HF = dict(n_layers=("num_hidden_layers",), n_heads=("num_attention_heads",), d_model=("hidden_size",))


def _bert_like(
    name: str, *model_types: str, q: str = "query", k: str = "key", note: str = "", decoder_mode: bool = True,
    attn: str = "attention.self",
) -> DeclarativeSpec:
    """BERT names. With ``decoder_mode``, a config with ``is_decoder`` (BertLMHeadModel, RobertaForCausalLM)
    scores its causal self-attention as ``decoder``, plus ``crossattention`` as ``cross`` when present."""

    def qk(where: str) -> tuple:
        return separate(f"{where}.{q}.weight", f"{where}.{k}.weight")

    causal = Stack("decoder", *qk(f"encoder.layer.{{i}}.{attn}"), **_HF)
    cross = Stack("cross", *qk("encoder.layer.{i}.crossattention.self"), **_HF)
    variants = (
        Variant((("is_decoder", True), ("add_cross_attention", True)), (causal, cross)),
        Variant((("is_decoder", True),), (causal,)),
    ) if decoder_mode else ()
    return DeclarativeSpec(name, model_types, (Stack("encoder", *qk(f"encoder.layer.{{i}}.{attn}"), **_HF),),
                           note=note, variants=variants)


#: layouts, grouped; SPECS has one spec per model_type (the ``family`` of a score record)
FAMILIES = [
    _bert_like("bert", "bert", "megatron-bert", "ernie", "rembert", note="BERT, Megatron-BERT, ERNIE, RemBERT"),
    _bert_like("roberta", "roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "roberta-prelayernorm",
               "data2vec-text", note="RoBERTa, XLM-R (XL), CamemBERT, RoBERTa-PreLN, Data2Vec-text"),
    _bert_like("electra", "electra"),
    _bert_like("mpnet", "mpnet", q="q", k="k", attn="attention.attn", decoder_mode=False,
               note="MPNet (all-mpnet-base-v2); relative position bias not in W_qk"),
    _bert_like("deberta-v2", "deberta-v2", q="query_proj", k="key_proj", decoder_mode=False,
               note="content-to-content form only; relative-position terms are not part of W_qk"),
    DeclarativeSpec(
        "deberta",
        ("deberta",),
        (Stack("encoder", *fused("encoder.layer.{i}.attention.self.in_proj.weight", "(h three e) d -> three h d e"),
               **_HF),),
        note="DeBERTa v1: fused in_proj rows interleaved per head (h three e)",
    ),
    DeclarativeSpec(
        "distilbert",
        ("distilbert",),
        (Stack("encoder", *separate("transformer.layer.{i}.attention.q_lin.weight",
                                    "transformer.layer.{i}.attention.k_lin.weight"),
               n_layers=("n_layers",), n_heads=("n_heads",), d_model=("dim",)),),
    ),
    DeclarativeSpec(
        "albert",
        ("albert",),
        # one shared layer per group (usually one group): the paper scores it once
        (Stack("encoder", *separate("albert_layer_groups.{i}.albert_layers.0.attention.query.weight",
                                    "albert_layer_groups.{i}.albert_layers.0.attention.key.weight"),
               n_layers=("num_hidden_groups", 1), n_heads=("num_attention_heads",), d_model=("hidden_size",),
               require=(("inner_group_num", 1),)),),
        note="one shared layer per hidden group, scored once (layer = group index)",
    ),
    DeclarativeSpec(
        "modernbert",
        ("modernbert",),
        (Stack("encoder", *fused("layers.{i}.attn.Wqkv.weight", "(three h e) d -> three h d e"), **_HF),),
        note="fused Wqkv rows (three h e)",
    ),
]

SPECS = per_model_type(FAMILIES)
