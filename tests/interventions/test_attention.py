"""The registered attention function on tiny random models of every family (no download): exact without an
intervention, sym + anti = the scores, W_q = W_k heads, one batched forward = one head at a time."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _requires import skip_unless_bert_calls_the_interface  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")

V, L = 50, 12
HEADS = 4


def _models():
    import torch
    from transformers import (BertConfig, BertModel, Gemma3ForCausalLM, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel,
                              LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM)

    torch.manual_seed(0)
    small = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_attention_heads=HEADS, attn_implementation="eager")
    return {
        "llama": lambda: LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, num_key_value_heads=2, **small)),
        "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=2, num_key_value_heads=2, **small)),
        # local (sliding window 4 < 12 tokens) and global layers, one key/value head for four query heads
        "gemma3": lambda: Gemma3ForCausalLM(Gemma3TextConfig(
            num_hidden_layers=3, num_key_value_heads=1, head_dim=8, sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], **small)),
        "gpt2": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=HEADS, bos_token_id=0,
                                                   eos_token_id=0, attn_implementation="eager")),
        "bert": lambda: BertModel(BertConfig(num_hidden_layers=2, **small)),
    }


FAMILIES = ("llama", "qwen2", "gemma3", "gpt2", "bert")


def _model(family: str):
    import torch

    if family == "bert":
        skip_unless_bert_calls_the_interface()
    torch.manual_seed(1)
    return _models()[family]().eval()


def _ids(seed: int = 0):
    import torch

    return torch.randint(0, V, (1, L), generator=torch.Generator().manual_seed(seed))


def _run(model, ids, plan=None, layer=None, copies=1):
    """The model's first output (logits, or last hidden state of an encoder) with ``plan``."""
    import torch

    from attnscope.interventions.attention import expand_at, layer_list, patched

    with torch.no_grad(), patched(model) as ctl:
        if plan is not None:
            ctl.plan = plan
        if layer is None:
            return model(ids)[0]
        with expand_at(layer_list(model), layer, copies):
            return model(ids)[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_no_intervention_is_the_models_own_forward(family):
    import torch

    from attnscope.interventions.attention import Plan

    model = _model(family)
    ids = _ids()
    with torch.no_grad():
        ref = model(ids)[0]
    seen = []
    got = _run(model, ids, Plan(on_maps=lambda layer, p: seen.append(layer)))
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-6)
    assert seen == list(range(len(seen))) and len(seen) == model.config.num_hidden_layers  # it ran, every layer
    assert model.config._attn_implementation == "eager"  # put back
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[0], ref, rtol=0, atol=0)


