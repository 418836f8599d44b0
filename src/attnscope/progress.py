"""The one progress display of attnscope: a rich bar on stderr, used by every room.

Every long job (training, geometry scoring, head extraction, executors, dynamics sweeps) shows its
progress through :func:`progress`. The bar goes to stderr so that ``--json`` output on stdout stays
clean; it is silent when stderr is not a terminal, when ``ATTNSCOPE_QUIET=1`` is set, or when the
caller passes ``enabled=False``. The library never imports the CLI for this.

    with progress(total=len(tasks), desc="zoo paper-all", unit="models") as bar:
        for t in tasks:
            ...
            bar.advance()
        bar.update(completed=n, loss="2.31")   # absolute position and extra fields
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["Bar", "progress", "track", "enabled_by_default", "stderr_console"]


def enabled_by_default() -> bool:
    """Show bars only on an interactive stderr, and not when ``ATTNSCOPE_QUIET`` is set."""
    if os.environ.get("ATTNSCOPE_QUIET", "").strip() not in ("", "0"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def stderr_console():
    """A rich console on stderr (progress and summaries never pollute stdout)."""
    from rich.console import Console

    return Console(stderr=True)


class Bar:
    """A handle on one bar: ``advance(n)``, ``update(completed=..., **fields)``. A no-op when disabled."""

    def __init__(self, rich_progress: Any = None, task_id: Any = None) -> None:
        self._p, self._task = rich_progress, task_id

    @property
    def active(self) -> bool:
        return self._p is not None

    def advance(self, n: float = 1) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def update(self, completed: float | None = None, **fields: Any) -> None:
        if self._p is not None:
            kwargs: dict[str, Any] = dict(fields)
            if completed is not None:
                kwargs["completed"] = completed
            self._p.update(self._task, **kwargs)


@contextmanager
def progress(
    total: float | None,
    desc: str,
    *,
    enabled: bool = True,
    force: bool = False,
    unit: str = "",
    start: float = 0,
    transient: bool = True,
    fields: dict[str, Any] | None = None,
) -> Iterator[Bar]:
    """A progress bar for ``total`` units of work, as a context manager yielding a :class:`Bar`.

    ``enabled`` (the caller's ``progress=`` argument): the bar is shown only if it is True and stderr
    is a terminal and ``ATTNSCOPE_QUIET`` is unset; ``force=True`` shows it on any stderr.
    ``fields`` are extra values shown after the count (e.g. ``{"loss": "-"}``), changed with
    ``bar.update(loss=...)``.
    """
    show = enabled and (force or enabled_by_default())
    if not show:
        yield Bar()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns: list[Any] = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        columns.append(TextColumn(unit))
    for name in fields or {}:
        columns.append(TextColumn(f"{name} {{task.fields[{name}]}}"))
    columns += [TimeElapsedColumn(), TimeRemainingColumn()]
    p = Progress(*columns, console=stderr_console(), transient=transient)
    with p:
        tid = p.add_task(desc, total=total, completed=start, **(fields or {}))
        yield Bar(p, tid)


def track(items: Iterable[T], desc: str, *, total: float | None = None, enabled: bool = True,
          unit: str = "") -> Iterator[T]:
    """Iterate over ``items`` with a bar (``total`` defaults to ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(total, desc, enabled=enabled, unit=unit) as bar:
        for item in items:
            yield item
            bar.advance()
