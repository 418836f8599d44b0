"""Type checkers see attnscope's API: mypy on the README's Python example is clean and catches a misuse."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _docblocks import ROOT, python_blocks

pytest.importorskip("mypy", reason="mypy is in the test extra (pip install 'attnscope[test]')")

#: third-party packages mypy does not follow (their types are not what is checked here, and torch alone
#: would take minutes); attnscope itself is followed
SKIPPED = ("torch", "transformers", "pandas", "numpy", "matplotlib", "sklearn", "scipy", "numba", "huggingface_hub",
           "safetensors", "gguf", "typer", "rich", "yaml", "submitit", "onnx", "datasets", "tokenizers", "einops",
           "pyarrow", "IPython", "threadpoolctl", "hypothesis")


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n\n"
                      f"[mypy-{','.join(p + '.*' for p in SKIPPED)}]\nfollow_imports = skip\n")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(code)
    src = str(ROOT / "src")
    env = {**os.environ, "MYPYPATH": src, "PYTHONPATH": src}
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", os.devnull,
                           "--no-error-summary", "--show-error-codes", str(snippet)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)


def _readme_example() -> str:
    blocks = python_blocks(ROOT / "README.md")
    assert blocks, "README.md has no Python example"
    return "\n".join(b.code for b in blocks)


def test_the_readme_example_type_checks_clean(tmp_path):
    code = _readme_example() + (
        "\nimport attnscope\n"
        "table = attnscope.geometry.summarize(df)        # the rooms are attributes of attnscope\n"
        "from attnscope.geometry import score, wqk_block\n"
        "from attnscope.training import compare\n"
    )
    r = _mypy(tmp_path, code)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


MISUSES = {  # each line a misuse, and what mypy says about it
    "n: int = geo.score": 'Incompatible types in assignment (expression has type "',  # "def score(..." or "Callable[...]" by mypy version
    "geo.score(minilm, k='two')": 'Argument "k" to "score" has incompatible type "str"',
    "from attnscope.heads import extrakt": 'Module "attnscope.heads" has no attribute "extrakt"',
    "attnscope.geometri": 'Module has no attribute "geometri"',
}


def test_a_misuse_is_reported(tmp_path):
    readme = _readme_example()
    code = readme + "\nimport attnscope\n" + "\n".join(MISUSES) + "\n"
    r = _mypy(tmp_path, code)
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]
    first = readme.count("\n") + 3  # the line of the first misuse
    for n, (misuse, said) in enumerate(MISUSES.items()):
        assert any(f"snippet.py:{first + n}:" in e and said in e for e in errors), (misuse, r.stdout + r.stderr)
    assert len(errors) == len(MISUSES), r.stdout  # nothing in the README's own lines


def test_the_package_ships_its_type_marker():
    import tomllib

    assert (ROOT / "src" / "attnscope" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in data["tool"]["setuptools"]["package-data"]["attnscope"]
