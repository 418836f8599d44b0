"""Survey tables (attnscope.zoo.report): summary numbers against explicit quantiles, paper values, the
Markdown/LaTeX tables, the files `attnscope geometry plot` writes, bad input."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from attnscope.errors import InputError
from attnscope.zoo.report import load_results, summary_latex, summary_markdown, survey_summary
from tests.conftest import invoke_cli


def _records(model, stack, n_layers, rng, family="x"):
    rows = []
    for layer in range(n_layers):
        rows.append({"model": model, "family": family, "stack": stack, "level": "layer", "layer": layer,
                     "head": None, "symmetry": rng.uniform(-1, 1), "directionality": rng.uniform(-1, 1)})
        rows.append({"model": model, "family": family, "stack": stack, "level": "head", "layer": layer,
                     "head": 0, "symmetry": 0.99, "directionality": 0.99})  # head rows must not leak in
    return rows


@pytest.fixture()
def table():
    rng = np.random.default_rng(0)
    rows = (_records("gpt2", "decoder", 12, rng) + _records("bert-base-uncased", "encoder", 12, rng)
            + _records("openai/whisper-tiny", "encoder", 4, rng) + _records("openai/whisper-tiny", "decoder", 4, rng)
            + _records("openai/whisper-tiny", "cross", 4, rng) + _records("my/local_model", "encoder", 3, rng))
    return pd.DataFrame(rows)


def test_summary_is_the_median_and_iqr_over_layers(table):
    s = survey_summary(table)
    g = table[(table.model == "gpt2") & (table.level == "layer")]["symmetry"]
    row = s[(s.model == "gpt2") & (s["stack"] == "decoder")].iloc[0]
    assert row.symmetry_median == pytest.approx(np.median(g))
    assert row.symmetry_q1 == pytest.approx(np.percentile(g, 25)) and row.symmetry_q3 == pytest.approx(np.percentile(g, 75))
    # zoo columns and the paper's published values come from the registry
    assert row.modality == "text" and row.type == "decoder" and row.params == 124_439_808
    assert row.paper_symmetry_median == pytest.approx(0.15) and row.paper_directionality_median == pytest.approx(-0.58)
    w = s[s.model == "openai/whisper-tiny"]
    assert list(w["stack"]) == ["encoder", "decoder", "cross"] and (w.type == "encoder-decoder").all()
    unknown = s[s.model == "my/local_model"].iloc[0]
    assert unknown.type == "encoder" and pd.isna(unknown.params)


def test_tables(table):
    s = survey_summary(table)
    md = summary_markdown(s)
    assert md.count("\n") == len(s) + 2
    gpt2 = next(line for line in md.splitlines() if line.startswith("| gpt2 "))
    assert "+0.15 [+0.13, +0.18]" in gpt2 and "-0.58 [-0.64, -0.44]" in gpt2
    tex = summary_latex(s)
    assert r"my/local\_model" in tex and tex.strip().endswith(r"\end{tabular}") and "\\toprule" in tex


def plot_cli(monkeypatch, capsys, *args):
    """`attnscope geometry plot ...` in-process: (exit code, stdout, stderr)."""
    return invoke_cli(monkeypatch, capsys, "geometry", "plot", *args)


def test_geometry_plot_writes_the_report_files(table, tmp_path, monkeypatch, capsys):
    table.to_parquet(tmp_path / "merged.parquet")
    code, out, err = plot_cli(monkeypatch, capsys, tmp_path, "--out", tmp_path / "fig")
    assert code == 0, err
    names = sorted(p.split("/")[-1] for p in out.split())
    assert names == ["survey_encdec.png", "survey_scores.png", "survey_summary.csv", "survey_table.md", "survey_table.tex"]
    assert all((tmp_path / "fig" / n).stat().st_size > 0 for n in names)
    assert (tmp_path / "fig" / "survey_scores.png").read_bytes()[:4] == b"\x89PNG"
    from PIL import Image

    for name in ("survey_scores.png", "survey_encdec.png"):  # print resolution
        with Image.open(tmp_path / "fig" / name) as im:
            assert im.info["dpi"] == pytest.approx((200, 200), abs=0.5)
    assert (tmp_path / "fig" / "survey_table.md").read_text() == summary_markdown(survey_summary(table))
    no_params = table[table.model == "my/local_model"]  # no parameter count: tables only
    no_params.to_csv(tmp_path / "local.csv", index=False)
    code, out, err = plot_cli(monkeypatch, capsys, tmp_path / "local.csv")
    assert code == 0, err
    assert sorted(p.split("/")[-1] for p in out.split()) == ["survey_summary.csv", "survey_table.md", "survey_table.tex"]
    assert "survey_scores.png not drawn" in err


def test_load_results_from_a_store_only_directory(table, tmp_path):
    from attnscope.runs import ResultsStore

    store = ResultsStore(tmp_path)
    for m, g in table.groupby("model"):
        store.write(m, g)
    assert len(load_results(tmp_path)) == len(table)


def test_bad_input(tmp_path):
    with pytest.raises(InputError):
        load_results(tmp_path)  # empty directory
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(InputError, match="not a score table"):
        survey_summary(load_results(tmp_path / "x.csv"))


def test_bad_input_is_one_line_in_the_cli(tmp_path, monkeypatch, capsys):
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "x.csv", index=False)
    code, out, err = plot_cli(monkeypatch, capsys, tmp_path / "x.csv", "--out", tmp_path / "o")
    assert code == 2 and err.strip().count("\n") == 0 and "not a score table" in err and "Traceback" not in err


def test_musicgen_published_decoder_is_compared_with_our_cross_stack():
    rng = np.random.default_rng(1)
    rows = sum((_records("facebook/musicgen-small", st, 3, rng) for st in ("encoder", "decoder", "cross")), [])
    s = survey_summary(pd.DataFrame(rows)).set_index("stack")
    assert s.loc["cross", "paper_directionality_median"] == pytest.approx(-0.56)
    assert pd.isna(s.loc["decoder", "paper_directionality_median"])
    assert s.loc["encoder", "paper_symmetry_median"] == pytest.approx(0.35)
