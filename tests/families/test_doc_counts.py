"""The counts README.md and docs/families.md state about the specs and their gold tests are the code's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_gold import CASES
from .test_spec import _our_specs

ROOT = Path(__file__).resolve().parents[2]


def _read(rel: str) -> str:
    path = ROOT / rel
    if not path.exists():
        pytest.skip(f"{rel} not shipped with this checkout")
    return " ".join(path.read_text().split())  # line breaks inside a sentence do not matter


def test_readme_counts_the_supported_model_types() -> None:
    n = len({mt for spec in _our_specs() for mt in spec.model_types})
    assert f"Supported architectures: {n} Hugging Face `model_type`s" in _read("README.md")


def test_families_page_counts_the_gold_cases() -> None:
    assert f"(`test_gold.py`, {len(CASES)} cases covering every `model_type` above" in _read("docs/families.md")
