"""attnscope.progress: one mechanism, four places (terminal bar, notebook line, plain log lines, off).

The notebook display is checked here with a fake kernel; tests/examples/test_notebook.py runs it in a
real one.
"""

import io
import re
import subprocess
import sys

import pytest

from attnscope import progress as prog


class TTY(io.StringIO):
    def isatty(self):
        return True


class Clock:
    """A clock the test moves by hand (no timed assertion anywhere)."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(prog, "_clock", c)
    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    return c


class Captured:
    """stderr as pytest captures it during the test (a fixture's own sys.stderr would be replaced)."""

    def __init__(self, capsys):
        self._capsys, self._text = capsys, ""

    def getvalue(self):
        self._text += self._capsys.readouterr().err
        return self._text


@pytest.fixture
def captured_stderr(capsys):
    return Captured(capsys)


def test_disabled_bar_is_a_no_op(captured_stderr):
    with prog.progress(10, "x", enabled=False) as bar:
        bar.advance()
        bar.update(completed=5, loss="1.0")
    assert not bar.active
    assert captured_stderr.getvalue() == ""


def test_where_progress_goes(monkeypatch):
    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    monkeypatch.setattr(sys, "stderr", TTY())
    assert prog.display_mode() == "terminal"
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert prog.display_mode() == "lines"
    assert prog.display_mode(force=True) == "terminal"
    monkeypatch.setattr(prog, "in_jupyter", lambda: True)
    assert prog.display_mode() == "jupyter"
    assert prog.display_mode(enabled=False) == "off"
    monkeypatch.setenv("ATTNSCOPE_QUIET", "1")
    assert prog.display_mode() == "off" and prog.display_mode(force=True) == "off"
    monkeypatch.setenv("ATTNSCOPE_QUIET", "0")
    assert prog.display_mode() == "jupyter"


def test_not_a_notebook_without_a_kernel(monkeypatch):
    class Shell:  # the `ipython` terminal REPL: a shell, no kernel
        kernel = None

    class FakeIPython:
        shell = None

        @classmethod
        def get_ipython(cls):
            return cls.shell

    monkeypatch.setitem(sys.modules, "IPython", FakeIPython)
    assert not prog.in_jupyter()
    FakeIPython.shell = Shell()
    assert not prog.in_jupyter()
    Shell.kernel = object()
    assert prog.in_jupyter()
    monkeypatch.delitem(sys.modules, "IPython")
    assert not prog.in_jupyter()


def test_off_a_terminal_plain_lines_every_tenth(clock, captured_stderr):
    with prog.progress(20, "heads", unit="windows") as bar:
        assert bar.active
        for _ in range(20):
            clock.t += 1.0
            bar.advance()
    text = captured_stderr.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    pattern = re.compile(r"^heads: \d+/20 windows \(\d+%\), \d+ s(, ~\d+ s left)?$")
    assert all(pattern.match(line) for line in lines), lines
    # one line per 10% once the job has run LINE_AFTER_S (2 s): 10%..100%; the end line would repeat the 100% one
    # word for word, so it is not written again (a log once showed the last line twice)
    assert len(lines) == 10, lines
    assert lines[0].startswith("heads: 2/20 windows (10%), 2 s, ~18 s left")
    assert lines[-1] == "heads: 20/20 windows (100%), 20 s"


def test_the_end_line_is_written_when_it_says_something_new(clock, captured_stderr):
    """Time passing after the last item (a final save) makes the end line differ: then it is written."""
    with prog.progress(4, "save", unit="files") as bar:
        for _ in range(4):
            clock.t += 1.0
            bar.advance()
        clock.t += 3.0
    assert captured_stderr.getvalue().splitlines()[-2:] == ["save: 4/4 files (100%), 4 s", "save: 4/4 files (100%), 7 s"]


def test_off_a_terminal_a_line_every_few_seconds_without_a_total(clock, captured_stderr):
    with prog.progress(None, "sweep", unit="chunks", fields={"loss": "-"}) as bar:
        for i in range(10):
            clock.t += 3.0
            bar.update(completed=i + 1, loss=f"{1 / (i + 1):.2f}")
    lines = captured_stderr.getvalue().splitlines()
    # nothing in the first 2 s; then a line once 10 s passed since the last one: at 12, 24 s; the end at 30 s
    assert lines == ["sweep: 4 chunks, 12 s, loss 0.25", "sweep: 8 chunks, 24 s, loss 0.12",
                     "sweep: 10 chunks, 30 s, loss 0.10"]


def test_a_short_job_and_a_failed_one_write_nothing_at_the_end(clock, captured_stderr):
    with prog.progress(3, "quick") as bar:
        bar.advance(3)
    assert captured_stderr.getvalue() == ""
    with pytest.raises(RuntimeError):
        with prog.progress(3, "broken") as bar:
            clock.t += 5.0
            raise RuntimeError("boom")
    assert captured_stderr.getvalue() == ""  # the error is the job's last word, not a progress line


def test_a_resumed_count_estimates_from_what_this_run_did(clock, captured_stderr):
    with prog.progress(100, "train", start=50) as bar:
        clock.t += 10.0
        bar.update(completed=60)
    first = captured_stderr.getvalue().splitlines()[0]
    assert first == "train: 60/100 (60%), 10 s, ~40 s left"  # 10 steps in 10 s, 40 to go


def test_notebook_line_updates_in_place(clock, monkeypatch, captured_stderr):
    shown = []

    class Handle:
        def update(self, obj, raw=False):
            shown.append(("update", obj, raw))

    def display(obj, raw=False, display_id=False):
        shown.append(("display", obj, raw))
        assert display_id is True
        return Handle()

    IPython = pytest.importorskip("IPython", reason="IPython (the test extra's ipykernel brings it) holds the notebook display")
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(prog, "in_jupyter", lambda: True)
    with prog.progress(4, "train", fields={"loss": "-"}) as bar:
        for i in range(4):
            clock.t += 1.0
            bar.update(completed=i + 1, loss=f"{i:.1f}")
    assert captured_stderr.getvalue() == ""  # nothing on the cell's stderr
    assert shown[0][0] == "display" and all(kind == "update" for kind, _, _ in shown[1:])
    assert all(raw for _, _, raw in shown)
    last = shown[-1][1]
    assert last["text/plain"] == "train: 4/4 (100%), 4 s, loss 3.0"
    assert '<progress value="1.0000" max="1"' in last["text/html"] and "train: 4/4" in last["text/html"]


def test_notebook_line_is_throttled(clock, monkeypatch):
    updates = []

    class Handle:
        def update(self, obj, raw=False):
            updates.append(obj["text/plain"])

    IPython = pytest.importorskip("IPython", reason="IPython (the test extra's ipykernel brings it) holds the notebook display")
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False, display_id=False: Handle())
    monkeypatch.setattr(prog, "in_jupyter", lambda: True)
    with prog.progress(1000, "fast") as bar:
        for _ in range(1000):
            clock.t += 0.001
            bar.advance()
    # 1 s of work at one redraw per JUPYTER_EVERY_S (0.2 s): a handful of redraws, and the final count
    assert 3 <= len(updates) <= 8 and updates[-1].startswith("fast: 1000/1000")


