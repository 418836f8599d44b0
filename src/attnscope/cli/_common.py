"""Shared CLI plumbing: error mapping, a group with a default command, console helpers."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from attnscope.errors import AttnscopeError


def run_app(app: typer.Typer) -> None:
    """Run a typer app; AttnscopeError -> one line on stderr, exit 2; Ctrl-C -> exit 130.

    Usage errors (bad options) are handled by typer's standalone mode (usage + exit 2).
    """
    try:
        app()
    except AttnscopeError as exc:
        print(f"attnscope: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("attnscope: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


class DefaultCommandGroup(TyperGroup):
    """A group whose first argument is a subcommand name, or else the arguments of a default command.

    ``attnscope geometry SOURCE ...`` and ``attnscope geometry plot RESULTS`` can then coexist:
    anything that is not a known subcommand name is routed to the command named ``default_command``.
    Use it as ``typer.Typer(cls=DefaultCommandGroup)`` and register the default command under the
    name given by the class attribute (``score`` unless overridden with ``make_default_group``).
    """

    default_command: str = "score"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default_command, *args]
        elif not args and self.default_command in self.commands:
            args = [self.default_command, "--help"]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: Any, formatter: Any) -> None:
        formatter.write_usage(ctx.command_path, f"[{self.default_command.upper()} ARGS] | COMMAND [ARGS]")


def make_default_group(default: str) -> type[DefaultCommandGroup]:
    """A DefaultCommandGroup subclass whose default command is ``default``."""
    return type(f"DefaultGroup_{default}", (DefaultCommandGroup,), {"default_command": default})


def echo_json(text: str) -> None:
    """Print JSON (already serialised) to stdout and nothing else."""
    sys.stdout.write(text)
    if not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


from attnscope.progress import stderr_console  # noqa: E402,F401  (re-exported for the CLI modules)
