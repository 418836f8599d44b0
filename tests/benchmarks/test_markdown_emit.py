"""benchmarks/_markdown.emit keeps one section per heading in a docs page (the latest run), never a log."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import given, strategies as st

_spec = importlib.util.spec_from_file_location("_bench_markdown", Path(__file__).parents[2] / "benchmarks" / "_markdown.py")
md = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(md)  # type: ignore[union-attr]


def test_a_rerun_replaces_its_section_and_keeps_the_others(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nintro\n\n## a\n\nold a\n\n### a detail\n\nold detail\n\n## b\n\nkept b\n")
    md.emit("## a\n\nnew a\n", str(page))
    text = page.read_text()
    assert "old a" not in text and "old detail" not in text  # the subsection belonged to the old run
    assert text.count("## a") == 1 and "new a" in text
    assert "kept b" in text and text.index("new a") < text.index("## b")
    assert text.startswith("# Title\n\nintro\n")
    assert "new a" in capsys.readouterr().out


def test_a_new_heading_is_appended_and_a_missing_page_created(tmp_path):
    page = tmp_path / "new.md"
    md.emit("## x\n\none\n", str(page))
    md.emit("## y\n\ntwo\n", str(page))
    assert page.read_text() == "## x\n\none\n\n## y\n\ntwo\n"


@given(st.lists(st.sampled_from(["p", "q", "r"]), min_size=1, max_size=8), st.integers(0, 1000))
def test_any_sequence_of_runs_leaves_one_section_per_heading_with_the_last_result(names, seed):
    page = ""
    last = {}
    for i, name in enumerate(names):
        body = f"result {seed}-{i}"
        page = md.replace_section(page, f"## {name}\n\n{body}\n")
        last[name] = body
    for name, body in last.items():
        assert page.count(f"## {name}\n") == 1
        assert body in page
    assert page.count("result") == len(last)
