"""Every ``attnscope.<name>...`` that README.md and docs/*.md write resolves as written, after a bare
``import attnscope`` (each in a fresh interpreter, so that no earlier import binds it by chance)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from _docblocks import ROOT, doc_files

_NAME = re.compile(r"(?<![\w./-])attnscope(?:\.[A-Za-z_]\w*)+")
#: written in the docs but not Python names: files and folders (``attnscope.egg-info``), commands
_NOT_NAMES = re.compile(r"\.(md|py|yaml|json|csv|html|png|gguf|toml|txt)$")


def doc_names() -> list[str]:
    names: set[str] = set()
    for path in doc_files():
        for m in _NAME.finditer(path.read_text()):
            if not _NOT_NAMES.search(m.group(0)):
                names.add(m.group(0))
    return sorted(names)


def test_the_docs_name_some_rooms_and_functions():
    names = doc_names()
    assert "attnscope.atlas.stats.spearman_test" in names and len(names) > 20, names


#: checked together in one interpreter per first name below attnscope: a name is resolved by attribute access
#: from ``import attnscope`` alone before any other of its group is touched
_SCRIPT = """
import importlib, sys
import attnscope
bad = []
for name in sys.argv[1:]:
    obj = attnscope
    for part in name.split(".")[1:]:
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            bad.append(f"{name}: {exc}")
            break
print("\\n".join(bad))
"""


@pytest.mark.parametrize("name", doc_names())
def test_a_name_in_the_docs_resolves_after_import_attnscope(name):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", _SCRIPT, name], capture_output=True, text=True, env=env, timeout=120,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "", res.stdout
