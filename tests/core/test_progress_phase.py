"""progress.phase: a step of unknown length says so from its first second off a terminal; a short one says nothing."""

from __future__ import annotations

import io
import sys
import time

import attnscope.progress as prog


def test_a_phase_off_a_terminal_writes_a_line_once_it_runs_and_one_at_its_end(monkeypatch):
    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(prog, "PHASE_LINE_S", 0.05)
    monkeypatch.setattr(prog, "LINE_AFTER_S", 0.1)
    with prog.phase("loading m"):
        time.sleep(0.3)
    lines = err.getvalue().splitlines()
    assert lines[0] == "loading m ..." and lines[-1].startswith("loading m: ") and lines[-1].endswith(" s")


def test_a_short_phase_is_silent_and_an_off_phase_too(monkeypatch):
    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with prog.phase("quick"):
        pass
    time.sleep(prog.PHASE_LINE_S + 0.2)  # its timer was cancelled: no late line either
    with prog.phase("off", enabled=False):
        time.sleep(0.01)
    assert err.getvalue() == ""


def test_a_counted_phase_says_it_started_before_its_first_unit(monkeypatch):
    monkeypatch.delenv("ATTNSCOPE_QUIET", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(prog, "PHASE_LINE_S", 0.05)
    with prog.phase("layers", total=3, unit="layers", start=1) as bar:
        time.sleep(0.2)
        assert err.getvalue() == "layers ...\n"  # before any layer is done
        bar.advance(2)
