"""Fixtures for source tests: the tiny on-disk models of tests/geometry (loaded by path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_geometry_models", Path(__file__).parents[1] / "geometry" / "models.py")
models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(models)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def hf_tiny_llama():
    pytest.importorskip("transformers")
    return models.llama_model(seed=0)


@pytest.fixture(scope="session")
def hf_llama_dirs(hf_tiny_llama, tmp_path_factory):
    root = tmp_path_factory.mktemp("src_llama")
    return {layout: models.write_model(hf_tiny_llama, root / layout, layout) for layout in ("single", "sharded", "bin")}