def test_terminal_bar_counts_and_shows_fields(monkeypatch):
    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    with prog.progress(4, "train", force=True, transient=False, fields={"loss": "-"}) as bar:
        assert bar.active
        for _ in range(4):
            bar.advance()
        bar.update(loss="0.1234")
    text = out.getvalue()
    assert "train" in text and "4/4" in text and "0.1234" in text


def test_quiet_env_silences_every_mode(monkeypatch, clock, captured_stderr):
    monkeypatch.setenv("ATTNSCOPE_QUIET", "1")
    with prog.progress(4, "x") as bar:
        clock.t += 60
        bar.advance(4)
    assert not bar.active and captured_stderr.getvalue() == ""


def test_track_yields_every_item():
    assert list(prog.track(range(5), "t", enabled=False)) == [0, 1, 2, 3, 4]


def test_library_import_does_not_load_the_cli_nor_ipython():
    code = (
        "import sys, attnscope.progress, attnscope.dynamics.sweeps, attnscope.runs, attnscope.geometry;"
        "import attnscope.training.trainer, attnscope.heads.maps;"
        "bad = [m for m in sys.modules if m.startswith('attnscope.cli') or m in ('typer', 'IPython')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_captured_cli_run_logs_plain_lines(tmp_path):
    """A real job with stderr into a file (nohup, Slurm): plain lines, no escape codes, no carriage return."""
    code = (
        "import attnscope.progress as p, itertools;"
        "c = itertools.count(0, 0.5); p._clock = lambda: next(c);"  # half a second per look at the clock
        "[None for _ in p.track(range(40), 'sweep', unit='values')]"
    )
    log = tmp_path / "job.log"
    with open(log, "w") as fh:
        r = subprocess.run([sys.executable, "-c", code], stderr=fh, text=True,
                           env={**__import__("os").environ, "ATTNSCOPE_QUIET": ""})
    assert r.returncode == 0
    text = log.read_text()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines and lines[-1].startswith("sweep: 40/40 values (100%)")
    assert all(line.startswith("sweep: ") for line in lines)
