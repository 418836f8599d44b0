"""Gold test for every family: our W_q, W_k reproduce each model's own pre-softmax logits, head by head.

One table of cases (tiny random models from the real Hugging Face config classes, no download); one
test. See gold.py for how the model's own per-head queries and keys are captured.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attnscope.families import get_family
from attnscope.sources import DictSource, open_source

from .gold import (
    Case,
    ConfigOf,
    audio_inputs,
    build,
    hidden_inputs,
    clip_inputs,
    cross_text_inputs,
    detr_inputs,
    image_inputs,
    model_logits,
    musicgen_config,
    musicgen_decoder_config,
    musicgen_decoder_inputs,
    musicgen_inputs,
    our_logits,
    rms_scales,
    run,
    saved_tensors,
    seq2seq_inputs,
    speech_to_text_inputs,
    unavailable,
    whisper_inputs,
)

transformers = pytest.importorskip("transformers")

#: the tiny sizes of transformers' own tests
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99)


def _cfg(cls: str, **kw) -> ConfigOf:
    return ConfigOf(cls, kw)


BERT_ATTN = {r"encoder\.layer\.(\d+)\.attention\.self": "encoder"}
LLAMA_ATTN = {r"layers\.(\d+)\.self_attn": "decoder"}


def _llama(cls: str, n_kv: int, qk_norm: str = "", **extra) -> Case:
    config = _cfg(cls, **{**TINY, "num_key_value_heads": n_kv, **extra})
    return Case(f"{cls}-kv{n_kv}", config, cls.replace("Config", "Model"), LLAMA_ATTN, "q_proj", "k_proj", rope=True,
                qk_norm=qk_norm)


GPT2_TINY = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=32)
T5_TINY = dict(vocab_size=99, d_model=32, d_kv=6, d_ff=37, num_layers=2, num_decoder_layers=3, num_heads=4)
BART_TINY = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                 decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=32)
VISION_TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                   image_size=8, patch_size=4, num_channels=3)
AUDIO_TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
                  conv_dim=(8, 8), conv_stride=(4, 4), conv_kernel=(8, 8), num_conv_pos_embeddings=4,
                  num_conv_pos_embedding_groups=2)
SEQ2SEQ_ATTN = {r"encoder\.layers\.(\d+)\.self_attn": "encoder", r"decoder\.layers\.(\d+)\.self_attn": "decoder",
                r"decoder\.layers\.(\d+)\.encoder_attn": "cross"}
T5_ATTN = {r"encoder\.block\.(\d+)\.layer\.0\.SelfAttention": "encoder",
           r"decoder\.block\.(\d+)\.layer\.0\.SelfAttention": "decoder",
           r"decoder\.block\.(\d+)\.layer\.1\.EncDecAttention": "cross"}
VIT_ATTN = {r"(?:encoder\.layer|layers)\.(\d+)\.attention(?:\.attention)?": "encoder"}
SPEECH_ATTN = {r"encoder\.layers\.(\d+)\.attention": "encoder"}


def _bart(cls: str, **extra) -> Case:
    return Case(cls.replace("Config", "").lower(), _cfg(cls, **BART_TINY, **extra), cls.replace("Config", "Model"),
                SEQ2SEQ_ATTN, "q_proj", "k_proj", inputs=seq2seq_inputs)


def _t5(cls: str) -> Case:
    return Case(cls.replace("Config", "").lower(), _cfg(cls, **T5_TINY), cls.replace("Config", "Model"),
                T5_ATTN, "q", "k", inputs=seq2seq_inputs)


def _vision(cls: str, model: str | None = None, capture: str = "interface") -> Case:
    return Case(cls.replace("Config", "").lower(), _cfg(cls, **VISION_TINY), model or cls.replace("Config", "Model"),
                VIT_ATTN, "query|q_proj", "key|k_proj", inputs=image_inputs, capture=capture)


def _speech(cls: str, capture: str = "interface") -> Case:
    return Case(cls.replace("Config", "").lower(), _cfg(cls, **AUDIO_TINY), cls.replace("Config", "Model"),
                SPEECH_ATTN, "q_proj", "k_proj", inputs=audio_inputs, capture=capture)


CASES = [
    # bidirectional text encoders
    Case("bert", _cfg("BertConfig", **TINY), "BertModel", BERT_ATTN, "query", "key"),
    Case("bert-decoder", _cfg("BertConfig", **TINY, is_decoder=True, add_cross_attention=True), "BertModel",
         {r"encoder\.layer\.(\d+)\.attention\.self": "decoder",
          r"encoder\.layer\.(\d+)\.crossattention\.self": "cross"}, "query", "key", inputs=cross_text_inputs),
    Case("roberta-causal-lm", _cfg("RobertaConfig", **TINY, is_decoder=True), "RobertaModel",
         {r"encoder\.layer\.(\d+)\.attention\.self": "decoder"}, "query", "key"),
    Case("roberta", _cfg("RobertaConfig", **TINY), "RobertaModel", BERT_ATTN, "query", "key"),
    Case("xlm-roberta", _cfg("XLMRobertaConfig", **TINY), "XLMRobertaModel", BERT_ATTN, "query", "key"),
    Case("camembert", _cfg("CamembertConfig", **TINY), "CamembertModel", BERT_ATTN, "query", "key"),
    *[Case(cls.replace("Config", "").lower(), _cfg(cls, **TINY, **extra), cls.replace("Config", "Model"), BERT_ATTN,
           "query", "key", capture=capture)
      for cls, extra, capture in (
          ("MegatronBertConfig", {}, "matmul"), ("ErnieConfig", {}, "interface"),
          ("RemBertConfig", dict(input_embedding_size=16, output_embedding_size=16), "matmul"),
          ("XLMRobertaXLConfig", {}, "interface"), ("RobertaPreLayerNormConfig", {}, "interface"),
          ("Data2VecTextConfig", {}, "interface"))],
    Case("mpnet", _cfg("MPNetConfig", **TINY), "MPNetModel", {r"encoder\.layer\.(\d+)\.attention\.attn": "encoder"},
         "q", "k", capture="matmul"),
    Case("electra", _cfg("ElectraConfig", **TINY, embedding_size=16), "ElectraModel", BERT_ATTN, "query", "key"),
    Case("deberta-v2", _cfg("DebertaV2Config", **TINY, relative_attention=True, position_buckets=4),
         "DebertaV2Model", BERT_ATTN, "query_proj", "key_proj", capture="proj"),
    Case("deberta", _cfg("DebertaConfig", **TINY), "DebertaModel", BERT_ATTN, "in_proj", "in_proj",
         capture="matmul", prescaled=True),
    Case("distilbert", _cfg("DistilBertConfig", dim=32, n_layers=2, n_heads=4, hidden_dim=37, vocab_size=99),
         "DistilBertModel", {r"transformer\.layer\.(\d+)\.attention": "encoder"}, "q_lin", "k_lin"),
    Case("albert", _cfg("AlbertConfig", **TINY, embedding_size=16), "AlbertModel",
         {r"albert_layer_groups\.(\d+)\.albert_layers\.0\.attention": "encoder"}, "query", "key"),
    Case("modernbert", _cfg("ModernBertConfig", **TINY, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                            cls_token_id=1, sep_token_id=2), "ModernBertModel",
         {r"layers\.(\d+)\.attn": "encoder"}, "Wqkv", "Wqkv", rope=True),
    # causal decoders
    Case("gpt2", _cfg("GPT2Config", **GPT2_TINY), "GPT2Model", {r"h\.(\d+)\.attn": "decoder"}, "c_attn", "c_attn"),
    Case("openai-gpt", _cfg("OpenAIGPTConfig", **GPT2_TINY), "OpenAIGPTModel", {r"h\.(\d+)\.attn": "decoder"},
         "c_attn", "c_attn", capture="matmul"),
    Case("imagegpt", _cfg("ImageGPTConfig", **GPT2_TINY), "ImageGPTModel", {r"h\.(\d+)\.attn": "decoder"},
         "c_attn", "c_attn", capture="matmul"),
    Case("gpt-neo", _cfg("GPTNeoConfig", hidden_size=32, num_layers=2, num_heads=4, vocab_size=99,
                         attention_types=[[["global", "local"], 1]], intermediate_size=37, window_size=4),
         "GPTNeoModel", {r"h\.(\d+)\.attn\.attention": "decoder"}, "q_proj", "k_proj", capture="matmul"),
    Case("gpt-j", _cfg("GPTJConfig", **GPT2_TINY, rotary_dim=4), "GPTJModel", {r"h\.(\d+)\.attn": "decoder"},
         "q_proj", "k_proj", rope=True),
    Case("gpt-neox", _cfg("GPTNeoXConfig", **TINY), "GPTNeoXModel", {r"layers\.(\d+)\.attention": "decoder"},
         "query_key_value", "query_key_value", rope=True),
    _llama("LlamaConfig", 4),  # MHA
    _llama("LlamaConfig", 2),  # GQA
    _llama("LlamaConfig", 1),  # MQA
    _llama("LlamaConfig", 2, head_dim=16),  # explicit head_dim != d / h
    _llama("MistralConfig", 2),
    _llama("MixtralConfig", 2, num_local_experts=2, num_experts_per_tok=1, intermediate_size=48),
    _llama("Qwen2Config", 2),
    _llama("Qwen2MoeConfig", 2, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=8,
           shared_expert_intermediate_size=8),
    _llama("GemmaConfig", 1, head_dim=8),
    _llama("Gemma2Config", 2, head_dim=8),
    # QK-norm decoders: scored with fold_norms="qk", compared with the RMS normalisation held fixed
    _llama("Qwen3Config", 2, head_dim=8, qk_norm="head"),
    _llama("Qwen3MoeConfig", 2, head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=8,
           qk_norm="head"),
    _llama("Gemma3TextConfig", 1, head_dim=8, qk_norm="head"),
    _llama("Olmo2Config", 2, qk_norm="proj"),
    _llama("PhiConfig", 2),
    Case("opt", _cfg("OPTConfig", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=37,
                     vocab_size=99, word_embed_proj_dim=32), "OPTModel", LLAMA_ATTN, "q_proj", "k_proj"),
    _llama("StableLmConfig", 2),
    _llama("Starcoder2Config", 2),
    _llama("GraniteConfig", 2),
    _llama("OlmoConfig", 4),
    _llama("CohereConfig", 2),
    *[Case(f"falcon-{name}", _cfg("FalconConfig", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  vocab_size=99, alibi=False, **flags), "FalconModel",
           {r"h\.(\d+)\.self_attention": "decoder"}, "query_key_value", "query_key_value",
           capture="matmul", rope=True)
      for name, flags in (("mha", dict(multi_query=False, new_decoder_architecture=False)),
                          ("mqa", dict(multi_query=True, new_decoder_architecture=False)),
                          ("gqa", dict(new_decoder_architecture=True, num_kv_heads=2)))],
    *[Case(f"gpt_bigcode-{name}", _cfg("GPTBigCodeConfig", **GPT2_TINY, multi_query=mq), "GPTBigCodeModel",
           {r"h\.(\d+)\.attn": "decoder"}, "c_attn", "c_attn") for name, mq in (("mha", False), ("mqa", True))],
    Case("bloom", _cfg("BloomConfig", hidden_size=32, n_layer=2, n_head=4, vocab_size=99), "BloomModel",
         {r"h\.(\d+)\.self_attention": "decoder"}, "query_key_value", "query_key_value", capture="matmul"),
    Case("phi3-kv2", _cfg("Phi3Config", **TINY, num_key_value_heads=2, pad_token_id=0), "Phi3Model", LLAMA_ATTN,
         "qkv_proj", "qkv_proj", rope=True),
    Case("phi3-kv4", _cfg("Phi3Config", **TINY, pad_token_id=0), "Phi3Model", LLAMA_ATTN,
         "qkv_proj", "qkv_proj", rope=True),
    # encoder-decoder (three stacks)
    _t5("T5Config"),
    _t5("MT5Config"),
    _t5("UMT5Config"),
    _bart("BartConfig"),
    _bart("MBartConfig"),
    _bart("MarianConfig", decoder_vocab_size=99, pad_token_id=0),
    _bart("PegasusConfig"),
    Case("whisper", _cfg("WhisperConfig", **BART_TINY, num_mel_bins=8, max_source_positions=8,
                         max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                         decoder_start_token_id=1), "WhisperModel", SEQ2SEQ_ATTN, "q_proj", "k_proj",
         inputs=whisper_inputs),
    Case("speech_to_text", _cfg("Speech2TextConfig", **BART_TINY, input_feat_per_channel=8, max_source_positions=32,
                                max_target_positions=32), "Speech2TextModel", SEQ2SEQ_ATTN, "q_proj", "k_proj",
         inputs=speech_to_text_inputs),
    Case("speecht5", _cfg("SpeechT5Config", vocab_size=99, hidden_size=32, encoder_layers=2, decoder_layers=3,
                          encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=37,
                          decoder_ffn_dim=37), "SpeechT5Model",
         {r"wrapped_encoder\.layers\.(\d+)\.attention": "encoder",
          r"wrapped_decoder\.layers\.(\d+)\.self_attn": "decoder",
          r"wrapped_decoder\.layers\.(\d+)\.encoder_attn": "cross"}, "q_proj", "k_proj", inputs=hidden_inputs,
         capture="matmul"),
    Case("detr", _cfg("DetrConfig", use_timm_backbone=False, use_pretrained_backbone=False,
                      backbone_config={"model_type": "resnet", "embedding_size": 8, "hidden_sizes": [8, 8, 8, 8],
                                       "depths": [1, 1, 1, 1], "out_features": ["stage4"]},
                      **{k: v for k, v in BART_TINY.items() if k not in ("vocab_size", "max_position_embeddings")},
                      num_queries=5), "DetrModel", SEQ2SEQ_ATTN, "q_proj", "k_proj", inputs=detr_inputs),
    Case("musicgen", musicgen_config, "MusicgenForConditionalGeneration", {**T5_ATTN, **SEQ2SEQ_ATTN},
         "q|q_proj", "k|k_proj", inputs=musicgen_inputs),
    Case("musicgen_decoder", musicgen_decoder_config, "MusicgenForCausalLM", SEQ2SEQ_ATTN, "q_proj", "k_proj",
         inputs=musicgen_decoder_inputs),
    # vision and speech encoders
    _vision("ViTConfig"),
    _vision("DeiTConfig"),
    _vision("Dinov2Config"),
    _vision("BeitConfig"),
    _vision("ViTMAEConfig"),
    _vision("Data2VecVisionConfig", capture="proj"),
    _speech("Wav2Vec2Config"),
    _speech("HubertConfig"),
    _speech("Data2VecAudioConfig"),
    Case("clip", _cfg("CLIPConfig", vision_config=VISION_TINY, text_config={**TINY, "num_attention_heads": 2,
                                                                            "max_position_embeddings": 16}),
         "CLIPModel", {r"vision_model\.encoder\.layers\.(\d+)\.self_attn": "encoder",
                       r"text_model\.encoder\.layers\.(\d+)\.self_attn": "decoder"},
         "q_proj", "k_proj", inputs=clip_inputs),
    Case("git", _cfg("GitConfig", vision_config=VISION_TINY, **{**TINY, "num_hidden_layers": 3}),
         "GitModel", {r"vision_model\.encoder\.layers\.(\d+)\.self_attn": "encoder",
                      r"encoder\.layer\.(\d+)\.attention\.self": "decoder"},
         "q_proj|query", "k_proj|key", inputs=clip_inputs, capture="proj"),
    _speech("UniSpeechConfig"),
    _speech("UniSpeechSatConfig"),
    Case("wavlm", _cfg("WavLMConfig", **AUDIO_TINY), "WavLMModel", SPEECH_ATTN, "", "", inputs=audio_inputs,
         capture="mha"),
]


def _skip_if_unavailable(case: Case) -> None:
    """A family this transformers release does not have is skipped, saying which and on which release."""
    why = unavailable(case)
    if why:
        pytest.skip(why)


def _case(case_id: str) -> Case:
    case = next(c for c in CASES if c.id == case_id)
    _skip_if_unavailable(case)
    return case


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_factors_reproduce_model_logits(case: Case, tmp_path) -> None:
    _skip_if_unavailable(case)
    model, cfg = build(case)
    config = cfg.to_dict()
    spec = get_family(config)
    # the checkpoint as save_pretrained writes it (config.json + safetensors: what users score) ...
    fold = "qk" if case.qk_norm else "none"
    model.save_pretrained(tmp_path)
    with open_source(str(tmp_path)) as source:
        assert get_family(source.config) is spec
        factors = {(f.stack, f.layer): f for f in spec.iter_factors(source, fold=fold)}
        raw = {(f.stack, f.layer): f for f in spec.iter_factors(source)}  # unfolded: the RMS denominators
    # ... and the live module's state dict (transformers may rename modules on load) give the same factors
    live = {(f.stack, f.layer): f for f in spec.iter_factors(DictSource.from_module(model, config), fold=fold)}
    assert live.keys() == factors.keys()
    for key, f in live.items():
        np.testing.assert_array_equal(f.q, factors[key].q)
        np.testing.assert_array_equal(f.k, factors[key].k)

    calls = run(case, model, cfg)
    assert calls, f"{case.id}: the model made no attention call"
    assert {(c.stack, c.layer) for c in calls} == set(factors), "stacks/layers scored != stacks/layers the model runs"
    for call in calls:
        f = factors[(call.stack, call.layer)]
        assert f.q.dtype == np.float32 and f.k.dtype == np.float32
        assert f.q.shape[0] == call.query.shape[1]
        # key heads as stored, or already expanded to one per query head by the model itself (Falcon GQA)
        assert call.key.shape[1] in (f.k.shape[0], f.q.shape[0])
        want = model_logits(call, case.prescaled)
        got = our_logits(call, f.q, f.k, f.kv_index)
        if case.qk_norm:
            r = raw[(call.stack, call.layer)]
            got = got / rms_scales(call, r.q, r.k, r.kv_index, cfg.rms_norm_eps, case.qk_norm)
        scale = np.abs(want).max()
        assert scale > 1e-2, "degenerate logits: the test would prove nothing"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=f"{case.id} {call.stack} layer {call.layer}")


# -- the gold test has teeth: the layout bugs of the paper's code are caught ----------------------


def _worst_error(case: Case, spec, tmp_path, kv_map=None) -> float:
    """Largest |ours - model| / max|model| over all calls, for a given (possibly wrong) spec."""
    model, cfg = build(case)
    config = cfg.to_dict()
    factors = {(f.stack, f.layer): f for f in spec.iter_factors(DictSource(saved_tensors(model, tmp_path), config))}
    worst = 0.0
    for call in run(case, model, cfg):
        f = factors[(call.stack, call.layer)]
        kv = f.kv_index if kv_map is None else kv_map(f.n_heads, f.n_kv_heads)
        want = model_logits(call, case.prescaled)
        worst = max(worst, float(np.abs(our_logits(call, f.q, f.k, kv) - want).max() / np.abs(want).max()))
    return worst


def _with_pattern(spec, pattern: str):
    import dataclasses

    st = spec.layout[0]
    return dataclasses.replace(spec, layout=(dataclasses.replace(
        st, q=dataclasses.replace(st.q, pattern=pattern), k=dataclasses.replace(st.k, pattern=pattern)),))


WRONG_LAYOUTS = [
    ("gpt-neox", "(three h e) d -> three h d e"),  # NeoX is interleaved per head
    ("modernbert", "(h three e) d -> three h d e"),  # ModernBERT is not
    ("gpt2", "d (h three e) -> three h d e"),  # Conv1D columns are [q | k | v], not per head
    ("bert", "(e h) d -> h d e"),  # heads are the outer factor of the rows
]


@pytest.mark.parametrize("case_id,pattern", WRONG_LAYOUTS, ids=[c for c, _ in WRONG_LAYOUTS])
def test_gold_test_catches_a_wrong_layout(case_id: str, pattern: str, tmp_path) -> None:
    case = _case(case_id)
    spec = get_family(case.config().to_dict())
    assert _worst_error(case, _with_pattern(spec, pattern), tmp_path) > 1e-2


def test_gold_test_catches_the_modulo_gqa_pairing(tmp_path) -> None:
    case = _case("LlamaConfig-kv2")
    spec = get_family(case.config().to_dict())
    assert _worst_error(case, spec, tmp_path, kv_map=lambda n_q, n_kv: np.arange(n_q) % n_kv) > 1e-2


def test_gold_test_catches_falcon_groups_read_as_plain_blocks(tmp_path) -> None:
    import dataclasses

    case = _case("falcon-gqa")
    spec = get_family(case.config().to_dict())
    (st,) = spec.layout_for(case.config().to_dict())
    q, k = (dataclasses.replace(p, grouped=False) for p in (st.q, st.k))
    flat = dataclasses.replace(st, q=q, k=k)
    assert _worst_error(case, dataclasses.replace(spec, layout=(flat,), variants=()), tmp_path) > 1e-2


@pytest.mark.parametrize("case_id", ["Qwen3Config-kv2", "Gemma3TextConfig-kv1", "Olmo2Config-kv2"])
def test_gold_test_catches_unfolded_or_misread_norm_gains(case_id: str, tmp_path) -> None:
    """Scored without folding, or Gemma's gains read without their + 1, the QK-norm logits do not match."""

    case = _case(case_id)
    model, cfg = build(case)
    config = cfg.to_dict()
    spec = get_family(config)
    src = DictSource(saved_tensors(model, tmp_path), config)
    st = spec.layout[0]
    wrong_offset = dataclasses.replace(spec, layout=(dataclasses.replace(st, norm_offset=1.0 - st.norm_offset),))
    raw = {f.layer: f for f in spec.iter_factors(src)}
    for wrong in ({f.layer: f for f in spec.iter_factors(src)}, {f.layer: f for f in wrong_offset.iter_factors(src, fold="qk")}):
        worst = 0.0
        for call in run(case, model, cfg):
            f, r = wrong[call.layer], raw[call.layer]
            want = model_logits(call)
            got = our_logits(call, f.q, f.k, f.kv_index) / rms_scales(call, r.q, r.k, r.kv_index, cfg.rms_norm_eps,
                                                                       case.qk_norm)
            worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
        assert worst > 1e-2


