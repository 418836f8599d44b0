"""attnscope report: the routing / filtering section (the rank cascade's table and figure), and --no-spectra."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnscope.report import build_report, render_html

from .test_report import _pngs, tiny_bert  # noqa: F401  (the fixture)


def test_report_holds_the_cascade(tiny_bert: Path) -> None:  # noqa: F811
    from attnscope.geometry import rank_cascade, score

    rep = build_report(str(tiny_bert))
    want = rank_cascade(score(str(tiny_bert), spectra=True))
    assert rep.cascade is not None and len(rep.cascade) == 3
    assert rep.cascade["anti_rank"].tolist() == pytest.approx(want["anti_rank"].tolist(), abs=1e-12)
    page = render_html(rep)
    from attnscope.report import _cell

    assert "Routing and filtering" in page and f">{_cell(float(want['anti_rank'].iloc[0]))}</td>" in page
    assert any("relative depth" in caption for caption in rep.figures)
    assert len(_pngs(page)) == len(rep.figures)


def test_no_spectra_leaves_the_section_out(tiny_bert: Path) -> None:  # noqa: F811
    rep = build_report(str(tiny_bert), spectra=False)
    assert rep.cascade is None and "anti_rank" not in rep.scores.columns
    assert "Routing and filtering" not in render_html(rep)
