"""Fixtures for the online paths: a local hub (127.0.0.1, free port) and the environment pointing at it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_here = Path(__file__).parent
for _name in ("hubserver", "repos"):  # plain helper modules next to the tests (no package needed)
    if f"online_{_name}" not in sys.modules:
        _spec = importlib.util.spec_from_file_location(f"online_{_name}", _here / f"{_name}.py")
        _mod = importlib.util.module_from_spec(_spec)
        sys.modules[f"online_{_name}"] = _mod
        _spec.loader.exec_module(_mod)

from online_hubserver import HubServer, Repo  # noqa: E402
from online_repos import SHA_MAIN, SHA_V1, TOKEN, llama_repo, single_file_repo  # noqa: E402


@pytest.fixture
def online_env(tmp_path, monkeypatch):
    """Caches in tmp_path, no offline flags, no token: what a fresh online user has."""
    import huggingface_hub.constants as constants

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_TOKEN", "ATTNSCOPE_HUB_RANGES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "hf" / "token"))
    monkeypatch.setenv("ATTNSCOPE_CACHE", str(tmp_path / "attnscope"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read at import time: the suite set it to 1
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True, raising=False)
    _reset_hub_sessions()
    yield tmp_path
    _reset_hub_sessions()


def _reset_hub_sessions() -> None:
    """huggingface_hub<1.0 keeps one requests session per thread, built with an offline adapter while the
    suite's HF_HUB_OFFLINE=1 was read: drop it so the next request sees the flags of this test."""
    import huggingface_hub.utils as hub_utils

    reset = getattr(hub_utils, "reset_sessions", None)  # absent from huggingface_hub>=1.0 (httpx)
    if reset is not None:
        reset()


@pytest.fixture
def hub(online_env, monkeypatch):
    """A local hub with org/tiny (sharded; main + v1), org/gated (needs TOKEN), org/single (one
    model.safetensors); HF_ENDPOINT points at it."""
    files = llama_repo(seed=0)
    v1 = llama_repo(seed=1)
    repos = {
        "org/tiny": Repo(files, sha=SHA_MAIN, revisions={"v1": SHA_V1}, trees={SHA_V1: v1}),
        "org/gated": Repo(llama_repo(seed=2), sha=SHA_MAIN, token=TOKEN),
        "org/single": Repo(single_file_repo(seed=3), sha=SHA_MAIN),
    }
    server = HubServer(repos, max_requests=500, max_seconds=60)
    with server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.fixture
def closed_port():
    """A loopback URL on which nothing listens (the port was bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
