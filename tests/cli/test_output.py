"""What a person reads: prose lines unwrapped off a terminal, COLUMNS honoured, the CLI's tables
everywhere, every command says what it wrote, one name per model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope.cli._common import stderr_console
from attnscope.cli._tables import print_table

LONG_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def test_prose_is_one_line_off_a_terminal(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    line = "bidirectional model: dup_score and induction_score keep their causal definition " * 2 + "(sink mass 0.23)"
    stderr_console().print(line)
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize("columns,whole", [("200", True), ("60", False)])
def test_columns_sets_the_table_width(capsys, monkeypatch, columns, whole):
    monkeypatch.setenv("COLUMNS", columns)
    con = stderr_console()
    assert con.width == int(columns)
    print_table(con, "t", ["model", "symmetry s", "directionality d"], [[LONG_NAME, "+0.49 [+0.41, +0.58]",
                                                                       "-0.10 [-0.19, -0.06]"]], fold=("model",))
    err = capsys.readouterr().err
    assert (LONG_NAME in err) is whole and max(len(ln) for ln in err.splitlines()) <= int(columns)
    assert ("(1/" not in err) is whole  # one table when it fits


def test_dynamics_commands_print_tables_and_what_they_wrote(tmp_path, cli_inproc):
    code, _, err = cli_inproc("dynamics", "finite", "--repeats", "1", "--repeats", "10", "--steps", "3", "--seeds", "2",
                              "--out", tmp_path / "fin")
    assert code == 0, err
    assert "┃ repeats ┃" in err and f"wrote finite.csv, finite.png to {tmp_path / 'fin'}" in err
    code, _, err = cli_inproc("dynamics", "bifurcation", "--start", "1.0", "--stop", "1.4", "--num", "2",
                              "--total-steps", "60", "--transient", "40", "--lyap-steps", "0", "--out", tmp_path / "b")
    assert code == 0, err
    assert "regimes of the 2 values of beta_o" in err and "┃ regime" in err and "{'" not in err
    assert "wrote bifurcation.csv, points.parquet, bifurcation.png" in err and str(tmp_path / "b") in err


def test_old_bifurcation_steps_still_work(tmp_path, cli_inproc):
    code, _, err = cli_inproc("dynamics", "bifurcation", "--start", "1.0", "--stop", "1.4", "--num", "2",
                              "--steps", "60", "--transient", "40", "--lyap-steps", "0", "--out", tmp_path / "b", "--json")
    assert code == 0, err


def test_heads_cluster_says_what_it_wrote(tmp_path, cli_inproc):
    rng = np.random.default_rng(0)
    pd.DataFrame({"layer": np.repeat(range(3), 4), "head": list(range(4)) * 3, "entropy": rng.random(12),
                  "sparsity": rng.random(12), "distance": rng.random(12)}).to_csv(tmp_path / "m.csv", index=False)
    code, _, err = cli_inproc("heads", "cluster", tmp_path / "m.csv", "--k-max", "3", "--out", tmp_path / "l.csv",
                              "--plot", tmp_path / "figs")
    assert code == 0, err
    assert f"wrote labels: {tmp_path / 'l.csv'}; silhouettes: {tmp_path / 'l_silhouette.csv'}" in err
    assert "cluster_silhouette.png" in err and (tmp_path / "l_silhouette.csv").is_file()


def test_heads_names_no_zero_strongest_head_and_the_model_once(capsys):
    from attnscope.cli.heads import _summary

    df = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], **{c: [0.5, 0.4, 0.3, 0.2] for c in (
        "entropy", "entropy_norm", "sparsity", "distance", "confidence")}, "sink_first": [0.1, 0.7, 0.2, 0.3],
        "prev_mass": [0.0, 0.001, 0.0, 0.0]})
    path = "/x/.venv/lib/site-packages/pkg/models--org--tiny/snapshots/" + "a" * 40
    info = {"model": path, "n_layers": 2, "n_heads": 2, "causal": True, "windows": 1, "length": 8, "streaming": True}
    _summary(df, info, None, None, None)
    err = capsys.readouterr().err
    assert err.startswith("org/tiny: 2 layers") and f"note: org/tiny is read from {path}" in err
    assert "first-token sink: L0H1 (0.70)" in err and "previous-token" not in err  # max 0.001 shows as 0.00


def test_geometry_shows_one_name_and_says_where_it_was_read(tiny_bert_dir, cli_inproc, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = cli_inproc("geometry", tiny_bert_dir)
    assert code == 0, err
    name = tiny_bert_dir.name
    assert f"note: {name} is read from {tiny_bert_dir}" in err and str(tiny_bert_dir) not in out


def test_progress_is_labelled_by_the_models_name_not_its_path(tiny_bert_dir, monkeypatch):
    from contextlib import contextmanager

    import attnscope.progress
    from attnscope.geometry import score

    labels = []

    @contextmanager
    def recording(total, desc, **kwargs):
        labels.append(desc)
        yield attnscope.progress.Bar()

    monkeypatch.setattr(attnscope.progress, "progress", recording)
    score(str(tiny_bert_dir), progress=True)
    assert labels == [tiny_bert_dir.name]
