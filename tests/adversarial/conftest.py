"""Tiny hostile fixtures: a two-model local zoo of GGUF llamas (never the network)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1] / "zoo"))


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory):
    """A registry YAML with two small local GGUF llamas (group ``tiny``)."""
    from _fakes import tiny_llama, write_llama_gguf

    root = tmp_path_factory.mktemp("tinyzoo")
    for name, seed, layers in (("a", 1, 2), ("b", 2, 1)):
        model, cfg = tiny_llama(n_layers=layers, d=32, n_heads=4, n_kv=2, seed=seed)
        write_llama_gguf(root / f"{name}.gguf", model, cfg)
    models = [{"id": f"tiny/{n}", "source": f"{n}.gguf", "family": "llama", "modality": "text", "type": "decoder",
               "params": 1000, "groups": ["tiny"]} for n in ("a", "b")]
    path = root / "zoo.yaml"
    path.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    return path
