"""The atlas end to end on a tiny llama written as GGUF: table = geometry + probes, CLI files, zoo store."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _page import page_data  # noqa: E402

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)",
)
SMALL = dict(windows=2, length=48, random_windows=2, random_length=12, n_boot=200)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("atlas")
    return write_llama_gguf_model(root / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))


def test_table_is_geometry_beside_the_probes(tiny_gguf):
    import attnscope
    from attnscope.geometry import score
    from attnscope.heads.probes import run_probes

    res = attnscope.atlas(str(tiny_gguf), **SMALL)
    t = res.table
    assert len(t) == 8 and list(t[["layer", "head"]].drop_duplicates().itertuples(index=False)) == [
        (layer, head) for layer in range(2) for head in range(4)]
    for col in ("induction_random", "previous_token_random", "sink_random", "induction_text", "sink_text", "cluster"):
        assert col in t.columns
    geo = score(str(tiny_gguf), levels="head").sort_values(["layer", "head"])
    np.testing.assert_allclose(t["symmetry"], geo["symmetry"].astype(float))
    np.testing.assert_allclose(t["directionality"], geo["directionality"].astype(float))
    assert t["kv_head"].tolist() == [0, 0, 1, 1] * 2  # GQA: 2 query heads per key head
    beh = run_probes(str(tiny_gguf), windows=2, length=48, random_windows_n=2, random_length=12)
    rnd = beh[beh["probe"] == "random"].sort_values(["layer", "head"])
    np.testing.assert_allclose(t["induction_random"], rnd["induction"])
    corr = res.correlations
    assert len(corr) == 6 * len(res.behaviours) and corr["interval"].str.contains("bootstrap").all()
    assert res.info["lengths"] == {"random": 25, "text": 48}


def test_position_aware_columns_are_the_scores_at_offset_1_and_over_offsets(tiny_gguf):
    """A rotary model (llama): s and d of the form at offset 1, and their mean over 0, 1, 2, 4, ..., 32, 47
    (the longest probe window is 48 tokens), straight from `attnscope geometry --offsets`."""
    import attnscope
    from attnscope.atlas import summary_offsets
    from attnscope.geometry import score

    res = attnscope.atlas(str(tiny_gguf), **SMALL)
    t = res.table
    assert res.info["offsets"] == summary_offsets(48) == [0, 1, 2, 4, 8, 16, 32, 47]
    at1 = score(str(tiny_gguf), levels="head", offsets=[1]).sort_values(["layer", "head"])
    np.testing.assert_allclose(t["symmetry_at_1"], at1["symmetry"].astype(float), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t["directionality_at_1"], at1["directionality"].astype(float), rtol=1e-5, atol=1e-6)
    every = score(str(tiny_gguf), levels="head", offsets=summary_offsets(48))
    mean = every.groupby(["layer", "head"])[["symmetry", "directionality"]].mean().sort_index()
    np.testing.assert_allclose(t["symmetry_over_offsets"], mean["symmetry"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t["directionality_over_offsets"], mean["directionality"], rtol=1e-5, atol=1e-6)
    assert (t["symmetry_at_1"] - t["symmetry"]).abs().max() > 1e-3  # rotary: the position changes the form
    assert res.info["position_notes"] == []
    assert set(res.correlations["x"]) == {"symmetry", "directionality", "symmetry_at_1", "directionality_at_1",
                                          "symmetry_over_offsets", "directionality_over_offsets"}


def test_summary_offsets_cover_the_window_in_powers_of_two():
    from attnscope.atlas import summary_offsets

    assert summary_offsets(256) == [0, 1, 2, 4, 8, 16, 32, 64, 128, 255]
    assert summary_offsets(255) == [0, 1, 2, 4, 8, 16, 32, 64, 128, 254]
    assert summary_offsets(2) == [0, 1] and summary_offsets(3) == [0, 1, 2]
    from attnscope.errors import AttnscopeError

    for bad in (1, 0, -5, True, "7", 1.9, None, 2**40):
        with pytest.raises(AttnscopeError, match="window must be"):
            summary_offsets(bad)


def test_a_sliding_window_layer_averages_only_the_offsets_it_attends_to(minilm_dir):
    """Mistral with an 8-token window and 32-token probes: offsets 16 and 31 are beyond every layer's
    window, so the mean over offsets is the mean over 0, 1, 2, 4 (never over forms the layer never applies)."""
    import torch
    from transformers import MistralConfig, MistralModel

    import attnscope
    from attnscope.geometry import score

    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=48, sliding_window=8, max_position_embeddings=64)
    model = MistralModel(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "q_proj" in n or "k_proj" in n:
                p.normal_(0, 0.5)
    res = attnscope.atlas(model, tokenizer=str(minilm_dir / "tokenizer.json"), windows=2, length=32,
                          random_windows=2, random_length=10, n_boot=50)
    assert res.info["offsets"] == [0, 1, 2, 4, 8, 16, 31]
    inside = score(model, levels="head", offsets=[0, 1, 2, 4])
    want = inside.groupby(["layer", "head"])[["symmetry", "directionality"]].mean().sort_index()
    t = res.table.sort_values(["layer", "head"])
    np.testing.assert_allclose(t["symmetry_over_offsets"], want["symmetry"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t["directionality_over_offsets"], want["directionality"], rtol=1e-5, atol=1e-7)


def test_cli_writes_tables_figures_and_a_self_contained_page(tiny_gguf, tmp_path, cli_inproc):
    out = tmp_path / "out"
    args = [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()]
    code, stdout, err = cli_inproc("atlas", str(tiny_gguf), "--out", str(out), *args, "--json")
    assert code == 0, err
    corr = json.loads(stdout)
    assert {r["x"] for r in corr} == {"symmetry", "directionality", "symmetry_at_1", "directionality_at_1",
                                      "symmetry_over_offsets", "directionality_over_offsets"}
    for name in ("atlas.parquet", "atlas.csv", "correlations.csv", "atlas.json", "atlas_symmetry.png",
                 "atlas_directionality.png", "atlas_correlations.png", "atlas.html"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    pd.testing.assert_frame_equal(pd.read_parquet(out / "atlas.parquet").drop(columns="cluster"),
                                  pd.read_csv(out / "atlas.csv").drop(columns="cluster"), check_dtype=False)
    page = (out / "atlas.html").read_text()
    assert "<script" in page and 'id="atlas-data"' in page
    assert '<option value="symmetry_at_1">' in page and '<option value="directionality_over_offsets">' in page
    assert json.loads((out / "atlas.json").read_text())["offsets"] == [0, 1, 2, 4, 8, 16, 32, 47]
    assert " src=" not in page and "href=" not in page and "@import" not in page  # nothing fetched at view time
    data = page_data(page)
    assert len(data["rows"]) == 8 and "induction_random" in data["columns"]
    assert len(data["maps"]) == 8 and len(data["maps"]["0,0"]["cells"]) == 25 and data["mapProbe"] == "random"
    assert (data["maps"]["0,0"]["block"], data["maps"]["0,0"]["length"]) == (1, 25)


def test_cli_prints_p_and_q_and_the_verdict_read_from_q(tiny_gguf, tmp_path, cli_inproc):
    out = tmp_path / "out"
    args = [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()]
    code, _, err = cli_inproc("atlas", str(tiny_gguf), "--out", str(out), *args)
    assert code == 0, err
    corr = pd.read_csv(out / "correlations.csv")
    assert {"p", "q", "q_run", "unit", "n_units", "test"} <= set(corr.columns)
    assert (corr["unit"] == "layer").all() and (corr["n_units"].isin([0, 2])).all()  # the tiny model: 2 layers
    assert "permutation test of whole layers" in err and "survive Benjamini-Hochberg (q <= 0.05)" in err
    found = (~corr["relation"].str.startswith(("no relation", "undefined"))).sum()
    assert f"tiny: {len(corr)} tests of geometry against behaviour across heads; {found} relations survive" in \
        " ".join(err.split())  # rotary: s at offset 1 is a test of its own (no column copies another)
    # 2 layers of 4 heads: 2 pairings of the layers, the observed one among them, so the exact p is 1/2 or 1
    # (its estimate from SMALL's n_boot random pairings: near that) and nothing can be "related"
    assert (corr["p"].dropna() > 0.3).all() and found == 0
    info = json.loads((out / "atlas.json").read_text())
    assert "permutation test of whole layers" in info["p_value"] and "Benjamini-Hochberg" in info["fdr"]


def test_bad_input_is_one_line(tiny_gguf, tmp_path, cli_inproc):
    short = tmp_path / "short.txt"
    short.write_text("abc " * 10)
    cases = [
        ("atlas", "--out", str(tmp_path / "a")),  # neither SOURCE nor --zoo
        ("atlas", str(tiny_gguf), "--zoo", "offline-real", "--out", str(tmp_path / "b")),
        ("atlas", str(tiny_gguf), "--out", str(tmp_path / "c"), "--probe", "wiki"),
        ("atlas", str(tiny_gguf), "--out", str(tmp_path / "d"), "--data", str(short), "--windows", "8"),
        ("atlas", str(tmp_path / "nothing.gguf"), "--out", str(tmp_path / "e")),
    ]
    for args in cases:
        code, _, err = cli_inproc(*args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("attnscope: error:"), (args, err)


def test_zoo_atlas_is_resumable_and_pooled(tiny_gguf, tmp_path, monkeypatch):
    from attnscope.atlas.zoo import run_zoo_atlas
    from attnscope.zoo.registry import ZooEntry

    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"\0" * 16)
    entries = [
        ZooEntry(id="tiny-a", family="llama", modality="text", type="decoder", params=None, groups=("t",),
                 source=str(tiny_gguf)),
        ZooEntry(id="tiny-ct2", family="whisper", modality="text", type="decoder", params=None, groups=("t",),
                 source=str(ct2)),
    ]
    import attnscope.zoo.survey  # noqa: F401 - imported first: it binds registry.select by name when imported,
    # and importing it under the patch below would keep this test's models for every later test
    monkeypatch.setattr("attnscope.zoo.registry.select", lambda group, path=None: entries)
    opts = dict(windows=2, length=48, random_windows=2, random_length=12)
    lines: list[str] = []
    res = run_zoo_atlas("t", tmp_path / "z", log=lines.append, n_boot=100, **opts)
    assert res.table["model"].unique().tolist() == ["tiny-a"] and len(res.table) == 8
    assert "CTranslate2" in res.info["skipped"]["tiny-ct2"]
    assert set(res.correlations["model"]) == {"tiny-a", "all"}
    from attnscope.atlas.stats import bh_adjust

    corr = res.correlations  # q: per model's tests; q_run: the whole run's, and the verdict reads it
    np.testing.assert_allclose(corr["q_run"], bh_adjust(corr["p"].to_numpy(float)), equal_nan=True)
    for _, part in corr.groupby("model"):
        np.testing.assert_allclose(part["q"], bh_adjust(part["p"].to_numpy(float)), equal_nan=True)
    lines.clear()
    again = run_zoo_atlas("t", tmp_path / "z", log=lines.append, n_boot=100, **opts)
    assert "tiny-a: reused from the store" in lines
    pd.testing.assert_frame_equal(again.table, res.table)
    lines.clear()
    from attnscope.runs.store import QuarantineWarning

    with pytest.warns(QuarantineWarning, match="other settings"):  # new settings: recomputed, never reused
        run_zoo_atlas("t", tmp_path / "z", log=lines.append, n_boot=100, **dict(opts, windows=3))
    assert "tiny-a: reused from the store" not in lines


def test_model_report_gains_the_atlas_section(tiny_gguf, tmp_path):
    import attnscope
    from attnscope.report import build_report, render_html

    rep = build_report(str(tiny_gguf))
    assert "Geometry meets behaviour" not in render_html(rep)
    rep.atlas = attnscope.atlas(str(tiny_gguf), **SMALL)
    page = render_html(rep)
    assert "Geometry meets behaviour (atlas)" in page and page.count('id="atlas-data"') == 1
    assert page_data(page)["maps"]["1,3"]["length"] == 25 and 'id="atlas-map"' in page  # the report's section draws maps on click too
    assert " src=\"http" not in page


def test_a_loaded_model_with_its_tokenizer_gives_the_same_table_as_its_file(tiny_gguf):
    import attnscope
    from attnscope.heads.load import _load_gguf

    model, tok = _load_gguf(tiny_gguf)
    live = attnscope.atlas(model, tokenizer=tok, name="tiny", **SMALL).table
    disk = attnscope.atlas(str(tiny_gguf), name="tiny", **SMALL).table
    assert set(disk["source"]) == {str(tiny_gguf)}  # where each came from is all that differs
    pd.testing.assert_frame_equal(live.drop(columns="source"), disk.drop(columns="source"), rtol=1e-4, atol=1e-6)


def test_atlas_keeps_each_heads_map_on_the_random_probe_for_the_page(tiny_gguf):
    """One example map per head: the random probe's first window, equal to the map attnscope extracts."""
    import attnscope
    from attnscope.atlas.html import atlas_page
    from attnscope.heads.probes import as_map_model, random_windows

    res = attnscope.atlas(str(tiny_gguf), **SMALL)
    assert res.info["map_probe"] == "random" and sorted(res.maps) == [(la, h) for la in range(2) for h in range(4)]
    assert (res.info["map_length"], res.info["map_block"]) == (25, 1)
    model = as_map_model(str(tiny_gguf))
    idx = random_windows(model, 2, 12, seed=0)  # the probe's windows: BOS + 12 + 12 = 25 tokens
    own: dict[int, np.ndarray] = {}
    model.run(idx[:1], lambda layer, probs: own.__setitem__(layer, probs[0].float().cpu().numpy()))
    for (layer, head), m in res.maps.items():
        assert m.shape == (25, 25) and m.dtype == np.float16  # under 64 positions: the map itself
        np.testing.assert_allclose(m.astype(float), own[layer][head], atol=1e-3)
    page = atlas_page(res.table, res.correlations, res.info, maps=res.maps)
    data = page_data(page)
    assert data["mapProbe"] == "random" and len(data["maps"]) == 8
    np.testing.assert_allclose(np.array(data["maps"]["1,3"]["cells"]) / data["mapScale"], own[1][3], atol=2e-3)


