"""One source of truth for the options of ``attnscope train``: TrainConfig's fields, --help and the docs agree."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
import typer.main

from attnscope.cli.train import EXTRA, GRID, config_options
from attnscope.cli.train import train as train_command
from attnscope.training.config import TrainConfig, cli_flag, default_text, options_table

DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def click_params() -> dict[str, object]:
    app = typer.Typer(add_completion=False)
    app.command()(train_command)
    return {p.name: p for p in typer.main.get_command(app).params}


def test_every_field_has_help_without_a_restated_default():
    for f in fields(TrainConfig):
        text = f.metadata.get("help", "")
        assert text.strip(), f"{f.name} has no help text"
        assert not re.search(r"\(default[: ]", text), f"{f.name}: the default is restated in its help"


def test_cli_options_are_the_fields_with_their_help_and_defaults():
    params = click_params()
    assert set(params) == {cli_flag(f).lstrip("-").replace("-", "_") for f in fields(TrainConfig)} | {p.name for p in EXTRA + GRID}
    for f in fields(TrainConfig):
        p = params[cli_flag(f).lstrip("-").replace("-", "_")]
        assert cli_flag(f) in p.opts
        assert p.help.startswith(f.metadata["help"])
        if default_text(f):
            assert p.help.endswith(f"[default: {default_text(f)}]")
        if f.metadata.get("short"):
            assert f.metadata["short"] in p.opts


def test_docs_table_is_the_generated_one():
    text = DOCS.read_text()
    table = text.split("<!-- options:start -->\n", 1)[1].split("<!-- options:end -->", 1)[0]
    assert table == options_table()
    assert len(table.strip().splitlines()) == len(fields(TrainConfig)) + 2


def test_parsed_flags_become_the_config():
    given = {name: (False if p.is_flag else None) for name, p in click_params().items()}
    given.update(steps="7", lr="1e-3", out="x", no_progress=True, tie_qk=True)
    cfg = TrainConfig.from_sources(None, **config_options(given))
    assert (cfg.steps, cfg.lr, cfg.out, cfg.progress, cfg.tie_qk, cfg.bf16) == (7, 1e-3, "x", False, True, False)
    assert cfg.batch_size == TrainConfig().batch_size  # options not given keep the dataclass default


@pytest.mark.parametrize("name, value, expected", [("steps", "12", 12), ("steps", 12.0, 12), ("lr", "2e-3", 2e-3),
                                                   ("lr", 1, 1.0), ("eval_every", None, None)])
def test_values_are_read_as_the_field_type(name, value, expected):
    cfg = TrainConfig.from_sources(None, **{name: value}) if value is not None else TrainConfig().validate()
    assert getattr(cfg, name) == expected and type(getattr(cfg, name)) is type(expected)
