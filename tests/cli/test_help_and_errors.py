"""``--help`` a newcomer can use alone, and errors that name the flags of the command that ran.

The help test walks the app itself (typer's click commands), not the printed text: every visible
option of every command and subcommand has a description, and a flag shows no value placeholder.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
import typer

from attnscope.cli import app
from attnscope.cli._common import command_params, in_flags


def _commands(cmd, path):
    yield path, cmd
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        yield from _commands(sub, [*path, name])


ALL = list(_commands(typer.main.get_command(app), ["attnscope"]))


def test_the_walk_reaches_every_command():
    names = {" ".join(p) for p, _ in ALL}
    assert {"attnscope train", "attnscope dynamics bifurcation", "attnscope heads cluster",
            "attnscope geometry score", "attnscope zoo list"} <= names and len(names) > 20


@pytest.mark.parametrize("path,cmd", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_option_is_described_and_flags_take_no_value(path, cmd):
    ctx = typer.main.get_command(app).make_context("attnscope", [], resilient_parsing=True)
    for p in cmd.params:
        if p.param_type_name != "option" or p.hidden:
            continue
        assert (p.help or "").strip(), f"{' '.join(path)} {p.opts[0]}: no description"
        assert len(p.help.strip().splitlines()) == 1, f"{' '.join(path)} {p.opts[0]}: more than one line"
        type_column = getattr(p, "display_type_rich", None)  # typer's rich help; older typer prints none
        if p.is_flag:  # nothing in the type column for a flag (was "<bool>")
            assert type_column is None or type_column(ctx) is None, f"{' '.join(path)} {p.opts[0]}: {type_column(ctx)}"
        elif p.default is not None and not p.required:  # a default is shown by typer or said in the text
            assert p.show_default or "default" in p.help.lower(), f"{' '.join(path)} {p.opts[0]}: default unsaid"


def test_printed_help_shows_flags_without_a_placeholder():
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["dynamics", "finite", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "<bool>" not in r.output and "--json" in r.output


@pytest.mark.parametrize("group,default,needles", [
    ("geometry", "score", ("--offsets", "--plot", "--zoo")),
    ("heads", "measure", ("--data", "--windows")),
])
def test_a_group_help_shows_its_default_commands_options(group, default, needles):
    """``attnscope geometry --help`` is where the README's users look: the options of the default
    command (``geometry score``) are there, said to be that command's, beside the subcommands."""
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, [group, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for needle in needles:
        assert needle in r.output, needle
    assert f"{group} {default}`" in " ".join(r.output.split())  # says whose options they are
    assert "plot" in r.output or "cluster" in r.output  # the subcommands are still listed
    sub = CliRunner().invoke(app, [group, default, "--help"], env={"COLUMNS": "200"})
    assert needles[0] in sub.output and "Commands" not in sub.output
    # parsing is untouched: the group still routes a SOURCE to the default command
    cmd = typer.main.get_command(app).commands[group]
    assert not any(needles[0] in p.opts for p in cmd.get_params(cmd.make_context(group, ["--help"], resilient_parsing=True)))


def test_bifurcation_steps_are_named_apart_from_the_others():
    """--steps counts the steps after --transient everywhere; bifurcation's total is --total-steps."""
    by_cmd = {" ".join(p): {o for q in c.params for o in q.opts if not q.hidden} for p, c in ALL}
    assert "--total-steps" in by_cmd["attnscope dynamics bifurcation"]
    assert "--steps" not in by_cmd["attnscope dynamics bifurcation"]  # still accepted, hidden
    for name in ("trajectory", "lyapunov", "phase"):
        assert {"--steps", "--transient"} <= by_cmd[f"attnscope dynamics {name}"]


def test_parameters_become_the_flags_of_the_command_that_ran():
    train = command_params(app, ["train", "--steps", "3"])
    assert in_flags("add resume=True to continue it", ("resume",), train) == "add --resume to continue it"
    assert in_flags("warmup=5 is not below steps=2", ("warmup", "steps"), train) == "--warmup 5 is not below --steps 2"
    assert in_flags("progress=False silences it", ("progress",), train) == "--no-progress silences it"
    assert in_flags("batch_size must be positive", ("batch_size",), train) == "--batch-size must be positive"
    bif = command_params(app, ["dynamics", "bifurcation", "--start", "1"])
    assert in_flags("need steps >= 1 (got steps=0)", ("steps",), bif) == "need --total-steps >= 1 (got --total-steps 0)"
    lyap = command_params(app, ["dynamics", "lyapunov"])
    assert in_flags("k must be at least 1", ("k",), lyap) == "--exponents must be at least 1"
    # only the named parameters change, and only as whole words: paths and other words stay
    assert in_flags("runs/out holds steps; choose a new out", ("out",), train) == "runs/out holds steps; choose a new --out"
    assert in_flags("the windows' stepsize", ("steps",), train) == "the windows' stepsize"
    assert in_flags("wandb=True needs the optional 'wandb' package", ("wandb",), train) == (
        "--wandb needs the optional 'wandb' package")
    assert in_flags("give at least one of run_dirs", ("run_dirs",), command_params(app, ["compare"])).endswith("RUNS")
    # a default-command group routes to its default (heads SOURCE -> heads measure)
    assert in_flags("windows must be at least 1", ("windows",), command_params(app, ["heads", "m"])).startswith("--windows")


@pytest.mark.parametrize("args,needles", [
    (["dynamics", "lyapunov", "--steps", "0", "--transient", "5"],
     ["need --steps >= 1 and --transient >= 0 (got --steps 0, --transient 5)"]),
    (["dynamics", "bifurcation", "--start", "1", "--stop", "2", "--num", "2", "--total-steps", "5", "--transient", "6",
      "--out", "{tmp}/x"], ["need --total-steps >= 1 and 0 <= --transient < --total-steps"]),
    (["dynamics", "bifurcation", "--start", "1", "--stop", "2", "--num", "2", "--steps", "5", "--total-steps", "7",
      "--out", "{tmp}/x"], ["--steps is the old name of --total-steps"]),
    (["dynamics", "bifurcation", "--start", "1", "--stop", "2", "--num", "2", "--chunk", "0", "--out", "{tmp}/x"],
     ["--chunk must be >= 1"]),
    (["dynamics", "show", "--preset", "paper", "--config", "{tmp}/c.yaml"],
     ["give only one of --preset, --config and --weights-seed"]),
    (["report", "x", "--out", "{tmp}/r", "--windows", "0"], ["--windows must be at least 1, not 0"]),
    (["train", "--steps", "1", "--device", "gpu", "--out", "{tmp}/t"], ["--device 'gpu' is not a name torch accepts"]),
    (["heads", "cluster", "{tmp}/m.csv", "--k-min", "1"], ["--k-min must be at least 2, not 1"]),
    (["heads", "cluster", "{tmp}/m.csv", "--k-min", "3", "--k-max", "2"], ["--k-max 2 is smaller than --k-min 3"]),
])
def test_cli_errors_are_one_line_naming_the_flag(tmp_path, cli_inproc, args, needles):
    pd.DataFrame({"layer": [0] * 6, "head": range(6), "entropy": [1.0, 2, 3, 4, 5, 6], "sparsity": [0.1] * 6,
                  "distance": [3.0, 1, 4, 1, 5, 9]}).to_csv(tmp_path / "m.csv", index=False)
    code, out, err = cli_inproc(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("attnscope: error: "), err
    for n in needles:
        assert n in lines[0], err
    assert not re.search(r"[a-z_]=\S", lines[0]), err  # no Python keyword spelling (steps=0) left
