"""attnscope report: one self-contained HTML page, checked as text and rendered in a real headless Chromium."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnscope.errors import AttnscopeError
from attnscope.report import (
    REPORT_NAME,
    build_report,
    check_out_dir,
    render_html,
    write_report,
)

PUBLISHED_S, PUBLISHED_D = 0.61, -0.37  # made-up values of a test registry


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(3)
    cfg = BertConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                     num_attention_heads=4, max_position_embeddings=64)  # fmt: skip
    path = tmp_path_factory.mktemp("bert") / "tiny-bert"
    BertModel(cfg).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def registry(tiny_bert: Path, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("zoo") / "zoo.yaml"
    path.write_text(
        "- id: test/tiny-bert\n  family: bert\n  modality: text\n  type: encoder\n  params: 1000\n"
        f"  groups: [test]\n  source: {tiny_bert}\n  caveats: [random-init]\n"
        "  published:\n    encoder:\n      layers: 3\n"
        f"      symmetry: [{PUBLISHED_S}, 0.5, 0.7]\n      directionality: [{PUBLISHED_D}, -0.5, -0.2]\n"
    )
    return path


@pytest.fixture(scope="module")
def tiny_report(tiny_bert: Path, registry: Path):
    return build_report(str(tiny_bert), registry=registry)


def _pngs(page: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_report_content_matches_the_scores(tiny_report) -> None:
    from attnscope.geometry import score, summarize

    rep = tiny_report
    assert rep.name == "test/tiny-bert" and rep.registry_id == "test/tiny-bert"
    ref = summarize(score(rep.source))
    row = rep.summary.iloc[0]
    assert row["symmetry_median"] == pytest.approx(ref["symmetry_median"].iloc[0], abs=1e-12)
    assert (row["symmetry_published"], row["directionality_published"]) == (PUBLISHED_S, PUBLISHED_D)
    assert rep.metadata["hidden_size"] == 32 and rep.metadata["num_attention_heads"] == 4
    page = render_html(rep)
    assert f"{PUBLISHED_S:.3f}" in page and f"{PUBLISHED_D:.3f}" in page
    assert f"{row['symmetry_median']:+.2f}" in page
    assert "random-init" in page
    pngs = _pngs(page)
    assert len(pngs) == len(rep.figures) >= 3
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    # self-contained: nothing fetched from anywhere
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "<script" not in page and "@import" not in page and "url(" not in page
    assert rep.heads is None and "Attention heads" not in page


def test_unlisted_model_has_no_published_value(tiny_bert: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("- id: someone/else\n  family: bert\n  modality: text\n  type: encoder\n  params: 1\n  groups: [x]\n")
    rep = build_report(str(tiny_bert), registry=other)
    assert rep.registry_id is None and np.isnan(rep.summary["symmetry_published"]).all()
    page = render_html(rep)
    assert "not in the registry" in page
    assert "s (paper)" not in page and "d (paper)" not in page  # no column without a value in it


def test_a_stack_the_paper_did_not_score_says_so(tiny_report) -> None:
    """One stack published, one not: the paper's columns stay, the missing cells say why."""
    from dataclasses import replace

    import pandas as pd

    two = pd.concat([tiny_report.summary, tiny_report.summary.assign(stack="decoder", symmetry_published=np.nan,
                                                                      directionality_published=np.nan)])
    page = render_html(replace(tiny_report, summary=two))
    assert "s (paper)" in page and "d (paper)" in page and f"{PUBLISHED_S:.3f}" in page
    assert page.count("not in the paper") == 2 and "&ndash;</td>" not in page.split("<h3>")[0].split("Scores")[1]


def test_write_report_is_atomic_and_checks_out(tiny_report, tmp_path: Path) -> None:
    path = write_report(tiny_report, tmp_path / "new" / "dir")
    assert path.name == REPORT_NAME and path.read_text().startswith("<!DOCTYPE html>")
    # no temp or probe file left; the manifest proves the page is attnscope's (the next report may replace it)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([REPORT_NAME, "attnscope-manifest.json"])
    assert write_report(tiny_report, tmp_path / "new" / "dir") == path
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for bad in (blocker, blocker / "sub"):
        with pytest.raises(AttnscopeError, match="^out="):  # StorageError: Python's words (--out in the CLI)
            check_out_dir(bad)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnscope", "report", *args], capture_output=True, text=True, timeout=300, check=False)


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = _cli(str(tmp_path / "no-such-model"), "--out", str(blocker / "sub"))  # --out is checked first
    assert r.returncode == 2 and "--out" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _cli(str(tmp_path / "no-such-model"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = _cli("--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "SOURCE" in r.stderr
    assert not (tmp_path / "o" / REPORT_NAME).exists()


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium)")
    return exe


def screenshot(page: Path, png: Path, tmp_path: Path, height: int = 2400) -> np.ndarray:
    """Render ``page`` in headless Chromium and return the screenshot as an RGB float array."""
    import matplotlib.image as mpimg

    cmd = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}", "--hide-scrollbars",
        f"--window-size=1200,{height}", f"--screenshot={png}", page.resolve().as_uri(),
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0 and png.is_file(), r.stderr[-2000:]
    img = mpimg.imread(io.BytesIO(png.read_bytes()), format="png")
    return img[..., :3]


def _colour_share(img: np.ndarray) -> float:
    """Share of strongly coloured pixels: text and rules are grey/navy-ish, figures bring colour."""
    return float(((img.max(-1) - img.min(-1)) > 0.35).mean())


@pytest.mark.browser
def test_report_renders_in_chromium(tiny_report, tmp_path: Path) -> None:
    page = write_report(tiny_report, tmp_path / "out")
    # (tall: the routing / filtering section stands above the figures since the spectra came in)
    img = screenshot(page, tmp_path / "shot.png", tmp_path, height=4000)
    assert img.shape[1] == 1200
    # the figures were decoded and drawn: a text-only page (or broken images) has almost no colour (the page's
    # figures cover ~0.9% of this tall canvas; the same page without its images, below, under a fifth of that)
    assert _colour_share(img) > 0.005
    blank = render_html(tiny_report)
    blank = re.sub(r'src="data:image/png;base64,[^"]+"', 'src="data:image/png;base64,"', blank)
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "r.html").write_text(blank)
    img_blank = screenshot(tmp_path / "blank" / "r.html", tmp_path / "blank.png", tmp_path, height=4000)
    assert _colour_share(img_blank) < _colour_share(img) / 5


@pytest.mark.slow
@pytest.mark.browser
def test_demo_model_report_with_heads_in_chromium(minilm_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    r = _cli("--demo", "--out", str(out), "--data", "builtin", "--windows", "2", "--length", "64")
    assert r.returncode == 0, r.stderr
    page = (out / REPORT_NAME).read_text()
    assert "sentence-transformers/all-MiniLM-L6-v2" in page and "BertModel" in page
    assert "Attention heads" in page and "induction_score (causal def.)" in page
    assert len(_pngs(page)) == 4  # s/d per layer, per head, the W_qk block, the head metrics
    img = screenshot(out / REPORT_NAME, tmp_path / "demo.png", tmp_path, height=4000)
    assert _colour_share(img) > 0.01
