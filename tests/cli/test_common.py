"""CLI plumbing (cli/_common.py): one-line errors, --version/--help, default-command groups."""

from __future__ import annotations

import subprocess
import sys

import typer
from typer.testing import CliRunner



def test_default_command_group_routes():
    from attnscope.cli._common import make_default_group

    app = typer.Typer(cls=make_default_group("score"))
    seen = {}

    @app.command("score")
    def score(sources: list[str]):
        seen["score"] = sources

    @app.command("plot")
    def plot(results: str):
        seen["plot"] = results

    r = CliRunner()
    assert r.invoke(app, ["a", "b"]).exit_code == 0 and seen["score"] == ["a", "b"]
    assert r.invoke(app, ["plot", "r.csv"]).exit_code == 0 and seen["plot"] == "r.csv"



def test_cli_user_error_is_one_line_exit_2():
    code = (
        "import typer\n"
        "from attnscope.cli._common import run_app\n"
        "from attnscope.errors import InputError\n"
        "app = typer.Typer()\n"
        "@app.command()\n"
        "def go():\n"
        "    raise InputError('no such model directory: /nope')\n"
        "run_app(app)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == "attnscope: error: no such model directory: /nope"



def test_cli_version_and_help():
    r = subprocess.run([sys.executable, "-m", "attnscope", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == __import__("attnscope").__version__
