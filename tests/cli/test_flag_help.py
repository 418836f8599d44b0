"""A flag spelled only ``--no-X`` says what it turns off: ``--no-progress  Show progress`` read as the opposite."""

from __future__ import annotations

import typer

NEGATIONS = ("No ", "Do not", "Don't", "Turn off", "Skip", "Without", "Leave out")


def _commands(cmd, path: str = "attnscope"):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


def test_every_no_flag_says_what_it_turns_off():
    from attnscope.cli import app

    root = typer.main.get_command(app)
    seen, bad = 0, []
    for path, cmd in _commands(root):
        for p in cmd.params:
            if getattr(p, "is_flag", False) and p.opts and all(o.startswith("--no-") for o in p.opts) \
                    and not p.secondary_opts:
                seen += 1
                if not (p.help or "").startswith(NEGATIONS):
                    bad.append(f"{path} {p.opts[0]}: {p.help!r}")
    assert seen >= 1  # train's --no-progress at least
    assert not bad, bad
