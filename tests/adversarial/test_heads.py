"""Hostile input for ``attnscope heads`` (measure, cluster, derive): one line and exit 2, nothing written.

Every "wrote X" line must be true; nonsense options are refused before a model is loaded; tables
read back are checked (a string in a column, a JS table of another model); sklearn's convergence
warnings are one readable line.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import AttnscopeError, FormatError, InputError
from attnscope.heads.cluster import check_js_matches, cluster_heads
from attnscope.heads.derive import derive_pattern
from attnscope.heads.maps import extract

from ._helpers import assert_one_line_error, cli, files_under


def metrics_table(model: str = "m", layers: int = 3, heads: int = 4, seed: int = 0) -> pd.DataFrame:
    """A plausible per-(layer, head) metrics table as `attnscope heads --out` writes it."""
    rng = np.random.default_rng(seed)
    n = layers * heads
    return pd.DataFrame({
        "model": model, "stack": "decoder",
        "layer": np.repeat(np.arange(layers), heads), "head": np.tile(np.arange(heads), layers),
        "entropy": rng.uniform(0.5, 4, n), "sparsity": rng.uniform(0, 1, n), "distance": rng.uniform(1, 60, n),
        "lookback": rng.uniform(1, 60, n), "sink_first": rng.uniform(0, 1, n), "causal": True,
    })  # fmt: skip


def js_table(model: str = "m", layers: int = 3, heads: int = 4) -> pd.DataFrame:
    labels = [(layer, h) for layer in range(layers) for h in range(heads)]
    a, b = np.triu_indices(len(labels), k=1)
    return pd.DataFrame({"model": model, "layer_a": [labels[i][0] for i in a], "head_a": [labels[i][1] for i in a],
                         "layer_b": [labels[i][0] for i in b], "head_b": [labels[i][1] for i in b],
                         "js": np.linspace(0.01, 0.5, len(a))})


# ------------------------------------------------------------------------------ measure: options first


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--js", "{tmp}/js.csv", "--js-rows", "0"], ["--js-rows"]),
        (["--js", "{tmp}/js.csv", "--js-rows", "-5"], ["--js-rows"]),
        (["--length", "0"], ["--length"]),
        (["--length", "-3"], ["--length"]),
        (["--out", "{tmp}/file/m.csv"], ["--out", "is a file"]),
        (["--js", "/proc/js.csv"], ["--js", "/proc"]),
        (["--plot", "{tmp}/file"], ["--plot", "not a directory"]),
        (["--out", "{tmp}/t.csv", "--js", "{tmp}/t.csv"], ["same file"]),
        (["--device", "nonsense"], ["--device", "not a name torch accepts"]),
        (["--device", "cuda:97"], ["--device", "cuda"]),
    ],
)
def test_measure_refuses_nonsense_before_loading(tmp_path, args, needles):
    (tmp_path / "file").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    # SOURCE does not exist: an error about the option proves nothing was loaded or computed
    assert_one_line_error(cli("heads", tmp_path / "no-model", *args), *needles)
    assert [p.name for p in files_under(tmp_path)] == ["file"]


@pytest.mark.parametrize("kw, needle", [({"length": 0}, "^length must"), ({"windows": 0}, "^windows must"),
                                        ({"js_rows": -1}, "^js_rows must"), ({"batch_size": 0}, "^batch_size must")])
def test_extract_validates_before_opening_the_model(tmp_path, kw, needle):
    with pytest.raises(InputError, match=needle):
        extract(str(tmp_path / "no-model"), **kw)


# ------------------------------------------------------------------------------ cluster


def test_cluster_rejects_a_js_table_of_another_model(tmp_path):
    m, js = tmp_path / "m.csv", tmp_path / "js.csv"
    metrics_table("org/model-a").to_csv(m, index=False)
    js_table("org/model-b").to_csv(js, index=False)
    out = tmp_path / "labels.csv"
    assert_one_line_error(cli("heads", "cluster", m, "--js", js, "--out", out, "--k-max", "4"),
                          "model 'org/model-b'", "org/model-a")
    assert not out.exists()


def test_js_table_with_heads_the_metrics_lack():
    with pytest.raises(FormatError, match="heads the metrics table lacks"):
        check_js_matches(js_table(layers=4), metrics_table(layers=3))
    check_js_matches(js_table(), metrics_table())  # the matching pair passes


@pytest.mark.slow
@pytest.mark.parametrize("column, value", [("entropy", "high"), ("distance", "inf"), ("layer", "one")])
def test_a_string_in_a_table_column_is_one_line(tmp_path, column, value):
    df = metrics_table().astype({column: object})
    df.loc[5, column] = value
    p = tmp_path / "m.csv"
    df.to_csv(p, index=False)
    js = tmp_path / "js.csv"
    js_table().to_csv(js, index=False)
    args = ["--js", js] if column == "layer" else []
    assert_one_line_error(cli("heads", "cluster", p, "--k-max", "4", *args), column)
    if column == "distance":  # derive reads distance/lookback, sink_first
        df2 = metrics_table().astype({"sink_first": object})
        df2.loc[3, "sink_first"] = "lots"
        df2.to_csv(p, index=False)
        assert_one_line_error(cli("heads", "derive", p), "sink_first", "lots")


def test_non_numeric_feature_in_the_api():
    df = metrics_table().astype({"sparsity": object})
    df.loc[0, "sparsity"] = "n/a"
    with pytest.raises(AttnscopeError, match="sparsity"):
        cluster_heads(df, k_max=4)


@pytest.mark.slow
def test_convergence_warning_is_one_readable_line(tmp_path):
    df = metrics_table(layers=3, heads=4)
    for col in ("entropy", "sparsity", "distance"):  # only 3 distinct heads: k = 4, 5 cannot be found
        df[col] = np.tile([1.0, 2.0, 5.0], 4)
    p = tmp_path / "m.csv"
    df.to_csv(p, index=False)
    res = cli("heads", "cluster", p, "--method", "kmeans", "--k-max", "5")
    assert res.returncode == 0, res.stderr
    warn = [ln for ln in res.stderr.splitlines() if "warning" in ln.lower()]
    assert len(warn) == 1 and warn[0].startswith("attnscope: warning: kmeans:") and "k = 4, 5" in warn[0], warn
    assert "ConvergenceWarning" not in res.stderr and "warnings.warn" not in res.stderr


# ------------------------------------------------------------------------------ derive


@pytest.mark.parametrize("value", ["nan", "inf", "-0.1", "1.5"])
def test_derive_sink_threshold_nonsense(tmp_path, value):
    p = tmp_path / "m.csv"
    metrics_table().to_csv(p, index=False)
    out = tmp_path / "pattern.yaml"
    assert_one_line_error(cli("heads", "derive", p, "--sink-threshold", value, "--out", out), "--sink-threshold")
    assert not out.exists()


def test_derive_api_sink_threshold_nan():
    with pytest.raises(InputError, match="^sink_threshold must"):  # Python's words (the CLI: --sink-threshold)
        derive_pattern(metrics_table(), sink_threshold=float("nan"))


@pytest.mark.parametrize("out, needle", [("{tmp}/file/p.yaml", "is a file"), ("{tmp}/p.txt", ".yaml")])
def test_derive_bad_out(tmp_path, out, needle):
    (tmp_path / "file").write_text("x")
    p = tmp_path / "m.csv"
    metrics_table().to_csv(p, index=False)
    assert_one_line_error(cli("heads", "derive", p, "--out", out.replace("{tmp}", str(tmp_path))), needle)
    assert sorted(x.name for x in files_under(tmp_path)) == ["file", "m.csv"]


def test_cluster_on_a_table_that_is_not_a_heads_table_says_so(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    r = cli("heads", "cluster", str(bad))
    assert_one_line_error(r, "not a heads metrics table")


def test_cluster_on_a_header_without_rows_is_one_line_before_any_arithmetic(tmp_path):
    empty = tmp_path / "empty.csv"
    metrics_table().iloc[:0].to_csv(empty, index=False)
    r = cli("heads", "cluster", str(empty), "--out", str(tmp_path / "c.csv"))
    assert_one_line_error(r, "no rows")
    assert "warning" not in r.stderr  # no numpy 'Mean of empty slice' before the error
    with pytest.raises(InputError, match="no rows"):
        cluster_heads(metrics_table().iloc[:0])
