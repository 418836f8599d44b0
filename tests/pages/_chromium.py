"""Drive a page in headless Chromium: a driver script appended to the page clicks and reads what is shown.

The driver runs in the page after its own scripts (the last element of the body), dispatches real DOM events
(the page's own listeners answer them) and writes a JSON result into ``<pre id="attnscope-test-out">``;
``--dump-dom`` returns the document as it then stands. ``screenshot=`` also saves a PNG of that state.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

HELPERS = r"""
function fire(el, type){el.dispatchEvent(new MouseEvent(type, {bubbles: type !== 'mouseenter' && type !== 'mouseleave'}));}
function out(v){const p = document.createElement('pre'); p.id = 'attnscope-test-out'; p.style.display = 'none';
  p.textContent = JSON.stringify(v);
  document.body.appendChild(p);}
"""


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium)")
    return exe


def drive(page: str, driver: str, tmp_path: Path, screenshot: Path | None = None,
          size: tuple[int, int] = (1200, 1600), name: str = "page") -> tuple[dict, str]:
    """Load ``page`` (HTML text) with ``driver`` (JavaScript calling ``out(value)``) in headless Chromium;
    returns (the value given to ``out``, chromium's stderr)."""
    html = page.replace("</body>", f"<script>{HELPERS}\n(function(){{{driver}}})();</script></body>")
    path = tmp_path / f"{name}.html"
    path.write_text(html, encoding="utf-8")
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'chromium-profile'}",
            f"--window-size={size[0]},{size[1]}"]
    r = subprocess.run([*base, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<pre id="attnscope-test-out"[^>]*>(.*?)</pre>', r.stdout, re.S)
    assert m, "the driver wrote no result: " + "\n".join(ln for ln in r.stderr.splitlines() if "CONSOLE" in ln)[-2000:]
    if screenshot is not None:
        s = subprocess.run([*base, f"--screenshot={screenshot}", path.as_uri()], capture_output=True, text=True,
                           timeout=180, check=False)
        assert s.returncode == 0 and screenshot.is_file(), s.stderr[-2000:]
    return json.loads(unescape(m.group(1))), r.stderr


def script_errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln and ("Uncaught" in ln or "Error" in ln)]
