"""Fixtures: tiny random models on disk (session-scoped; built once from transformers config classes)."""

from __future__ import annotations

import pytest

from .models import bert_model, llama_model, write_model


@pytest.fixture(scope="session")
def tiny_llama():
    pytest.importorskip("transformers")
    return llama_model(seed=0)


@pytest.fixture(scope="session")
def tiny_llama_dirs(tiny_llama, tmp_path_factory):
    """{layout: directory} for the same tiny GQA llama in every layout."""
    root = tmp_path_factory.mktemp("llama")
    return {layout: write_model(tiny_llama, root / layout, layout) for layout in ("single", "sharded", "bin")}


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    return write_model(bert_model(seed=1), tmp_path_factory.mktemp("bert") / "bert", "single")
