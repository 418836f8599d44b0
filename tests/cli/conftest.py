"""Fixtures for the CLI tests: the tiny random models on disk that tests/geometry builds."""

from tests.geometry.conftest import tiny_bert_dir, tiny_llama, tiny_llama_dirs  # noqa: F401
