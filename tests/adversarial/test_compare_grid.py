"""Hostile use of ``attnscope compare``: a seed grid's folder given as is, Ctrl-C while the figures are drawn."""

from __future__ import annotations

import pytest

from tests.training.test_compare import seeds_experiment

from ._helpers import cli


def test_compare_on_a_grid_folder_is_compare_on_its_runs(tmp_path):
    """``attnscope train --seeds ... --out DIR`` makes DIR; ``compare DIR`` reads its runs (was: not a run dir)."""
    grid = tmp_path / "grid"
    seeds_experiment(grid)
    (grid / ".grid").mkdir()
    whole, listed = cli("compare", grid, "--json"), cli("compare", *sorted(grid.glob("*-s*")), "--json")
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert whole.stdout == listed.stdout and '"symmetric-s2"' in whole.stdout


def test_interrupted_compare_out_keeps_the_previous_files(tmp_path, monkeypatch):
    """Ctrl-C while a figure renders: every table and figure in --out is still the earlier run's."""
    import attnscope.plots.base as base
    from attnscope.cli.compare import compare

    runs = [str(p) for p in seeds_experiment(tmp_path / "runs")]
    out = tmp_path / "cmp"
    compare(runs[:4], out=str(out), baseline=None, at=None, target=None, smooth=1, speedup="matched",
            curve="auto", json_out=True)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    drawn = []
    real = base.figure_bytes

    def second_is_interrupted(*args, **kwargs):
        drawn.append(1)
        if len(drawn) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(base, "figure_bytes", second_is_interrupted)
    with pytest.raises(KeyboardInterrupt):
        compare(runs, out=str(out), baseline=None, at=None, target=None, smooth=1, speedup="matched",
                curve="auto", json_out=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_named_baseline_with_other_settings_is_noted(tmp_path):
    """--baseline RUN that differs in more than the init (here the seed): a note, not a silent attribution."""
    from attnscope.training.compare import compare

    runs = seeds_experiment(tmp_path)
    res = compare([runs[0], runs[1], runs[3]], baseline=runs[0].name)  # default-s0, symmetric-s0, symmetric-s1
    said = [n for n in res.notes if "its baseline" in n]
    assert said == ["run symmetric-s1 differs from its baseline default-s0 in seed (1 vs 0), so its paired "
                    "differences are not those of the init (or tied W_q, W_k) alone"]
    assert not [n for n in compare(runs[:2]).notes if "its baseline" in n]


@pytest.mark.parametrize("which", ["held-out", "train"])
def test_curve_with_the_paper_speedup_is_refused(tmp_path, which):
    """--curve only steers the matched speed-up; with --speedup paper it was silently ignored."""
    from ._helpers import assert_one_line_error

    runs = seeds_experiment(tmp_path)[:2]
    res = cli("compare", *runs, "--speedup", "paper", "--curve", which)
    assert_one_line_error(res, f"--curve {which} is for the matched speed-up", "--speedup paper")
    assert cli("compare", *runs, "--speedup", "paper", "--curve", "auto").returncode == 0
