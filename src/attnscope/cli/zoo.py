"""``attnscope zoo``: list the model registry and its groups (scoring a group is ``attnscope geometry --zoo``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from attnscope.errors import InputError

from ._common import console, echo_json

app = typer.Typer(help="The model zoo: the paper's models and named groups.", no_args_is_help=True)

_ZOO_FILE = typer.Option(None, "--zoo-file", help="A registry YAML of your own instead of the packaged one.")


@app.command("list")
def list_models(
    group: Optional[str] = typer.Option(None, "--group", "-g", help="Only models of this group (see `zoo groups`)."),
    zoo_file: Optional[Path] = _ZOO_FILE,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of objects on stdout."),
) -> None:
    """List the models of the zoo (id, family, modality, type, params, groups)."""
    from attnscope.zoo import select

    entries = select(group, zoo_file)
    if as_json:
        echo_json(json.dumps([e.to_record() for e in entries]))
        return
    from ._tables import print_table

    header = ["id", "family", "modality", "type", "params", "groups", "caveats"]
    rows = [[escape(e.id), escape(e.family), e.modality, e.type, _human(e.params),
             escape(" ".join(g for g in e.groups if g != "paper-all")), escape(" ".join(e.caveats))] for e in entries]
    con = console(stderr=False)  # COLUMNS wide; piped without COLUMNS: 160, not squeezed into 80
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con.width = 160
    print_table(con, f"attnscope zoo: {group or 'all'} ({len(entries)} models)", header, rows, keys=("id",),
                left=[h for h in header if h != "params"], fold=("id", "groups", "caveats"))


@app.command("groups")
def list_groups(
    zoo_file: Optional[Path] = _ZOO_FILE,
    as_json: bool = typer.Option(False, "--json", help="Print {group: n_models} as JSON on stdout."),
) -> None:
    """List the named groups of the zoo and how many models each holds."""
    from attnscope.zoo import groups

    counts = groups(zoo_file)
    if as_json:
        echo_json(json.dumps(counts))
        return
    width = max((len(g) for g in counts), default=5)
    for g, n in counts.items():
        typer.echo(f"{g:<{width}}  {n:>4} models")


@app.command("show")
def show_model(
    model_id: str = typer.Argument(..., help="A model id from the registry (the hub id for most)."),
    zoo_file: Optional[Path] = _ZOO_FILE,
    as_json: bool = typer.Option(False, "--json", help="Print the entry as JSON on stdout."),
) -> None:
    """One model's entry: family, type, size, groups, caveats, where its installed local copy is (or what
    installs it) and the paper's published scores."""
    from attnscope.zoo import get_entry

    entry = get_entry(model_id, zoo_file)
    if entry is None:
        raise InputError(f"{model_id} is not in the zoo (see `attnscope zoo list`)")
    rec = entry.to_record()
    where = entry.installed_path()
    if entry.source:  # where the local copy is, or what installs it
        rec["installed"] = None if where is None else str(where)
        if where is None:
            rec["install"] = entry.install_hint()
    if as_json:
        echo_json(json.dumps(rec))
        return
    typer.echo(f"{entry.id}: {entry.family} {entry.type} ({entry.modality}), {_human(entry.params)} parameters")
    typer.echo(f"  groups: {', '.join(entry.groups)}")
    if not entry.source:
        typer.echo("  weights: from the Hugging Face hub (no local copy in the zoo)")
    elif where is None:
        typer.echo(f"  local copy: not installed ({entry.install_hint()})")
    else:
        joined = "" if where.exists() else " (joined from its installed parts on first use)"
        typer.echo(f"  local copy: {where}{joined}; `attnscope geometry {entry.id}` reads it offline")
    if entry.caveats:
        typer.echo(f"  caveats: {', '.join(entry.caveats)}")
    for stack, p in entry.published.items():
        s, d = p.symmetry, p.directionality
        typer.echo(f"  paper, {stack} ({p.layers} layers): s {s[0]:+.2f} [{s[1]:+.2f}, {s[2]:+.2f}]  "
                   f"d {d[0]:+.2f} [{d[1]:+.2f}, {d[2]:+.2f}]" + ("" if p.plotted else "  (not plotted)"))


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(n)
