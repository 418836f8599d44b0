"""A tiny local fake zoo (GGUF files and CTranslate2 dirs written from tiny random HF models); never the network."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def fake_zoo(tmp_path_factory):
    """A registry YAML with 3 loadable local models and 1 hub id that cannot resolve offline."""
    from _fakes import tiny_llama, tiny_whisper, write_llama_gguf, write_whisper_ct2

    root = tmp_path_factory.mktemp("fakezoo")
    m1, c1 = tiny_llama(n_layers=2, d=64, n_heads=4, n_kv=2, seed=1)
    m2, c2 = tiny_llama(n_layers=3, d=32, n_heads=4, n_kv=4, seed=2)
    w, wc = tiny_whisper(d=32, heads=4, layers=2, seed=3)
    write_llama_gguf(root / "llama-a.gguf", m1, c1)
    write_llama_gguf(root / "llama-b.gguf", m2, c2, qtype="F16")
    write_whisper_ct2(root / "whisper-ct2", w, wc)
    models = [
        {"id": "fake/llama-a", "source": "llama-a.gguf", "family": "llama", "modality": "text", "type": "decoder",
         "params": 100_000, "groups": ["fake", "fake-text"],
         "published": {"decoder": {"layers": 2, "symmetry": [0.1, 0.0, 0.2], "directionality": [-0.3, -0.4, -0.2]}}},
        {"id": "fake/llama-b", "source": "llama-b.gguf", "family": "llama", "modality": "text", "type": "decoder",
         "params": 30_000, "groups": ["fake", "fake-text"]},
        {"id": "fake/whisper", "source": "whisper-ct2", "family": "whisper", "modality": "audio",
         "type": "encoder-decoder", "params": 50_000, "groups": ["fake"]},
        {"id": "no-such-org/no-such-model-xyz", "family": "bert", "modality": "text", "type": "encoder",
         "params": 1, "groups": ["fake", "broken"]},
    ]
    path = root / "zoo.yaml"
    path.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    return path
