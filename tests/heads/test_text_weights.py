"""A head's weights on real text: the views the atlas keeps (top-k per query) and text_weights on a user's text."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import ArgumentTypeError, InputError
from attnscope.heads.text import COLUMNS, TextViews, choose_k, text_weights
from attnscope.training.tokenizers import ByteTokenizer


def _probs(b: int, h: int, L: int, causal: bool, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(b, h, L, L, generator=g) * 3
    if causal:
        z = z.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), float("-inf"))
    return z.softmax(-1)


def views_of(probs: torch.Tensor, k: int, causal: bool, text: str | None = None, batch: int = 2) -> TextViews:
    """TextViews filled layer 0 by ``probs`` [W, h, L, L], fed in batches as a stream would."""
    W, _, L, _ = probs.shape
    tok = ByteTokenizer()
    ids = np.asarray(tok.encode(text if text is not None else "ab c\nd" * L)[:L] * W, dtype=np.int64).reshape(W, L)
    v = TextViews(ids=ids, k=k, causal=causal)
    for b0 in range(0, W, batch):
        v.on_layer(0, b0, probs[b0 : b0 + batch])
    v.name_tokens(tok)
    return v


@settings(max_examples=25, deadline=None)
@given(L=st.integers(2, 12), k=st.integers(1, 14), causal=st.booleans(), seed=st.integers(0, 99))
def test_views_keep_each_rows_top_k_against_a_slow_reference(L, k, causal, seed):
    p = _probs(3, 2, L, causal, seed)
    v = views_of(p, k, causal)
    a = p.double().numpy()
    for h in range(2):
        t = v.table(0, h)
        for w in range(3):
            for q in range(L):
                row = a[w, h, q]
                cand = [j for j in range(L) if not causal or j <= q]
                want = sorted(cand, key=lambda j: -row[j])[: min(k, L)]
                got = t[(t["window"] == w) & (t["query"] == q)]
                assert sorted(got["key"]) == sorted(want)  # (ties have probability 0 with these draws)
                assert np.allclose(got["weight"], row[got["key"].to_numpy()], atol=1e-6)
                if len(cand) <= k:  # the whole row is kept: exact
                    assert abs(got["weight"].sum() - 1) < 1e-5
        assert np.allclose(v.received[0][h], a[:, h].sum(1), atol=1e-5)
        pos = np.arange(L)
        dist = (a[:, h] * np.abs(pos[:, None] - pos[None, :])).sum(-1).mean(-1)
        assert np.isclose(v.mean_distance(0, h), dist.mean(), atol=1e-5)


def test_k_fits_the_budget_and_is_exact_when_small():
    assert choose_k(270, 4, 256, budget=16e6) == 10  # SmolLM2: 270 heads, 4 windows of 256 tokens
    assert choose_k(4, 2, 32) == 32  # everything fits: every key
    assert choose_k(10**6, 8, 512) == 1
    v = views_of(_probs(2, 1, 6, True), k=6, causal=True)
    assert v.exact and not views_of(_probs(2, 1, 6, True), k=3, causal=True).exact


def test_table_columns_tokens_and_top_tokens():
    p = torch.zeros(1, 1, 4, 4)
    p[0, 0, :, 0] = 1.0  # every query reads position 0 only
    v = views_of(p, 4, causal=True, text="<a>\n", batch=1)
    t = v.table(0, 0)
    assert list(t.columns) == list(COLUMNS)
    assert set(t["key"]) == {0, 1, 2, 3} and t.groupby("query")["weight"].sum().round(6).eq(1).all()
    assert t.loc[t["query"] == 3, "query_token"].iloc[0] == "\u21b5"  # the newline, visible
    top = v.top_tokens(0, 0, n=2)
    assert top[0] == ("<", 1.0, 1) and top[1][1] == 0.0


def test_views_name_the_bad_head():
    v = views_of(_probs(1, 2, 3, False), 2, causal=False)
    with pytest.raises(InputError, match="head must be 0..1"):
        v.table(0, 5)
    with pytest.raises(InputError, match="layer must be"):
        v.table(3, 0)
    with pytest.raises(ArgumentTypeError):
        v.table("0", 0)


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    from attnscope.heads.maps import open_model

    return open_model(minilm_dir)


def test_text_weights_equal_the_models_own_attentions(minilm, minilm_dir):
    from transformers import AutoModel

    t = text_weights(minilm, 2, 5, text="The cat sat on the mat. <script>alert(1)</script>")
    assert list(t.columns) == list(COLUMNS)
    ids = [minilm.cls_id, *minilm.tokenizer.encode("The cat sat on the mat. <script>alert(1)</script>"), minilm.sep_id]
    ref = AutoModel.from_pretrained(minilm_dir, attn_implementation="eager")
    with torch.inference_mode():
        att = ref(torch.tensor([ids]), output_attentions=True).attentions[2][0, 5].numpy()
    L = len(ids)
    assert len(t) == L * L  # an encoder: every key of every query
    got = np.zeros((L, L))
    got[t["query"], t["key"]] = t["weight"]
    assert np.allclose(got, att, atol=1e-5)
    assert t["query_token"].iloc[0] == "[CLS]" and "\u00b7<" in set(t["key_token"])


def test_text_weights_from_ids_windows_and_every_head(minilm):
    ids = minilm.tokenizer.encode("one two three four five six seven")
    t = text_weights(minilm, 0, ids=ids, length=3)
    assert sorted(t["window"].unique()) == [0, 1, 2]  # 7 tokens -> windows of 3, 3, 1
    assert sorted(t["head"].unique()) == list(range(minilm.n_heads))
    sums = t.groupby(["head", "window", "query"])["weight"].sum()
    assert np.allclose(sums, 1, atol=1e-5)
    two = text_weights(minilm, 1, 0, ids=np.array([ids[:4], ids[3:7]]))
    assert two.groupby("window")["query"].nunique().tolist() == [4, 4]


def test_text_weights_refuse_bad_input_naming_the_parameter(minilm):
    with pytest.raises(InputError, match="text= or ids="):
        text_weights(minilm, 0, 0)
    with pytest.raises(InputError, match="layer must be 0..5"):
        text_weights(minilm, 6, 0, text="x")
    with pytest.raises(InputError, match="head must be"):
        text_weights(minilm, 0, 12, text="x")
    with pytest.raises(ArgumentTypeError, match="ids"):
        text_weights(minilm, 0, 0, ids=[0.5, 1.5])
    with pytest.raises(InputError, match="ids must lie"):
        text_weights(minilm, 0, 0, ids=[10**7])
    with pytest.raises(ArgumentTypeError, match="text"):
        text_weights(minilm, 0, 0, text=b"bytes")


@pytest.mark.slow
def test_text_weights_causal_gguf_keeps_only_earlier_keys(tinycoder_gguf):
    t = text_weights(str(tinycoder_gguf), 1, 0, text="Hello world\nfoo")
    assert (t["key"] <= t["query"]).all()
    L = t["query"].max() + 1
    assert len(t) == L * (L + 1) // 2
    assert np.allclose(t.groupby("query")["weight"].sum(), 1, atol=1e-5)
    assert pd.Series(t["key_token"]).str.contains("\u21b5").any()  # the newline, decoded and visible
