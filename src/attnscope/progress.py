"""The one progress display of attnscope, for a terminal, a notebook and a log; used by every room.

Every long job (training, geometry scoring, head extraction and the heads study, executors, zoo
surveys, dynamics sweeps, the report) shows its progress through :func:`progress` (or :func:`track`).
Where it shows is decided here, once, by :func:`display_mode`:

* ``"terminal"``: stderr is a terminal: a live rich bar on stderr (``--json`` on stdout stays clean);
* ``"jupyter"``: inside a Jupyter kernel: one live line in the cell's output (an IPython display that
  is updated in place: no ipywidgets needed, so no widget warning where it is absent);
* ``"lines"``: anywhere else (CI, ``nohup``, a Slurm log, captured stderr, the log file of a training
  subprocess): a plain line on stderr every :data:`LINE_EVERY_S` seconds or every 10% of the work,
  ``heads MiniLM: 3/6 layers (50%), 45 s, ~45 s left``, without carriage returns or escape codes; a job
  shorter than :data:`LINE_AFTER_S` writes nothing;
* ``"off"``: the caller passed ``enabled=False`` (``progress=False``), or ``ATTNSCOPE_QUIET=1`` is set.

Inside :func:`plain_lines` every display is ``"lines"`` (a job run inside another job's display, e.g.
each training run of a grid under the grid's own bar, or in a pool worker that shares the terminal).

    with progress(total=len(tasks), desc="zoo paper-all", unit="models") as bar:
        for t in tasks:
            ...
            bar.advance()
        bar.update(completed=n, loss="2.31")   # absolute position and extra fields

The library never imports the CLI (nor IPython: a kernel has already imported it) for this.
"""

from __future__ import annotations

import html
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

T = TypeVar("T")
Mode = Literal["off", "terminal", "jupyter", "lines"]

__all__ = ["Bar", "Mode", "display_mode", "enabled_by_default", "in_jupyter", "phase", "plain_lines", "progress",
           "quiet_widget_warning", "stderr_console", "track", "LINE_EVERY_S", "LINE_AFTER_S"]

#: off a terminal, a plain line at least this often (seconds) while the count moves, or at each 10%
LINE_EVERY_S = 10.0
#: off a terminal, a job that ends within this many seconds writes no line at all
LINE_AFTER_S = 2.0
#: off a terminal, a :func:`phase` still running after this many seconds says so in a line
PHASE_LINE_S = 1.0
#: in a notebook, the live line is redrawn at most this often (seconds)
JUPYTER_EVERY_S = 0.2

_clock = time.monotonic  # the one clock of every display (tests replace it)


def quiet() -> bool:
    """Whether ``ATTNSCOPE_QUIET`` (anything but empty or 0) turns every progress display off."""
    return os.environ.get("ATTNSCOPE_QUIET", "").strip() not in ("", "0")


def enabled_by_default() -> bool:
    """Whether progress shows at all unless a caller turns it off (``ATTNSCOPE_QUIET`` unset)."""
    return not quiet()


