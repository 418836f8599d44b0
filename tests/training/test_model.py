"""The training model: shapes, attention maps vs the SDPA path, masking, GQA, positions, inits, save/load."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import ConfigError, FormatError, InputError
from attnscope.training.model import (
    PRESETS,
    ModelConfig,
    Transformer,
    export_state_dict,
    init_weights,
    load_model,
    preset_config,
    save_model,
)


def tiny(**kw) -> ModelConfig:
    base = dict(n_layers=2, n_heads=4, d_model=32, d_ff=64, vocab_size=50, max_seq_len=32, dropout=0.0)
    base.update(kw)
    return ModelConfig(**base).validate()


def reference_attention_maps(model: Transformer, idx: torch.Tensor) -> list[torch.Tensor]:
    """Slow reference: recompute each layer's softmax(q k^T / sqrt(e)) by hand from the weights."""
    cfg = model.config
    maps = []

    def hook(block, args, _out):
        x = args[0]
        if block.pre:
            x = block.ln1(x)
        attn = block.attn
        wq, bq = attn.q_weight()
        b, t, _ = x.shape
        q = (x @ wq.T + bq).view(b, t, cfg.n_heads, cfg.d_head)
        k = attn.k_proj(x).view(b, t, cfg.n_kv_heads, cfg.d_head)
        out = torch.zeros(b, cfg.n_heads, t, t)
        r = cfg.n_heads // cfg.n_kv_heads
        for h in range(cfg.n_heads):
            for i in range(t):
                for j in range(t):
                    out[:, h, i, j] = (q[:, i, h] * k[:, j, h // r]).sum(-1) / math.sqrt(cfg.d_head)
        if cfg.causal:
            out = out.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        maps.append(out.softmax(-1))

    handles = [blk.register_forward_hook(hook) for blk in model.blocks]
    with torch.no_grad():
        model(idx)
    for hd in handles:
        hd.remove()
    return maps


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("n_kv", [4, 2, 1])
def test_return_attn_matches_sdpa_and_reference(causal, norm, n_kv):
    torch.manual_seed(0)
    model = Transformer(tiny(causal=causal, norm=norm, n_kv_heads=n_kv)).eval()
    idx = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        logits = model(idx)
        logits2, maps = model(idx, return_attn=True)
    assert logits.shape == (2, 9, 50)
    torch.testing.assert_close(logits, logits2, atol=1e-5, rtol=1e-5)
    ref = reference_attention_maps(model, idx)
    assert len(maps) == 2
    for m, r in zip(maps, ref):
        assert m.shape == (2, 4, 9, 9)
        torch.testing.assert_close(m, r, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(m.sum(-1), torch.ones(2, 4, 9))
        if causal:
            assert float(m.triu(1).abs().max()) == 0.0


def test_attn_callback_streams_each_layer_once():
    model = Transformer(tiny(n_layers=3)).eval()
    seen = []
    with torch.no_grad():
        out = model(torch.randint(0, 50, (1, 5)), attn_callback=lambda layer, p: seen.append((layer, p.shape)))
    assert isinstance(out, torch.Tensor)
    assert seen == [(0, (1, 4, 5, 5)), (1, (1, 4, 5, 5)), (2, (1, 4, 5, 5))]


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rotary"])
def test_causal_model_ignores_the_future(pos):
    torch.manual_seed(1)
    model = Transformer(tiny(causal=True, pos=pos)).eval()
    a = torch.randint(0, 50, (1, 10))
    b = a.clone()
    b[0, 6:] = (b[0, 6:] + 7) % 50
    with torch.no_grad():
        la, lb = model(a), model(b)
    torch.testing.assert_close(la[:, :6], lb[:, :6], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(la[:, 6:], lb[:, 6:])


def test_encoder_sees_both_directions():
    torch.manual_seed(1)
    model = Transformer(tiny(causal=False)).eval()
    a = torch.randint(0, 50, (1, 10))
    b = a.clone()
    b[0, 9] = (b[0, 9] + 1) % 50
    with torch.no_grad():
        assert not torch.allclose(model(a)[:, 0], model(b)[:, 0])


def test_rotary_logits_depend_only_on_relative_offset():
    """With rotary positions, q_i . k_j depends on i - j: shifting a repeated token keeps the map."""
    torch.manual_seed(2)
    model = Transformer(tiny(pos="rotary", n_layers=1)).eval()
    idx = torch.full((1, 8), 3)
    with torch.no_grad():
        _, maps = model(idx, return_attn=True)
    m = maps[0][0, 0]
    # identical tokens: entries on each diagonal of the logit matrix agree, so rows 2 and 3 restricted
    # to offsets -2..+2 are the same distribution up to the normalisation over the window
    assert torch.allclose(m[2, :5] / m[2, :5].sum(), m[3, 1:6] / m[3, 1:6].sum(), atol=1e-5)


def test_tied_output_embedding_and_param_count():
    model = Transformer(tiny())
    assert model.lm_head.weight.data_ptr() == model.tok_emb.weight.data_ptr()
    untied = Transformer(tiny(tie_embeddings=False))
    assert untied.num_params() == model.num_params() + 50 * 32


def test_presets_match_the_issue():
    assert {k: (v["n_layers"], v["n_heads"], v["d_model"], v["d_ff"]) for k, v in PRESETS.items()} == {
        "bert-mini": (4, 4, 256, 1024),
        "bert-base": (12, 12, 768, 3072),
        "bert-large": (24, 16, 1024, 4096),
        "byte-12l": (12, 8, 512, 2048),
    }
    cfg = preset_config("byte-12l")
    assert (cfg.max_seq_len, cfg.vocab_size, cfg.d_head) == (1024, 256, 64)
    # bert-mini with the BERT vocabulary has the paper's 11.2M parameters (within a LayerNorm-head's worth)
    n = Transformer(preset_config("bert-mini", vocab_size=30522)).num_params()
    assert abs(n - 11.2e6) < 0.2e6


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(d_model=30, n_heads=4), "not divisible"),
        (dict(n_kv_heads=3), "multiple of n_kv_heads"),
        (dict(norm="mid"), "norm must be"),
        (dict(pos="alibi"), "pos must be"),
        (dict(n_layers=0), "positive"),
    ],
)
def test_bad_configs_are_one_line_errors(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        tiny(**kw)


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset 'bert-huge'"):
        preset_config("bert-huge")


def test_too_long_input():
    with pytest.raises(InputError, match="max_seq_len"):
        Transformer(tiny())(torch.zeros(1, 33, dtype=torch.long))


def _wqk(model: Transformer, layer: int) -> list[np.ndarray]:
    """Per-head W_q W_k^T (d x d) computed explicitly from nn.Linear weights."""
    attn = model.blocks[layer].attn
    cfg = model.config
    wq, _ = attn.q_weight()
    wq = wq.detach().view(cfg.n_heads, cfg.d_head, -1)
    wk = attn.k_proj.weight.detach().view(cfg.n_kv_heads, cfg.d_head, -1)
    r = cfg.n_heads // cfg.n_kv_heads
    return [(wq[h].T @ wk[h // r]).numpy() for h in range(cfg.n_heads)]


@pytest.mark.parametrize("init", ["symmetric", "symmetric-paper"])
@pytest.mark.parametrize("n_kv", [4, 2])
def test_symmetric_inits_make_every_head_symmetric_psd(init, n_kv):
    model = Transformer(tiny(n_kv_heads=n_kv))
    init_weights(model, init, generator=torch.Generator().manual_seed(0))
    for layer in range(2):
        for m in _wqk(model, layer):
            np.testing.assert_allclose(m, m.T, atol=1e-6)
            assert np.linalg.eigvalsh(m.astype(np.float64)).min() > -1e-6
        attn = model.blocks[layer].attn
        r = 4 // n_kv
        torch.testing.assert_close(attn.q_proj.bias.view(4, -1), attn.k_proj.bias.view(n_kv, -1).repeat_interleave(r, 0))


def test_default_and_symmetric_share_the_draw_but_paper_does_not():
    def build(init):
        m = Transformer(tiny())
        init_weights(m, init, generator=torch.Generator().manual_seed(0))
        return m

    d, s, p = build("default"), build("symmetric"), build("symmetric-paper")
    torch.testing.assert_close(d.blocks[0].attn.k_proj.weight, s.blocks[0].attn.k_proj.weight)
    torch.testing.assert_close(d.blocks[1].mlp.up.weight, s.blocks[1].mlp.up.weight)
    assert float(d.blocks[0].attn.q_proj.bias.detach().abs().max()) == 0.0
    assert float(p.blocks[0].attn.k_proj.bias.detach().abs().max()) > 0.0  # PyTorch-default random biases
    assert float(d.blocks[0].attn.k_proj.weight.detach().std()) == pytest.approx(0.02, rel=0.1)
    assert float(p.blocks[0].attn.k_proj.weight.detach().std()) == pytest.approx(1 / math.sqrt(3 * 32), rel=0.1)
    # residual projections are scaled by 1/sqrt(2 n_layers)
    assert float(d.blocks[0].attn.o_proj.weight.detach().std()) == pytest.approx(0.02 / 2, rel=0.15)


def test_tie_qk_stays_tied_under_training():
    torch.manual_seed(0)
    model = Transformer(tiny(tie_qk=True, n_kv_heads=2))
    assert not hasattr(model.blocks[0].attn, "q_proj")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        loss = model(torch.randint(0, 50, (2, 8))).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    for m in _wqk(model, 0):
        np.testing.assert_allclose(m, m.T, atol=1e-6)
    sd = export_state_dict(model)
    assert sd["blocks.0.attn.q_proj.weight"].shape == (32, 32)


@pytest.mark.parametrize("kw", [dict(), dict(tie_qk=True), dict(tie_embeddings=False, pos="rotary", norm="pre")])
def test_save_load_round_trip(tmp_path, kw):
    torch.manual_seed(3)
    model = Transformer(tiny(**kw)).eval()
    save_model(model, tmp_path / "ckpt", extra_config={"tokenizer": "bytes"})
    loaded, cfg = load_model(tmp_path / "ckpt")
    assert cfg == model.config and not loaded.training
    idx = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(loaded(idx), model(idx))


def test_load_model_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        load_model(tmp_path)
    model = Transformer(tiny())
    save_model(model, tmp_path / "c")
    (tmp_path / "c" / "model.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(FormatError, match="corrupt"):
        load_model(tmp_path / "c")


def test_sparse_pattern_model_runs_or_says_unsupported():
    cfg = tiny(n_heads=8, d_model=64, causal=True, attn_pattern="byte-sparse-8h")
    model = Transformer(cfg).eval()
    with torch.no_grad():
        logits, maps = model(torch.randint(0, 50, (1, 12)), return_attn=True)
    assert logits.shape == (1, 12, 50)
    assert float(maps[0].triu(1).abs().max()) == 0.0  # causal AND pattern: no future


@settings(max_examples=15, deadline=None)
@given(
    n_kv=st.sampled_from([1, 2, 4]),
    t=st.integers(1, 12),
    causal=st.booleans(),
    pos=st.sampled_from(["learned", "sinusoidal", "rotary"]),
    seed=st.integers(0, 10_000),
)
def test_property_maps_are_distributions_and_paths_agree(n_kv, t, causal, pos, seed):
    torch.manual_seed(seed)
    model = Transformer(tiny(n_kv_heads=n_kv, causal=causal, pos=pos)).eval()
    idx = torch.randint(0, 50, (2, t))
    with torch.no_grad():
        a = model(idx)
        b, maps = model(idx, return_attn=True)
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    for m in maps:
        assert torch.all(m >= 0)
        torch.testing.assert_close(m.sum(-1), torch.ones(2, 4, t), atol=1e-5, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(g=st.integers(1, 4), r=st.integers(1, 4), dim=st.integers(0, 2))
def test_repeat_kv_gives_query_head_h_its_kv_head_h_over_r(g, r, dim):
    from attnscope.training.model import repeat_kv

    shape = [3, 3, 3]
    shape[dim] = g
    x = torch.randn(shape)
    out = repeat_kv(x, r, dim=dim)
    assert out.shape[dim] == g * r
    for h in range(g * r):  # the explicit rule, head by head
        assert torch.equal(out.select(dim, h), x.select(dim, h // r))


@pytest.mark.parametrize("n_kv", [4, 2, 1])
def test_expanded_k_is_the_kv_head_of_every_query_head(n_kv):
    cfg = tiny(n_kv_heads=n_kv)
    attn = Transformer(cfg).blocks[0].attn
    w, b = attn.expanded_k()
    r, e = cfg.n_heads // n_kv, cfg.d_head
    for h in range(cfg.n_heads):
        g = h // r
        assert torch.equal(w[h * e : (h + 1) * e], attn.k_proj.weight[g * e : (g + 1) * e])
        assert torch.equal(b[h * e : (h + 1) * e], attn.k_proj.bias[g * e : (g + 1) * e])
