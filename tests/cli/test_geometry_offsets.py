"""CLI: attnscope geometry --offsets / --frequencies (tables, figures, one-line refusals)."""

from __future__ import annotations

import pytest

from attnscope.tables import read_table
from tests.conftest import invoke_cli


def run(monkeypatch, capsys, *args):
    return invoke_cli(monkeypatch, capsys, "geometry", *args)


def test_offsets_table_and_figures(monkeypatch, capsys, tiny_llama_dirs, tmp_path):
    out, figs = tmp_path / "s.csv", tmp_path / "figs"
    code, stdout, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--offsets", "log:0:64:4", "--out", out,
                            "--plot", figs)
    assert code == 0, err
    df = read_table(out)
    assert sorted(df["offset"].unique().tolist()) == [0, 1, 8, 64]
    assert len(df) == 4 * 10 and "offset" in stdout
    pngs = sorted(p.name for p in figs.glob("*.png"))
    assert sum(p.endswith(("_offsets.png", "_offsets_heatmap.png")) for p in pngs) == 2
    assert sum(p.endswith(("_layers.png", "_heads.png")) or "_wqk_" in p for p in pngs) == 3  # offset 0's figures


def test_non_rotary_note_is_one_line(monkeypatch, capsys, tiny_bert_dir):
    code, _, err = run(monkeypatch, capsys, tiny_bert_dir, "--offsets", "0,8", "--level", "layer")
    assert code == 0
    notes = [ln for ln in err.splitlines() if ln.startswith("attnscope: note:")]
    assert len(notes) == 1 and "same at every offset" in notes[0]


def test_frequencies_table(monkeypatch, capsys, tiny_llama_dirs, tmp_path):
    out = tmp_path / "f.csv"
    code, stdout, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--frequencies", "--out", out,
                            "--plot", tmp_path / "figs")
    assert code == 0, err
    df = read_table(out)
    assert {"pair", "theta", "wavelength", "energy_share", "symmetry"} <= set(df.columns)
    assert "energy share" in stdout and len(list((tmp_path / "figs").glob("*frequencies_L*.png"))) >= 1


@pytest.mark.parametrize("args,needle", [
    (["--offsets", ""], "--offsets"),
    (["--offsets", "1,x"], "not an integer"),
    (["--offsets", "1,1"], "repeats"),
    (["--offsets", "4294967296"], "2^31"),
    (["--offsets", "log:0:100"], "log:START:STOP:N"),
    (["--frequencies", "--offsets", "0,1"], "--frequencies"),
])
def test_bad_offsets_one_line(monkeypatch, capsys, tiny_llama_dirs, args, needle):
    code, out, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], *args)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("attnscope: error:") and needle in lines[0], err


@pytest.mark.parametrize("flag", [["--offsets", "0,1"], ["--frequencies"]])
def test_zoo_refuses_offsets(monkeypatch, capsys, tmp_path, flag):
    code, _, err = run(monkeypatch, capsys, "--zoo", "offline-demo", "--out", tmp_path / "z", *flag)
    assert code == 2 and "--zoo scores offset 0 only" in err


def test_frequencies_on_non_rotary_is_one_line(monkeypatch, capsys, tiny_bert_dir):
    code, _, err = run(monkeypatch, capsys, tiny_bert_dir, "--frequencies")
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "no rotary positions" in lines[0], err


@pytest.mark.parametrize("args,named", [
    (["--level", "layer"], "--level"),
    (["--k", "3"], "--k"),
    (["--k", "2.0", "--level", "both"], "--level, --k"),  # the defaults' values, typed: still refused
    (["--layer", "1"], "--layer"),
    (["--stack", "decoder"], "--stack"),
])
def test_frequencies_refuses_meaningless_options(monkeypatch, capsys, tiny_llama_dirs, tmp_path, args, named):
    out = tmp_path / "f.csv"
    code, stdout, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--frequencies", "--out", out, *args)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("attnscope: error: --frequencies"), err
    assert lines[0].endswith(named) and not out.exists() and stdout == ""