def _scores(model, ids, layer, kind):
    """[c, h, i, j] q'.k' of ``layer`` with copy c intervening ``kind`` on head c (k repeated to the heads)."""
    from attnscope.interventions.attention import Plan

    got = {}

    def keep(_layer, q, k):
        got["s"] = q @ k.repeat_interleave(q.shape[1] // k.shape[1], dim=1).transpose(-1, -2)

    _run(model, ids, Plan(layer=layer, copies=[(kind, h) for h in range(HEADS)], on_scores=keep), layer, HEADS)
    return got["s"]


@pytest.mark.parametrize("family", FAMILIES)
def test_sym_plus_anti_is_the_scores_and_each_has_its_symmetry(family):
    import torch

    model = _model(family)
    ids = _ids(3)
    layer = model.config.num_hidden_layers - 1
    clean = _scores(model, ids, layer, "ablate")  # an output intervention leaves the scores as they are
    sym, anti = _scores(model, ids, layer, "sym"), _scores(model, ids, layer, "anti")
    for h in range(HEADS):
        s, a, c = sym[h, h], anti[h, h], clean[h, h]
        torch.testing.assert_close(s + a, c, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(s, s.T, rtol=0, atol=1e-5)
        torch.testing.assert_close(a, -a.T, rtol=0, atol=1e-5)
        assert (a - c).abs().max() > 1e-3  # a random head is not symmetric
        for other in set(range(HEADS)) - {h}:  # the other heads of the copy keep their scores
            torch.testing.assert_close(sym[h, other], clean[h, other], rtol=1e-5, atol=1e-5)


def _tie_query_to_key(model, family: str, layer: int, head: int) -> None:
    """Make W_q = W_k (and the biases, norms) of ``head`` of ``layer``: its scores become symmetric."""
    import torch

    from attnscope.interventions.attention import layer_list

    block = layer_list(model)[layer]
    with torch.no_grad():
        if family == "gpt2":
            e = model.config.n_embd
            d = e // HEADS
            w, b = block.attn.c_attn.weight, block.attn.c_attn.bias  # Conv1D [e, 3e]: q | k | v
            w[:, head * d : (head + 1) * d] = w[:, e + head * d : e + (head + 1) * d]
            b[head * d : (head + 1) * d] = b[e + head * d : e + (head + 1) * d]
            return
        if family == "bert":
            att = block.attention.self
            q, k, d = att.query, att.key, att.attention_head_size
            kv = head
        else:
            att = block.self_attn
            q, k, d = att.q_proj, att.k_proj, att.head_dim
            kv = head // att.num_key_value_groups
            if hasattr(att, "q_norm"):
                att.q_norm.weight.copy_(att.k_norm.weight)
        q.weight[head * d : (head + 1) * d] = k.weight[kv * d : (kv + 1) * d]
        if q.bias is not None:
            q.bias[head * d : (head + 1) * d] = k.bias[kv * d : (kv + 1) * d]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_head_with_wq_equal_wk_is_unchanged_by_sym_and_has_zero_anti_scores(family):
    import torch

    from attnscope.interventions.attention import Plan

    model = _model(family)
    layer, head = 0, 1
    _tie_query_to_key(model, family, layer, head)
    ids = _ids(5)
    clean = _run(model, ids)
    sym = _run(model, ids, Plan(layer=layer, copies=[("sym", head)]), layer, 1)
    torch.testing.assert_close(sym, clean, rtol=1e-4, atol=1e-5)
    anti = _scores(model, ids, layer, "anti")
    assert anti[head, head].abs().max() < 1e-5
    maps = {}
    _run(model, ids, Plan(layer=layer, copies=[("anti", head)], on_maps=lambda _l, p: maps.update(p=p[0, 0])), layer, 1)
    p = maps["p"]  # zero scores: uniform over the keys the mask leaves (causal rows 1/(i+1), or 1/L)
    visible = (p > 0).sum(-1, keepdim=True).float()
    torch.testing.assert_close(p, torch.where(p > 0, 1 / visible, torch.zeros_like(p)), rtol=1e-5, atol=1e-6)
    sym_scores = _scores(model, ids, layer, "sym")  # an untied (random) head of the same layer has an anti part
    assert anti[0, 0].abs().max() > 1e-2 * sym_scores[0, 0].abs().max()


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2"])
def test_one_batched_forward_equals_one_head_at_a_time(family):
    import torch

    from attnscope.interventions.attention import Plan

    model = _model(family)
    ids = _ids(7)
    layer = 1
    means = {layer: torch.randn(HEADS, 8 if family == "gemma3" else 32 // HEADS)}
    copies = [(k, h) for k in ("sym", "anti", "ablate", "mean") for h in range(HEADS)]
    batched = _run(model, ids, Plan(layer=layer, copies=copies, means=means), layer, len(copies))
    for ci, copy in enumerate(copies):
        single = _run(model, ids, Plan(layer=layer, copies=[copy], means=means), layer, 1)
        torch.testing.assert_close(batched[ci], single[0], rtol=1e-4, atol=1e-5)


def test_ablating_a_head_is_zeroing_its_slice_of_the_output_projection():
    """ablate = the head's columns of o_proj set to 0 in an unpatched model (an independent route)."""
    import torch

    from attnscope.interventions.attention import Plan, layer_list

    model = _model("llama")
    ids = _ids(9)
    got = _run(model, ids, Plan(layer=1, copies=[("ablate", 2)]), 1, 1)
    d = model.config.hidden_size // HEADS
    with torch.no_grad():
        layer_list(model)[1].self_attn.o_proj.weight[:, 2 * d : 3 * d] = 0
        ref = model(ids)[0]
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [64, 4])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_layers_around_the_intervened_one_are_the_models_own(family, block, monkeypatch):
    """In an intervention forward the other layers run the fused SDPA kernel (by blocks of ``block`` queries,
    each given the keys its mask reaches): a clean copy still equals the unpatched model's output, and the
    intervened copy equals the same intervention in an all-eager run."""
    import torch

    from attnscope.interventions import attention
    from attnscope.interventions.attention import CLEAN, Plan

    monkeypatch.setattr(attention, "SDPA_BLOCK", block)
    model = _model(family)
    ids = _ids(13)
    with torch.no_grad():
        ref = model(ids)[0]
    layer = 1 if model.config.num_hidden_layers > 2 else 0
    plan = Plan(layer=layer, copies=[(CLEAN, -1), ("sym", 2), ("ablate", 1)])
    got = _run(model, ids, plan, layer, 3)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-5)
    calls, masked = [], []
    real = attention._sdpa
    attention._sdpa = lambda: (lambda *a, **k: calls.append(1) or masked.append(a[4] is not None and a[4].dim() == 4)
                               or attention._own_eager(a[0])(*a, **k))
    try:
        eager = _run(model, ids, plan, layer, 3)
    finally:
        attention._sdpa = real
    layers = model.config.num_hidden_layers  # every layer (the intervened one for its other heads) ...
    blocked = block < L and family != "bert" and all(masked)  # ... by blocks if causal and given a 4-d mask
    assert len(calls) > layers if blocked else len(calls) == layers, (len(calls), layers, masked)
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_one_head_through_eager_equals_every_head_through_eager(family):
    """The intervened layer runs each copy's own head alone through the eager function (the rest SDPA);
    with ``on_scores`` set every head goes through it. Outputs and the copies' maps agree."""
    import torch

    from attnscope.interventions.attention import CLEAN, Plan

    model = _model(family)
    ids = _ids(17)
    layer = 1
    means = {layer: torch.randn(HEADS, 8 if family == "gemma3" else 32 // HEADS)}
    copies = [(CLEAN, -1), ("sym", 0), ("anti", 3), ("ablate", 2), ("mean", 1), ("sym", 2)]
    maps = {}
    fast = _run(model, ids, Plan(layer=layer, copies=copies, means=means, on_maps=lambda _l, p: maps.update(fast=p)),
                layer, len(copies))
    every = _run(model, ids, Plan(layer=layer, copies=copies, means=means, on_scores=lambda *a: None,
                                  on_maps=lambda _l, p: maps.update(every=p)), layer, len(copies))
    torch.testing.assert_close(fast, every, rtol=1e-5, atol=1e-5)
    assert maps["fast"].shape == maps["every"].shape == (1, 3, L, L)  # the three score copies, in order
    torch.testing.assert_close(maps["fast"], maps["every"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mask_kind", ["causal", "sliding", "bool", "padded", "full"])
def test_attention_by_query_blocks_is_one_call_over_every_key(mask_kind, monkeypatch):
    """:func:`_fused` against one call of transformers' SDPA function: causal, sliding-window and boolean masks
    are cut into blocks that leave out keys no query of theirs sees; a row that sees no key, or a mask that
    hides nothing, is one call."""
    import torch

    from attnscope.interventions import attention

    g = torch.Generator().manual_seed(0)
    c, h, n, d = 3, 4, 150, 8
    q, k, v = (torch.randn(c, h, n, d, generator=g) for _ in range(3))
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = {"causal": j <= i, "sliding": (j <= i) & (j > i - 20), "bool": j <= i, "padded": (j <= i) & (i > 0),
               "full": torch.ones(n, n, dtype=torch.bool)}[mask_kind]
    low = torch.finfo(torch.float32).min
    mask = (allowed if mask_kind == "bool" else torch.zeros(n, n).masked_fill(~allowed, low))[None, None]
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups, module.training = False, 1, False
    sdpa = attention._sdpa()
    calls = []
    monkeypatch.setattr(attention, "_sdpa", lambda: (lambda *a, **kw: calls.append(a[2].shape[2]) or sdpa(*a, **kw)))
    got = attention._fused(module, q, k, v, mask, {"scaling": 0.3, "dropout": 0.0})
    want = sdpa(module, q, k, v, mask, scaling=0.3, dropout=0.0)[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    if mask_kind in ("padded", "full"):
        assert calls == [n]  # one call, every key
    else:
        assert len(calls) == 3 and calls[0] == 64 and calls[-1] == n  # blocks of 64 queries, each to its last key
