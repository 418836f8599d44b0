"""Gold test for every family: our W_q, W_k reproduce each model's own pre-softmax logits, head by head.

One table of cases (tiny random models from the real Hugging Face config classes, no download); one
test. See gold.py for how the model's own per-head queries and keys are captured.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnscope.families import get_family
from attnscope.sources import DictSource

from .gold import Case, audio_inputs, build, image_inputs, model_logits, our_logits, run, seq2seq_inputs, whisper_inputs

transformers = pytest.importorskip("transformers")

#: the tiny sizes of transformers' own tests
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99)


def _cfg(cls: str, **kw):
    return lambda: getattr(transformers, cls)(**kw)


BERT_ATTN = {r"encoder\.layer\.(\d+)\.attention\.self": "encoder"}
LLAMA_ATTN = {r"layers\.(\d+)\.self_attn": "decoder"}


def _llama(cls: str, n_kv: int, **extra) -> Case:
    return Case(f"{cls}-kv{n_kv}", _cfg(cls, **TINY, num_key_value_heads=n_kv, **extra), cls.replace("Config", "Model"),
                LLAMA_ATTN, "q_proj", "k_proj", rope=True)


CASES = [
    Case("bert", _cfg("BertConfig", **TINY), "BertModel", BERT_ATTN, "query", "key"),
    _llama("LlamaConfig", 4),  # MHA
    _llama("LlamaConfig", 2),  # GQA
    _llama("LlamaConfig", 1),  # MQA
    _llama("LlamaConfig", 2, head_dim=16),  # explicit head_dim != d / h
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_factors_reproduce_model_logits(case: Case) -> None:
    model, cfg = build(case)
    config = cfg.to_dict()
    source = DictSource(model.state_dict(), config, name=case.id)
    spec = get_family(config)
    factors = {(f.stack, f.layer): f for f in spec.iter_factors(source)}

    calls = run(case, model, cfg)
    assert calls, f"{case.id}: the model made no attention call"
    assert {(c.stack, c.layer) for c in calls} == set(factors), "stacks/layers scored != stacks/layers the model runs"
    for call in calls:
        f = factors[(call.stack, call.layer)]
        assert f.q.dtype == np.float32 and f.k.dtype == np.float32
        assert f.q.shape[0] == call.query.shape[1] and f.k.shape[0] == call.key.shape[1]
        want = model_logits(call)
        got = our_logits(call, f.q, f.k, f.kv_index)
        scale = np.abs(want).max()
        assert scale > 1e-2, "degenerate logits: the test would prove nothing"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=f"{case.id} {call.stack} layer {call.layer}")