def test_atlas_map_of_a_long_probe_is_the_whole_window_in_block_maxima(tiny_gguf):
    """A 2 x 40 + 1 = 81-token random probe: 41 x 41 cells of 2 x 2 block maxima of the model's own map,
    so the second copy (rows 41..80), invisible in a 64 x 64 corner, is on the page."""
    import attnscope
    from attnscope.heads.metrics import map_overview
    from attnscope.heads.probes import as_map_model, random_windows

    res = attnscope.atlas(str(tiny_gguf), **{**SMALL, "random_length": 40})
    assert (res.info["map_length"], res.info["map_block"]) == (81, 2)
    model = as_map_model(str(tiny_gguf))
    own: dict[int, np.ndarray] = {}
    model.run(random_windows(model, 2, 40, seed=0)[:1],
              lambda layer, probs: own.__setitem__(layer, probs[0].float().cpu().numpy()))
    for (layer, head), m in res.maps.items():
        assert m.shape == (41, 41)
        np.testing.assert_allclose(m.astype(float), map_overview(own[layer][head], 64)[0], atol=1e-3)


def test_an_encoder_with_absolute_positions_scores_every_offset_as_offset_0(tmp_path, minilm_dir):
    """No rotary positions (BERT): the position-aware columns equal offset 0 and atlas.json says why."""
    import shutil

    from transformers import BertConfig, BertModel

    import attnscope

    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=48, max_position_embeddings=64)
    d = tmp_path / "bert"
    BertModel(cfg).save_pretrained(d)
    shutil.copy(minilm_dir / "tokenizer.json", d / "tokenizer.json")
    res = attnscope.atlas(str(d), windows=2, length=32, random_windows=2, random_length=10, n_boot=50)
    t = res.table
    for g in ("symmetry", "directionality"):
        np.testing.assert_allclose(t[f"{g}_at_1"], t[g], rtol=1e-6)
        np.testing.assert_allclose(t[f"{g}_over_offsets"], t[g], rtol=1e-6)
    assert res.info["position_notes"] and "not a rotation" in res.info["position_notes"][0]
    from attnscope.atlas.html import atlas_page

    assert "Note: " in atlas_page(t, res.correlations, res.info) and "not a rotation" in atlas_page(t, res.correlations, res.info)


