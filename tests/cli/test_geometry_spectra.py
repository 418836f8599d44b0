"""`attnscope geometry --spectra`: the columns in every output, the printed cascade, the figure, refusals."""

from __future__ import annotations

from attnscope.geometry import SPECTRA_COLUMNS
from attnscope.tables import read_table
from tests.conftest import invoke_cli

from .test_geometry import assert_one_line_error


def run(monkeypatch, capsys, *args):
    return invoke_cli(monkeypatch, capsys, "geometry", *args)


def test_spectra_columns_summary_and_figure(monkeypatch, capsys, tiny_llama_dirs, tmp_path):
    out, figs = tmp_path / "s.parquet", tmp_path / "figs"
    code, stdout, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--spectra", "--out", out, "--plot", figs)
    assert code == 0, err
    df = read_table(out)
    assert set(SPECTRA_COLUMNS) <= set(df.columns) and df["anti_rank"].notna().all()
    assert "anti_rank" in stdout and "spectra per layer" in stdout
    assert len(list(figs.glob("*_spectra.png"))) == 1


def test_default_output_has_no_spectra(monkeypatch, capsys, tiny_llama_dirs, tmp_path):
    out, figs = tmp_path / "s.csv", tmp_path / "figs"
    code, stdout, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--out", out, "--plot", figs)
    assert code == 0, err
    assert not set(SPECTRA_COLUMNS) & set(read_table(out).columns)
    assert "anti_rank" not in stdout and not list(figs.glob("*_spectra.png"))


def test_spectra_per_offset(monkeypatch, capsys, tiny_llama_dirs):
    code, stdout, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--spectra", "--offsets", "0,5", "--json")
    assert code == 0, err
    import json

    recs = json.loads(stdout)
    assert {r["offset"] for r in recs} == {0, 5} and all(r["anti_rank"] is not None for r in recs)


def test_spectra_with_frequencies_is_refused(monkeypatch, capsys, tiny_llama_dirs):
    code, out, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--frequencies", "--spectra")
    assert_one_line_error(code, out, err, "--spectra")
