"""Clustering picks k from the data; derive proposes patterns the model can load; CLI errors are one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import AttnscopeError
from attnscope.heads.cluster import cluster_heads, embed_js, zscore_features
from attnscope.heads.derive import derive_pattern
from attnscope.sparse import HeadPattern, load_pattern


def blobs(centers, n_per, seed=0, spread=0.05):
    """A metrics-like table whose heads form len(centers) well separated groups."""
    rng = np.random.default_rng(seed)
    rows = []
    i = 0
    for c in centers:
        for _ in range(n_per):
            e, s, d = np.array(c, dtype=float) + spread * rng.normal(size=3)
            rows.append({"model": "m", "layer": i // 8, "head": i % 8, "entropy": e, "sparsity": s, "distance": d})
            i += 1
    return pd.DataFrame(rows)


@pytest.mark.parametrize("k_true", [2, 3, 5])
def test_best_k_comes_from_the_data(k_true):
    centers = [(g, 2 * g, -g) for g in range(k_true)]  # every feature informative after z-scoring
    df = blobs(centers, 8, seed=k_true)
    res = cluster_heads(df, k_min=2, k_max=6)
    assert res.best_k == {"ward": k_true, "kmeans": k_true}
    best = res.labels[(res.labels["method"] == "ward") & res.labels["best"]]
    assert best["cluster"].nunique() == k_true and len(best) == len(df)
    # each true group is exactly one cluster
    grp = np.repeat(np.arange(k_true), 8)
    for g in range(k_true):
        assert best["cluster"].to_numpy()[grp == g].tolist().count(best["cluster"].to_numpy()[grp == g][0]) == 8
    assert res.silhouette.loc[res.silhouette["best"], "silhouette"].min() > 0.5


def test_zscore_and_constant_feature():
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [5.0, 5.0, 5.0]})
    X = zscore_features(df, ["a", "b"])
    np.testing.assert_allclose(X[:, 0].mean(), 0, atol=1e-12)
    np.testing.assert_allclose(X[:, 0].std(), 1)
    assert (X[:, 1] == 0).all()


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(features=["entropy", "nope"]), "no column"),
        (dict(k_max=40), "too large"),
        (dict(k_min=1), "at least 2"),
        (dict(k_min=5, k_max=3), "smaller"),
        (dict(method="dbscan"), "unknown clustering method"),
    ],
)
def test_cluster_errors(kw, msg):
    df = blobs([(1, 0.5, 2), (3, 0.1, 50)], 8)
    with pytest.raises(AttnscopeError, match=msg):
        cluster_heads(df, **kw)


def test_default_k_max_shrinks_to_a_small_table_but_an_explicit_one_does_not():
    """A 6-head table (one GPT-2-small layer, MiniLM's 6 layers of one head): k = 2..5 by default; k_max=8
    given by hand is refused; 2 heads cannot be clustered into 2 groups at all."""
    small = blobs([(1, 0.5, 2), (3, 0.1, 50)], 3)
    res = cluster_heads(small)
    assert sorted(res.silhouette["k"].unique()) == [2, 3, 4, 5] and res.best_k == {"ward": 2, "kmeans": 2}
    with pytest.raises(AttnscopeError, match="too large for 6 heads"):
        cluster_heads(small, k_max=8)
    big = blobs([(1, 0.5, 2), (3, 0.1, 50)], 8)
    assert sorted(cluster_heads(big, method="ward").silhouette["k"].unique()) == list(range(2, 9))  # 8 by default
    with pytest.raises(AttnscopeError, match="2 heads are too few"):
        cluster_heads(blobs([(1, 0.5, 2), (3, 0.1, 50)], 1))
    ten = blobs([(1, 0.5, 2), (3, 0.1, 50)], 5)  # a k_min above the default 8 carries k_max with it
    assert sorted(cluster_heads(ten, k_min=9, method="ward").silhouette["k"].unique()) == [9]


def test_cli_cluster_on_a_small_table_needs_no_k_max(cli, tmp_path):
    path = tmp_path / "small.csv"
    blobs([(1, 0.5, 2), (3, 0.1, 50)], 3).to_csv(path, index=False)
    code, out, err = cli("heads", "cluster", str(path), "--json")
    assert code == 0, err
    assert sorted({r["k"] for r in json.loads(out)["silhouette"]}) == [2, 3, 4, 5]
    code, out, err = cli("heads", "cluster", str(path))
    ks = [line.split("│")[1].strip() for line in err.split("cluster profiles")[0].splitlines() if line.count("│") == 4]
    assert code == 0 and ks == ["2", "3", "4", "5"], err  # the silhouette table: one row per k tried


def test_nan_feature_is_an_error():
    df = blobs([(1, 0.5, 2), (3, 0.1, 50)], 8)
    df.loc[3, "distance"] = np.nan
    with pytest.raises(AttnscopeError, match="NaN"):
        cluster_heads(df)


def test_js_mds_embedding_separates_groups():
    rows = []
    group = {(0, h): h % 2 for h in range(6)}
    keys = sorted(group)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            same = group[keys[a]] == group[keys[b]]
            rows.append({"layer_a": 0, "head_a": keys[a][1], "layer_b": 0, "head_b": keys[b][1], "js": 0.01 if same else 0.6})
    emb = embed_js(pd.DataFrame(rows))
    xy = emb[["x", "y"]].to_numpy()
    d = lambda i, j: np.linalg.norm(xy[i] - xy[j])  # noqa: E731
    assert d(0, 2) < d(0, 1) and d(1, 3) < d(1, 2)


def metrics_table(lookbacks, sinks, periods=None, layers=2):
    rows = []
    for layer in range(layers):
        for h, (lb, s) in enumerate(zip(lookbacks, sinks)):
            rows.append({"model": "m", "layer": layer, "head": h, "distance": lb, "lookback": lb, "sink_first": s,
                         "period": (periods or [np.nan] * len(lookbacks))[h], "causal": True})
    return pd.DataFrame(rows)


def test_derive_rules(tmp_path):
    df = metrics_table([2.0, 7.5, 15.0, 400.0], [0.0, 0.5, 0.0, 0.0], periods=[np.nan, np.nan, 8.0, np.nan])
    pat, why = derive_pattern(df)
    assert pat.heads[0] == HeadPattern(window=4)
    assert pat.heads[1] == HeadPattern(window=16, positions=(0,))
    assert pat.heads[2] == HeadPattern(window=32, stride=8)
    assert pat.heads[3] == HeadPattern(stride=16, positions=(0,))  # global head
    assert len(why) == 4 and "global" in why["reason"][3]
    # the file is loadable as a model pattern
    path = pat.save(tmp_path / "p.yaml")
    assert load_pattern(str(path), n_heads=4).heads == pat.heads


def test_derive_text_says_what_it_did():
    df = metrics_table([2.0, 7.5, 102.0], [0.0, 0.5, 0.0])
    pat, why = derive_pattern(df)
    assert list(why["summary"]) == ["median of 2 layers"] * 3  # the lines say they are a median over layers
    assert why["reason"][2].startswith("global (2 x lookback 102.0 = 204.0 -> window 256, over --max-window 128)")
    assert why["pattern"][1] == "local(16) | key 0" and "positions" not in " ".join(why["pattern"])
    assert "1 positions" not in why.to_string()
    assert list(derive_pattern(df, layer=1)[1]["summary"]) == ["layer 1"] * 3


def test_derive_window_covering_the_whole_sequence_is_global_not_local():
    df = metrics_table([2.0, 40.0], [0.0, 0.0]).assign(length=128)  # 2 x 40 -> window 128 >= 127: every key
    pat, why = derive_pattern(df, max_window=256)
    assert pat.heads[0] == HeadPattern(window=4)
    assert pat.heads[1] == HeadPattern(stride=16, positions=(0,))
    assert "the whole 128-token sequence" in why["reason"][1] and why["reason"][1].startswith("global")
    # one token shorter than needed to see everything: still local
    assert derive_pattern(metrics_table([2.0, 40.0], [0.0, 0.0]).assign(length=130), max_window=256)[0].heads[1] == \
        HeadPattern(window=128)


def test_derive_errors():
    with pytest.raises(AttnscopeError, match="no column"):
        derive_pattern(pd.DataFrame({"head": [0], "entropy": [1.0]}))
    two = pd.concat([metrics_table([2.0], [0.0]).assign(model="a"), metrics_table([2.0], [0.0]).assign(model="b")])
    with pytest.raises(AttnscopeError, match="model=NAME"):
        derive_pattern(two)
    assert derive_pattern(two, model="b")[0].n_heads == 1
    with pytest.raises(AttnscopeError, match="layer 9"):
        derive_pattern(metrics_table([2.0], [0.0]), layer=9)


@pytest.fixture
def cli(cli_inproc):
    return cli_inproc


def test_cli_cluster_and_derive(cli, tmp_path):
    df = blobs([(1.0, 0.9, 2.0), (4.0, 0.1, 60.0), (2.5, 0.5, 20.0)], 8)
    df["lookback"], df["sink_first"], df["causal"] = df["distance"], 0.0, True
    df["head"] = np.arange(len(df)) % 8
    df["layer"] = np.arange(len(df)) // 8
    path = tmp_path / "m.csv"
    df.to_csv(path, index=False)
    code, out, err = cli("heads", "cluster", str(path), "--json", "--out", str(tmp_path / "lab.parquet"), "--plot", str(tmp_path / "figs"))
    assert code == 0, err
    payload = json.loads(out)
    assert payload["best_k"] == {"ward": 3, "kmeans": 3}
    assert (tmp_path / "lab.parquet").is_file() and (tmp_path / "lab_silhouette.parquet").is_file()
    assert (tmp_path / "figs" / "cluster_silhouette.png").stat().st_size > 1000
    code, out, err = cli("heads", "derive", str(path), "--out", str(tmp_path / "p.json"), "--json")
    assert code == 0, err
    assert len(json.loads(out)["heads"]) == 8 and load_pattern(str(tmp_path / "p.json")).n_heads == 8


@pytest.mark.parametrize(
    "args, msg",
    [
        (["heads", "cluster", "MISSING.csv"], "no such table"),
        (["heads", "cluster", "M", "--features", "entropy,bogus"], "no column"),
        (["heads", "cluster", "M", "--k-max", "30"], "too large"),
        (["heads", "derive", "BAD"], "no column"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(cli, tmp_path, args, msg):
    good = blobs([(1, 0.5, 2), (3, 0.1, 50)], 8)
    (tmp_path / "M.csv").write_text(good.to_csv(index=False))
    (tmp_path / "BAD.csv").write_text("head,entropy\n0,1.0\n")
    args = [str(tmp_path / "M.csv") if a == "M" else str(tmp_path / "BAD.csv") if a == "BAD" else a for a in args]
    args = [str(tmp_path / a) if a == "MISSING.csv" else a for a in args]
    code, out, err = cli(*args)
    assert code == 2
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and msg in lines[0] and "Traceback" not in err


def test_cli_measure_bad_window(cli, tmp_path):
    import torch

    from attnscope.training.model import ModelConfig, Transformer, save_model

    cfg = ModelConfig(n_layers=1, n_heads=2, d_model=8, d_ff=16, vocab_size=256, max_seq_len=32, causal=True, dropout=0.0)
    torch.manual_seed(0)
    ckpt = save_model(Transformer(cfg), tmp_path / "c", extra_config={"tokenizer": "bytes"})
    code, _, err = cli("heads", str(ckpt), "--length", "64", "--windows", "2")
    assert code == 2 and "longer than the model's maximum 32" in err
    code, out, err = cli("heads", str(ckpt), "--length", "16", "--windows", "2", "--json")
    assert code == 0, err
    recs = json.loads(out)
    assert len(recs) == 2 and {r["head"] for r in recs} == {0, 1}
