"""The ``attnscope`` command line: a thin layer over the Python API.

Each sub-app lives in its own module (``geometry``, ``zoo``, ``train``, ``compare``, ``heads``,
``dynamics``, ``report``, ``atlas``, ``emergence``); they parse options, call the API, and print with rich. Known errors
(:class:`attnscope.errors.AttnscopeError`, and OSErrors such as a full disk) become one line on
stderr and exit code 2; any other exception is a bug: one line and exit code 1 (the traceback with
``attnscope --debug ...`` or ``ATTNSCOPE_DEBUG=1``). Warnings print as one line each.
Modules here import heavy libraries (torch, transformers, pandas) only inside commands so that
``attnscope --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os

import typer

from ._common import DEBUG_ENV, run_app

app = typer.Typer(
    name="attnscope",
    help="Structure and dynamics of self-attention: geometry of W_qk, training, head anatomy, mean-field dynamics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# (module, attribute, command name): each sub-app lives in cli/<module>.py
_SUBAPPS = [
    ("geometry", "app", "geometry"),
    ("zoo", "app", "zoo"),
    ("train", "app", "train"),
    ("compare", "app", "compare"),
    ("heads", "app", "heads"),
    ("dynamics", "app", "dynamics"),
    ("report", "report", "report"),
    ("atlas", "atlas", "atlas"),
    ("emergence", "emergence", "emergence"),
]


def _register() -> None:
    for module, attr, name in _SUBAPPS:
        obj = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:  # a plain function: a single command
            app.command(name=name)(obj)


def _print_version(value: bool) -> None:
    if value:
        from attnscope import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
    ),
    debug: bool = typer.Option(
        False, "--debug", help="Show full tracebacks and raw Python warnings (also: ATTNSCOPE_DEBUG=1)."
    ),
) -> None:
    """Structure and dynamics of self-attention."""
    if debug:
        os.environ[DEBUG_ENV] = "1"


_register()


def main() -> None:
    """Entry point: run the app, turning user errors into one line and exit code 2 (bugs: exit 1)."""
    run_app(app)
