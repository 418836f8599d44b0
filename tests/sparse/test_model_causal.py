"""A causal sparse MODEL (the training lab's Transformer with attn_pattern) cannot see the future."""

from __future__ import annotations

import pytest
import torch

from attnscope.training import model as model_mod


@pytest.mark.parametrize("pattern", ["byte-sparse-8h", None])
def test_changing_a_future_byte_leaves_earlier_outputs_unchanged(pattern):
    torch.manual_seed(0)
    cfg = model_mod.ModelConfig(
        n_layers=2, n_heads=8, d_model=32, d_ff=64, vocab_size=256, max_seq_len=96, causal=True,
        norm="pre", dropout=0.0, attn_pattern=pattern,
    )
    model = model_mod.Transformer(cfg).eval()
    idx = torch.randint(0, 256, (1, 96))
    cut = 60
    idx2 = idx.clone()
    idx2[0, cut] = (idx[0, cut] + 1) % 256
    with torch.no_grad():
        a, b = model(idx), model(idx2)
    torch.testing.assert_close(a[:, :cut], b[:, :cut], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, cut:], b[:, cut:])


def test_sparse_model_maps_respect_the_pattern():
    from attnscope.sparse import dense_mask

    torch.manual_seed(1)
    cfg = model_mod.ModelConfig(
        n_layers=1, n_heads=8, d_model=32, d_ff=64, vocab_size=256, max_seq_len=64, causal=True,
        norm="pre", dropout=0.0, attn_pattern="byte-sparse-8h",
    )
    model = model_mod.Transformer(cfg).eval()
    with torch.no_grad():
        _, maps = model(torch.randint(0, 256, (2, 64)), return_attn=True)
    mask = dense_mask("byte-sparse-8h", 64, causal=True)
    assert (maps[0].masked_select(~mask.expand_as(maps[0])) == 0).all()
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 8, 64))


def test_model_loads_a_pattern_file(tmp_path):
    """A spec file (as written by `attnscope heads derive`) works as the model's attn_pattern."""
    from attnscope.sparse import HeadPattern, Pattern, dense_mask

    path = Pattern(heads=(HeadPattern(window=2),) * 2 + (HeadPattern(stride=4, positions=(0,)),) * 2).save(tmp_path / "p.yaml")
    cfg = model_mod.ModelConfig(
        n_layers=1, n_heads=4, d_model=16, d_ff=32, vocab_size=256, max_seq_len=24, causal=True,
        norm="pre", dropout=0.0, attn_pattern=str(path),
    )
    torch.manual_seed(2)
    with torch.no_grad():
        _, maps = model_mod.Transformer(cfg).eval()(torch.randint(0, 256, (1, 24)), return_attn=True)
    mask = dense_mask(str(path), 24, causal=True)
    assert (maps[0].masked_select(~mask.expand_as(maps[0])) == 0).all()


def test_a_pattern_file_edited_while_a_model_runs_does_not_change_it(tmp_path):
    """The model reads its pattern file at its first call and keeps it: an edit mid-run (sparse_attention itself
    reads an edited file again) must not change a running model's attention; a model built after the edit reads
    the new file."""
    path = tmp_path / "p.yaml"
    path.write_text("all: {window: 2}\n")
    cfg = model_mod.ModelConfig(n_layers=1, n_heads=2, d_model=16, d_ff=32, vocab_size=256, max_seq_len=24,
                                causal=True, norm="pre", dropout=0.0, attn_pattern=str(path))
    torch.manual_seed(2)
    model = model_mod.Transformer(cfg).eval()
    x = torch.randint(0, 256, (1, 24))
    with torch.no_grad():
        before = model(x)
        path.write_text("all: {window: 0, stride: 5}\n")
        torch.testing.assert_close(model(x), before)
        fresh = model_mod.Transformer(cfg).eval()
        fresh.load_state_dict(model.state_dict())
        assert not torch.allclose(fresh(x), before)
