"""Hostile input for ``attnscope train`` and ``attnscope dynamics``: integers past int64, concurrent runs."""

from __future__ import annotations

import pytest

from attnscope.cli._common import MAX_OPTION_INT, check_option_integers
from attnscope.dynamics.model import from_dict, load_preset
from attnscope.errors import ConfigError, InputError
from attnscope.runs.store import StoreLock

from ._helpers import assert_one_line_error, cli, files_under

HUGE = "99999999999999999999"  # > 2**63: numpy / numba / torch overflow deep inside the work
TINY = ["--n-layers", "1", "--n-heads", "2", "--d-model", "16", "--d-ff", "32", "--seq-len", "16", "--max-seq-len",
        "16", "--batch-size", "2", "--steps", "2", "--no-progress", "--eval-every", "2", "--eval-windows", "1",
        "--score-every", "2", "--checkpoint-every", "2"]


@pytest.mark.parametrize("argv, option", [
    (["--steps", HUGE], "--steps"),
    ([f"--transient={HUGE}"], "--transient"),
    (["--weights-seed", "-" + HUGE], "--weights-seed"),
    (["--seed", str(MAX_OPTION_INT + 1)], "--seed"),
    (["--seed", "9" * 5000], "--seed"),  # beyond Python's int-from-text digit limit
])
def test_option_integers_beyond_int64_are_refused(argv, option):
    with pytest.raises(InputError, match=f"{option} .*too large"):
        check_option_integers(argv)


@pytest.mark.parametrize("argv", [["--steps", str(MAX_OPTION_INT)], ["--seed", "-5"], ["model/" + HUGE], [HUGE],
                                  ["--beta-o", "1.5e300"], ["--name", "007"]])
def test_option_integers_within_int64_and_other_tokens_pass(argv):
    check_option_integers(argv)


@pytest.mark.parametrize("args, option", [
    (["dynamics", "lyapunov", "--steps", HUGE, "--transient", "1"], "--steps"),
    (["dynamics", "bifurcation", "--param", "beta_o", "--start", "1", "--stop", "2", "--num", HUGE, "--out", "OUT"],
     "--num"),
    (["train", *TINY, "--seed", HUGE, "--out", "OUT"], "--seed"),
])
def test_cli_huge_integer_is_one_line_before_any_work(tmp_path, args, option):
    out = tmp_path / "out"
    res = cli(*[str(out) if a == "OUT" else a for a in args])
    assert_one_line_error(res, option, "too large")
    assert not out.exists()


def test_dynamics_config_count_past_int64_is_a_config_error():
    d = load_preset("paper").to_dict()
    d["counts"] = [1e30, 33, 33]
    with pytest.raises(ConfigError, match="counts entry is too large"):
        from_dict(d)


@pytest.mark.slow
def test_a_second_train_into_the_same_out_is_refused(tmp_path):
    """While a run holds RUN_DIR/.lock, another ``attnscope train --out RUN_DIR`` stops with one line."""
    run = tmp_path / "run"
    run.mkdir()
    with StoreLock(run / ".lock"):
        res = cli("train", *TINY, "--out", run)
        assert_one_line_error(res, str(run), "in use by another run")
    assert [p.name for p in files_under(run)] == [".lock"]  # the refused run wrote nothing
    res = cli("train", *TINY, "--out", run)  # the lock is free again: the run trains
    assert res.returncode == 0, res.stderr[-2000:]
    assert (run / "summary.json").is_file()


def test_lyapunov_out_with_a_wrong_suffix_is_refused_before_the_estimate(tmp_path):
    """The table name is checked first, and nothing (not even its parent) is created for a refused run."""
    res = cli("dynamics", "lyapunov", "--steps", "50", "--transient", "1", "--out", tmp_path / "new" / "l.txt")
    assert_one_line_error(res, "--out", ".csv")
    assert not (tmp_path / "new").exists()