@pytest.mark.parametrize("case_id", ["Qwen3Config-kv2", "Gemma3TextConfig-kv1"])
def test_fold_all_also_folds_the_input_norm_gain(case_id: str, tmp_path) -> None:
    """With fold "all", x_n Q'' K''^T x_n'^T on the normalised input x_n = x / gamma_in equals the "qk" form on x."""
    case = _case(case_id)
    model, cfg = build(case)
    config = cfg.to_dict()
    spec = get_family(config)
    src = DictSource(saved_tensors(model, tmp_path), config)
    qk = {f.layer: f for f in spec.iter_factors(src, fold="qk")}
    full = {f.layer: f for f in spec.iter_factors(src, fold="all")}
    offset = 1.0 if "Gemma" in case_id else 0.0  # Gemma's RMSNorm multiplies by 1 + weight
    for call in run(case, model, cfg):
        gain = model.layers[call.layer].input_layernorm.weight.detach().double() + offset
        normed = dataclasses.replace(call, x=call.x.double() / gain, xk=call.xk.double() / gain)
        want = our_logits(call, qk[call.layer].q, qk[call.layer].k, qk[call.layer].kv_index)
        got = our_logits(normed, full[call.layer].q, full[call.layer].k, full[call.layer].kv_index)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * np.abs(want).max())
