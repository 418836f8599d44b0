"""The hub download's progress bars stay off on every huggingface_hub the ranges allow."""

import importlib

import pytest
from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

from attnscope.sources.hub import _no_bars


@pytest.fixture(autouse=True)
def _bars_as_they_were(monkeypatch):
    """The global switch is put back after each test; an HF_HUB_DISABLE_PROGRESS_BARS of the caller's
    environment would pin it, so it is lifted for the test."""
    monkeypatch.setattr(importlib.import_module("huggingface_hub.utils.tqdm"), "HF_HUB_DISABLE_PROGRESS_BARS", None)
    was_off = are_progress_bars_disabled()
    yield
    (disable_progress_bars if was_off else enable_progress_bars)()


def _new_client(repo_id, filename, *, tqdm_class=None):  # noqa: ANN001, ANN202 - huggingface_hub>=1.1
    return None


def _old_client(repo_id, filename, *, revision=None):  # noqa: ANN001, ANN202 - huggingface_hub<1.1
    return None


def test_a_client_with_tqdm_class_gets_a_silent_one_and_the_global_switch_is_untouched():
    enable_progress_bars()
    with _no_bars(_new_client) as kwargs:
        assert set(kwargs) == {"tqdm_class"}
        assert kwargs["tqdm_class"](total=3).disable
        assert not are_progress_bars_disabled()


def test_an_older_client_has_its_bars_off_during_the_call_and_back_on_after():
    enable_progress_bars()
    with _no_bars(_old_client) as kwargs:
        assert kwargs == {}
        assert are_progress_bars_disabled()
    assert not are_progress_bars_disabled()


def test_bars_the_user_turned_off_stay_off():
    disable_progress_bars()
    with _no_bars(_old_client):
        pass
    assert are_progress_bars_disabled()