def test_cli_prints_the_position_notes(tmp_path, minilm_dir, cli_inproc):
    code, _, err = cli_inproc("atlas", str(minilm_dir), "--out", str(tmp_path / "o"), "--windows", "1", "--length",
                              "16", "--random-windows", "1", "--random-length", "5", "--n-boot", "20")
    assert code == 0, err
    assert "attnscope: note: " in err and "not a rotation" in err


def test_offsets_the_geometry_refuses_leave_offset_0_and_a_note(tiny_gguf, monkeypatch):
    """A model whose rotary scaling the offsets code refuses still gets its atlas: offset-0 s and d, the
    position-aware columns NaN (never a made-up number), and the reason in info."""
    import attnscope
    import attnscope.geometry as geometry
    from attnscope.errors import UnsupportedError

    real = geometry.score

    def score(source, *args, offsets=None, **kwargs):
        if offsets is not None:
            raise UnsupportedError("yarn scaling: offsets are not supported for this model")
        return real(source, *args, **kwargs)

    monkeypatch.setattr(geometry, "score", score)
    res = attnscope.atlas(str(tiny_gguf), **SMALL)
    t = res.table
    assert t["symmetry"].notna().all() and t["symmetry_at_1"].isna().all() and t["directionality_over_offsets"].isna().all()
    assert res.info["position_notes"] == ["no position-aware columns: yarn scaling: offsets are not supported for this model"]
    corr = res.correlations.set_index("x").loc["symmetry_at_1"]
    assert (corr["n"] == 0).all() and corr["relation"].str.startswith("undefined").all()  # never "no relation"
    assert res.info["offsets"] == []
    from attnscope.atlas.html import atlas_page

    page = atlas_page(t, res.correlations, res.info)
    assert '<option value="symmetry"' in page and '<option value="symmetry_at_1"' not in page  # no values: no choice
