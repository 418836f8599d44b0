"""In-memory models (the notebook path): a loaded model scores exactly as the same model saved to disk."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import ConfigError, FormatError, InputError
from attnscope.geometry import score
from attnscope.sources import open_source
from attnscope.sources.loaded import LENS_MODEL_TYPE

from .conftest import models

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

NUMBERS = ["stack", "level", "layer", "head", "kv_head", "symmetry", "directionality", "frobenius_norm",
           "n_outlier_rows", "n_outlier_cols", "n_heads", "n_kv_heads", "d_model", "d_head"]  # fmt: skip


def _same_scores(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert len(a) == len(b) > 0
    pd.testing.assert_frame_equal(a[NUMBERS].reset_index(drop=True), b[NUMBERS].reset_index(drop=True))


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return models.write_model(models.bert_model(seed=3), tmp_path_factory.mktemp("mem_bert") / "bert", "single")


def test_loaded_llama_equals_saved_llama(hf_tiny_llama, hf_llama_dirs):
    disk = score(str(hf_llama_dirs["single"]))
    live = score(hf_tiny_llama)
    _same_scores(live, disk)
    assert (live["family"] == "llama").all()


def test_loaded_bert_from_disk_equals_disk(bert_dir):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(bert_dir)
    _same_scores(score(model, name="m"), score(str(bert_dir), name="m"))


def test_state_dict_with_config(hf_tiny_llama, hf_llama_dirs):
    disk = score(str(hf_llama_dirs["single"]))
    sd = hf_tiny_llama.state_dict()
    _same_scores(score(sd, config=hf_tiny_llama.config), disk)  # a transformers config
    _same_scores(score(sd, config=hf_tiny_llama.config.to_dict()), disk)  # a plain dict


def test_half_precision_module_is_upcast_per_layer(hf_tiny_llama):
    import copy

    half = copy.deepcopy(hf_tiny_llama).to(torch.bfloat16)
    a, b = score(half), score(hf_tiny_llama)
    np.testing.assert_allclose(a["symmetry"], b["symmetry"], atol=0.02)
    # the original module is untouched and no tensor was converted in place
    assert next(half.parameters()).dtype == torch.bfloat16


def test_attnscope_transformer_equals_its_checkpoint(tmp_path):
    from attnscope.training.model import ModelConfig, Transformer, save_model

    for tie in (False, True):
        model = Transformer(ModelConfig(n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_ff=64, vocab_size=50,
                                        max_seq_len=16, causal=True, tie_qk=tie))
        ckpt = save_model(model, tmp_path / f"ckpt{tie}")
        live = score(model)
        _same_scores(live, score(str(ckpt)))
        assert (live["family"] == "attnscope").all()


class _Cfg:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _FakeLens:
    """The TransformerLens surface attnscope reads: W_Q / W_K [layer, head, d_model, d_head] and cfg."""

    def __init__(self, wq, wk, n_kv=None):
        self.W_Q, self.W_K = wq, wk
        self.cfg = _Cfg(model_name="fake-lens", n_key_value_heads=n_kv)


def _lens_weights(model):
    """W_Q [l, h, d, e], W_K [l, g, d, e] from a HF llama, written independently of attnscope's layouts."""
    cfg = model.config
    h, g, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size
    e = d // h
    wq = torch.stack([lay.self_attn.q_proj.weight.detach().reshape(h, e, d).transpose(1, 2) for lay in model.model.layers])
    wk = torch.stack([lay.self_attn.k_proj.weight.detach().reshape(g, e, d).transpose(1, 2) for lay in model.model.layers])
    return wq, wk


@pytest.mark.parametrize("expanded", [False, True])
def test_lens_object_equals_hf(hf_tiny_llama, expanded):
    wq, wk = _lens_weights(hf_tiny_llama)
    g = wk.shape[1]
    if expanded:  # TransformerLens repeats the kv heads up to n_heads
        wk = wk.repeat_interleave(wq.shape[1] // g, dim=1)
    live = score(_FakeLens(wq, wk, n_kv=g))
    _same_scores(live, score(hf_tiny_llama))
    assert (live["family"] == "transformer_lens").all() and (live["model"] == "fake-lens").all()
    assert open_source(_FakeLens(wq, wk, n_kv=g)).config["model_type"] == LENS_MODEL_TYPE


def test_lens_object_read_per_block_never_touches_the_stacked_view(hf_tiny_llama):
    wq, wk = _lens_weights(hf_tiny_llama)

    class Blocks(_FakeLens):
        @property
        def W_Q(self):  # noqa: N802 - the stacked copy a real HookedTransformer builds
            raise AssertionError("stacked W_Q read")

        W_K = W_Q

        def __init__(self):
            self.cfg = _Cfg(model_name="blocks", n_key_value_heads=wk.shape[1])
            self.blocks = [_Cfg(attn=_Cfg(W_Q=wq[i], W_K=wk[i])) for i in range(wq.shape[0])]

    _same_scores(score(Blocks()), score(hf_tiny_llama))


def test_lens_expanded_keys_that_are_not_repeats_are_refused(hf_tiny_llama):
    wq, _ = _lens_weights(hf_tiny_llama)
    with pytest.raises(FormatError, match="not 2 groups of 2 repeated heads"):
        score(_FakeLens(wq, torch.randn_like(wq), n_kv=2))
    with pytest.raises(ConfigError, match="cannot be grouped"):
        score(_FakeLens(wq, wq, n_kv=3))


@pytest.mark.parametrize(
    ("obj", "kwargs", "match"),
    [
        (object(), {}, "cannot read weights from a object; accepted: .*state dict"),
        (42, {}, "cannot read weights from a int"),
        ({"a.weight": "x"}, {}, "cannot read weights from a dict"),
        ({"a.weight": None}, {"config": {"model_type": "llama"}}, "cannot read weights from a dict"),
    ],
)
def test_other_objects_are_one_input_error(obj, kwargs, match):
    with pytest.raises(InputError, match=match):
        score(obj, **kwargs)


def test_state_dict_without_config(hf_tiny_llama):
    with pytest.raises(InputError, match="a state dict needs config="):
        score(hf_tiny_llama.state_dict())
    with pytest.raises(InputError, match="config must be a dict"):
        score(hf_tiny_llama.state_dict(), config=3)
    with pytest.raises(ConfigError, match="no model_type"):
        score(hf_tiny_llama.state_dict(), config={"hidden_size": 32})


def test_module_without_config():
    with pytest.raises(InputError, match="Linear has no .config; pass config="):
        score(torch.nn.Linear(2, 2))


def test_config_is_refused_for_paths(hf_llama_dirs):
    with pytest.raises(InputError, match="config= is only for in-memory models"):
        score(str(hf_llama_dirs["single"]), config={"model_type": "llama"})