def in_jupyter() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel, e.g. not the ``ipython`` REPL)."""
    ipython = sys.modules.get("IPython")  # a kernel has imported it; never import it here
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # an IPython too broken to ask: not a notebook we can draw in
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def quiet_widget_warning() -> None:
    """In a notebook without ipywidgets, keep tqdm's "IProgress not found" warning out of the cells.

    transformers and huggingface_hub import ``tqdm.auto`` (for bars attnscope never draws: its own
    display above needs no widgets); that import warns in every kernel without ipywidgets. Called
    by ``import attnscope`` in a kernel; it ignores that one message and nothing else.
    """
    import warnings

    warnings.filterwarnings("ignore", message=r"IProgress not found")


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def display_mode(enabled: bool = True, *, force: bool = False) -> Mode:
    """Where a progress display goes: ``off``, ``terminal`` (rich bar), ``jupyter`` or ``lines`` (see module doc).

    ``force=True`` draws the rich bar on any stderr (what a terminal would show).
    """
    if not enabled or quiet():
        return "off"
    if _plain:
        return "lines"
    if force:
        return "terminal"
    if in_jupyter():
        return "jupyter"
    return "terminal" if _stderr_is_terminal() else "lines"


_plain: list[bool] = []  # inside plain_lines()


@contextmanager
def plain_lines() -> Iterator[None]:
    """Inside this block every progress display that shows at all is plain lines on stderr (see the module doc)."""
    _plain.append(True)
    try:
        yield
    finally:
        _plain.pop()


def stderr_console():
    """A rich console on stderr (progress and summaries never pollute stdout)."""
    from rich.console import Console

    return Console(stderr=True)


def _duration(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``2 h 05 min``: a length of time a person reads at a glance."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class _State:
    """What a bar knows: the count, the total, the extra fields and when it started."""

    desc: str
    total: float | None
    unit: str = ""
    completed: float = 0.0
    fields: dict[str, Any] = field(default_factory=dict)
    t0: float = field(default_factory=lambda: _clock())
    start: float = 0.0  # the count at t0 (a resumed run): the rate and the time left use what was done since

    def elapsed(self) -> float:
        return _clock() - self.t0

    def fraction(self) -> float | None:
        if not self.total or self.total <= 0:
            return None
        return min(max(self.completed / self.total, 0.0), 1.0)

    def line(self) -> str:
        """One plain line: ``desc: 3/6 layers (50%), 45 s, ~45 s left, loss 2.31``."""
        done_units = self.completed
        if self.total is not None and float(self.total).is_integer():  # whole units: those finished (the share
            done_units = math.floor(self.completed + 1e-9)             # of the one running is in the percent)
        count = f"{done_units:g}" if self.total is None else f"{done_units:g}/{self.total:g}"
        parts = [count + (f" {self.unit}" if self.unit else "")]
        frac = self.fraction()
        if frac is not None:
            parts[0] += f" ({100 * frac:.0f}%)"
        elapsed = self.elapsed()
        parts.append(_duration(elapsed))
        done = self.completed - self.start
        if frac is not None and 0 < done and self.completed < self.total:  # type: ignore[operator]
            parts.append(f"~{_duration(elapsed / done * (self.total - self.completed))} left")  # type: ignore[operator]
        parts += [f"{k} {v}" for k, v in self.fields.items()]
        return f"{self.desc}: " + ", ".join(parts)


class _View(Protocol):
    def show(self, state: _State) -> None: ...
    def close(self, state: _State, ok: bool) -> None: ...


class _LineView:
    """Off a terminal: a plain line on stderr every LINE_EVERY_S seconds or 10%, and one at the end."""

    def __init__(self) -> None:
        self._stream = sys.stderr  # as it is now (a test's or a notebook's capture included)
        self._last_t = _clock()
        self._last_decile = 0
        self._written = 0
        self._last_line = ""

    def _write(self, state: _State) -> None:
        line = state.line()
        if line == self._last_line:  # the end line right after the 100% line: said once
            return
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # a closed or full log: progress is never worth failing the job
            return
        self._written += 1
        self._last_t = _clock()
        self._last_line = line

    def show(self, state: _State) -> None:
        if state.elapsed() < LINE_AFTER_S:
            return
        frac = state.fraction()
        decile = -1 if frac is None else math.floor(10 * frac + 1e-9)
        if decile > self._last_decile or _clock() - self._last_t >= LINE_EVERY_S:
            self._last_decile = max(decile, self._last_decile)
            self._write(state)

    def close(self, state: _State, ok: bool) -> None:
        if ok and (self._written or state.elapsed() >= LINE_AFTER_S):
            self._write(state)


class _JupyterView:
    """In a notebook: one output line (a ``<progress>`` bar and the plain line) updated in place."""

    def __init__(self, state: _State) -> None:
        from IPython.display import display

        self._handle = display(self._bundle(state), raw=True, display_id=True)
        self._last_t = _clock()

    @staticmethod
    def _bundle(state: _State) -> dict[str, str]:
        text = state.line()
        frac = state.fraction()
        bar = "" if frac is None else f'<progress value="{frac:.4f}" max="1" style="width:18em"></progress> '
        return {"text/plain": text, "text/html": f'<div style="font-family:monospace">{bar}{html.escape(text)}</div>'}

    def _draw(self, state: _State) -> None:
        if self._handle is not None:
            self._handle.update(self._bundle(state), raw=True)
        self._last_t = _clock()

    def show(self, state: _State) -> None:
        if _clock() - self._last_t >= JUPYTER_EVERY_S:
            self._draw(state)

    def close(self, state: _State, ok: bool) -> None:
        self._draw(state)  # the cell keeps where the job ended (finished, or where an interrupt stopped it)


class _RichView:
    """On a terminal: a live rich bar on stderr (rich redraws it from its own thread)."""

    def __init__(self, state: _State, transient: bool) -> None:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        columns: list[Any] = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn()]
        if state.unit:
            columns.append(TextColumn(state.unit))
        for name in state.fields:
            columns.append(TextColumn(f"{name} {{task.fields[{name}]}}"))
        columns += [TimeElapsedColumn(), TimeRemainingColumn()]
        self._p = Progress(*columns, console=stderr_console(), transient=transient)
        self._p.start()
        self._task = self._p.add_task(state.desc, total=state.total, completed=state.completed, **state.fields)

    def show(self, state: _State) -> None:
        self._p.update(self._task, completed=state.completed, **state.fields)

    def close(self, state: _State, ok: bool) -> None:
        self.show(state)
        self._p.stop()


class Bar:
    """A handle on one progress display: ``advance(n)``, ``update(completed=..., **fields)``.

    A no-op when the display is off (``active`` is then False).
    """

    def __init__(self, state: _State | None = None, view: _View | None = None) -> None:
        self._state, self._view = state, view

    @property
    def active(self) -> bool:
        return self._view is not None

    def advance(self, n: float = 1) -> None:
        if self._view is not None and self._state is not None:
            self._state.completed += n
            self._view.show(self._state)

    def update(self, completed: float | None = None, **fields: Any) -> None:
        if self._view is not None and self._state is not None:
            if completed is not None:
                self._state.completed = completed
            self._state.fields.update(fields)
            self._view.show(self._state)


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
    """A progress display for ``total`` units of work (None: unknown), as a context manager yielding a :class:`Bar`.

    ``enabled`` is the caller's ``progress=`` argument; where the display goes is :func:`display_mode`'s
    choice. ``force=True`` draws the terminal bar on any stderr. ``start``: the count already done (a
    resumed run). ``transient``: the terminal bar vanishes when done. ``fields`` are extra values
    shown after the count (e.g. ``{"loss": "-"}``), changed with ``bar.update(loss=...)``.
    """
    mode = display_mode(enabled, force=force)
    if mode == "off":
        yield Bar()
        return
    state = _State(desc=desc, total=total, unit=unit, completed=start, start=start, fields=dict(fields or {}))
    view: _View
    if mode == "terminal":
        view = _RichView(state, transient)
    elif mode == "jupyter":
        view = _JupyterView(state)
    else:
        view = _LineView()
    ok = False
    try:
        yield Bar(state, view)
        ok = True
    finally:
        view.close(state, ok)


def track(items: Iterable[T], desc: str, *, total: float | None = None, enabled: bool = True,
          unit: str = "") -> Iterator[T]:
    """Iterate over ``items`` with a progress display (``total`` defaults to ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(total, desc, enabled=enabled, unit=unit) as bar:
        for item in items:
            yield item
            bar.advance()


@contextmanager
def note_after(text: str, *, enabled: bool = True, after: float | None = None) -> Iterator[None]:
    """``text`` as one plain line on stderr once the block has run ``after`` seconds (default :data:`PHASE_LINE_S`),
    off a terminal only: for work whose own display comes later, where a log would otherwise stay silent (a worker
    pool starting, a first task loading its model before a counted bar writes its first line). A block over within
    it writes nothing (so an early one-line error stays one line); on a terminal or in a notebook the bars show
    from their first second anyway."""
    if display_mode(enabled) != "lines":
        yield
        return
    import threading

    def write() -> None:
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed or full log: progress is never worth failing the job
            pass

    timer = threading.Timer(PHASE_LINE_S if after is None else after, write)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@contextmanager
def phase(desc: str, *, enabled: bool = True, total: float | None = None, unit: str = "",
          start: float = 0) -> Iterator[Bar]:
    """One step of the work (loading a model, a clean pass, the statistics; with ``total``, counted like
    :func:`progress`), shown from its first second: on a terminal or in a notebook a live line with the time
    spent; off a terminal a plain line once it has run :data:`PHASE_LINE_S` (``desc ...``, where a counted
    bar would write its first line only after its first unit, minutes in for a slow one) and, when it took
    over :data:`LINE_AFTER_S`, one as it ends (``desc: 12 s``; a counted one ends with its count)."""
    if display_mode(enabled) != "lines":
        with progress(total, desc, enabled=enabled, unit=unit, start=start) as bar:
            yield bar
        return

    def write(text: str) -> None:
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed or full log: progress is never worth failing the job
            pass

    import threading

    t0 = _clock()
    first = threading.Timer(PHASE_LINE_S, write, args=(f"{desc} ...",))  # a phase over within it: no line
    first.daemon = True
    first.start()
    try:
        if total is None:
            yield Bar()
        else:
            with progress(total, desc, enabled=enabled, unit=unit, start=start) as bar:
                yield bar
    finally:
        first.cancel()
    if total is None and _clock() - t0 >= LINE_AFTER_S:
        write(f"{desc}: {_duration(_clock() - t0)}")
