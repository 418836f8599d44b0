"""attnscope report on a rotary model: the position-aware section (table + figures); none for a non-rotary one."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnscope.report import build_report, render_html


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    import torch
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(5)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
    path = tmp_path_factory.mktemp("llama") / "tiny-llama"
    LlamaModel(cfg).save_pretrained(path)
    return path


def test_rotary_report_has_the_offset_section(tiny_llama_dir: Path) -> None:
    from attnscope.geometry import score

    rep = build_report(str(tiny_llama_dir))
    assert rep.offsets is not None
    assert rep.offsets["offset"].tolist()[0] == 0 and rep.offsets["offset"].max() == 256
    at0 = rep.offsets[rep.offsets["offset"] == 0].iloc[0]
    plain = score(str(tiny_llama_dir), levels=("layer",))["symmetry"].median()
    assert at0["symmetry_median"] == pytest.approx(plain, abs=1e-12)
    page = render_html(rep)
    assert "Position-aware" in page and sum("offset" in c for c in rep.figures) >= 2
    assert any("rotary pair" in c for c in rep.figures)


def test_non_rotary_report_has_none(tmp_path_factory) -> None:
    pytest.importorskip("transformers")
    from transformers import BertConfig, BertModel

    path = tmp_path_factory.mktemp("bert") / "b"
    BertModel(BertConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4)).save_pretrained(path)  # fmt: skip
    rep = build_report(str(path))
    assert rep.offsets is None and "Position-aware" not in render_html(rep)
