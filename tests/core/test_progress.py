"""attnscope.progress: one bar on stderr, silent off a terminal, never imports the CLI."""

import io
import subprocess
import sys

from attnscope import progress as prog


def test_disabled_bar_is_a_no_op():
    with prog.progress(10, "x", enabled=False) as bar:
        bar.advance()
        bar.update(completed=5, loss="1.0")
    assert not bar.active


def test_quiet_when_stderr_is_not_a_tty(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with prog.progress(3, "job") as bar:
        bar.advance()
    assert not bar.active
    assert sys.stderr.getvalue() == ""


def test_quiet_env_wins_over_a_tty(monkeypatch):
    class TTY(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", TTY())
    assert prog.enabled_by_default()
    monkeypatch.setenv("ATTNSCOPE_QUIET", "1")
    assert not prog.enabled_by_default()


def test_forced_bar_counts_and_shows_fields(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    with prog.progress(4, "train", force=True, transient=False, fields={"loss": "-"}) as bar:
        assert bar.active
        for _ in range(4):
            bar.advance()
        bar.update(loss="0.1234")
    text = out.getvalue()
    assert "train" in text and "4/4" in text and "0.1234" in text


def test_track_yields_every_item():
    assert list(prog.track(range(5), "t", enabled=False)) == [0, 1, 2, 3, 4]


def test_library_import_does_not_load_the_cli():
    code = (
        "import sys, attnscope.progress, attnscope.dynamics.sweeps, attnscope.runs, attnscope.geometry;"
        "import attnscope.training.trainer, attnscope.heads.maps;"
        "bad = [m for m in sys.modules if m.startswith('attnscope.cli') or m == 'typer'];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
