"""Hostile limits: absurd offsets, configs that lie about their weights, and errors that must say the right
thing. Every CLI case runs in a subprocess under a 3 GiB address-space limit and a timeout, so a
regression that allocates or hangs fails here instead of swapping: exit 2, one line, the right words,
nothing written. The fixture is a tiny random llama (transformers' LlamaConfig, save_pretrained) with a
word-level tokenizer, copied and edited per case."""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnscope.errors import ArgumentTypeError, InputError

from ._helpers import ROOT, assert_one_line_error, files_under, write_gguf

#: address-space limit of every CLI run here (torch and transformers import well within it)
MEMORY_LIMIT = 3 << 30
TIMEOUT = 240
CONTEXT = 64  # max_position_embeddings of the tiny llama


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _limit_memory_and_file_rights() -> None:
    """The memory limit, and root's right to read any file dropped (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH leave
    the bounding set, so the exec'd process honours file modes as any user does)."""
    _limit_memory()
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def limited_cli(*args, env: dict[str, str] | None = None, preexec=_limit_memory) -> subprocess.CompletedProcess:
    """``python -m attnscope ARGS`` under :data:`MEMORY_LIMIT` and :data:`TIMEOUT` (as :func:`_helpers.cli`)."""
    full_env = {k: v for k, v in os.environ.items() if k != "ATTNSCOPE_DEBUG"}
    full_env.update({"ATTNSCOPE_QUIET": "1", "OMP_NUM_THREADS": "1", **(env or {})})
    return subprocess.run([sys.executable, "-m", "attnscope", *map(str, args)], capture_output=True, text=True,
                          env=full_env, timeout=TIMEOUT, preexec_fn=preexec, check=False)


def refused(res: subprocess.CompletedProcess, *needles: str, out: Path | None = None) -> str:
    """Exit 2, one stderr line holding every needle, and nothing under ``out``."""
    line = assert_one_line_error(res, *needles)
    if out is not None:
        assert files_under(out) == [], files_under(out)
    return line


# ------------------------------------------------------------------------------------------ fixtures


def _tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{chr(97 + i): i + 1 for i in range(26)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    """A tiny random llama folder: 2 layers, 4 query / 2 kv heads, width 16, context 64, a tokenizer."""
    pytest.importorskip("transformers", reason="needs transformers")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=4, max_position_embeddings=CONTEXT)
    path = tmp_path_factory.mktemp("llama") / "tiny"
    LlamaForCausalLM(cfg).save_pretrained(path)
    _tokenizer(path)
    return path


def edited(llama: Path, where: Path, **patch) -> Path:
    """A copy of the tiny llama whose config.json has ``patch`` applied (the weights stay as they are)."""
    shutil.copytree(llama, where)
    cfg = json.loads((where / "config.json").read_text())
    cfg.update(patch)
    (where / "config.json").write_text(json.dumps(cfg))
    return where


def without_mlp(llama: Path, where: Path) -> Path:
    """A copy of the tiny llama lacking one MLP weight: transformers would refuse it only once it loads, so a
    refusal that names something else proves the check ran before the load."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(llama, where)
    weights = load_file(where / "model.safetensors")
    del weights["model.layers.0.mlp.gate_proj.weight"]
    save_file(weights, where / "model.safetensors", metadata={"format": "pt"})
    return where


# ------------------------------------------------------------------------------------------ offsets


@pytest.mark.parametrize("spec", ["log:0:2000000000:1000000000", "log:0:1000000:1000000000"])
def test_cli_log_offsets_with_an_absurd_count_are_refused_at_once(tmp_path, spec):
    out = tmp_path / "out"
    res = limited_cli("geometry", "/nonexistent/model", "--offsets", spec, "--out", out / "t.csv")
    refused(res, "--offsets", "N is at most 1024", out=out)


def test_cli_offsets_beyond_the_models_context_are_refused(llama, tmp_path):
    out = tmp_path / "out"
    res = limited_cli("geometry", llama, "--offsets", f"0,1,{CONTEXT + 1}", "--out", out / "t.csv")
    refused(res, f"offset {CONTEXT + 1} is beyond the model's context length {CONTEXT}", "--offsets", out=out)


def test_parse_offsets_caps_n_before_allocating():
    from attnscope.geometry import parse_offsets

    for spec in ("log:0:2000000000:1000000000", "log:0:1000000:1000000000"):
        with pytest.raises(InputError, match="N is at most 1024"):
            parse_offsets(spec)
    with pytest.raises(InputError, match="more than 1024 offsets"):
        parse_offsets(",".join(map(str, range(5000))))
    assert len(parse_offsets(",".join(map(str, range(1024))))) == 1024


def test_check_offsets_is_bounded_and_linear():
    from attnscope.geometry import check_offsets

    with pytest.raises(InputError, match="more than 1024 offsets") as err:
        check_offsets(range(10**6))
    assert err.value.params == ("offsets",)
    with pytest.raises(InputError, match="more than 1024 offsets"):
        check_offsets(itertools.count())  # endless: refused while counting
    with pytest.raises(InputError, match="repeats 7, 9$"):
        check_offsets([*range(1000), 9, 7, 9])
    assert check_offsets(range(-512, 512)) == list(range(-512, 512))


def test_score_refuses_a_million_offsets_and_offsets_beyond_the_context(llama):
    import attnscope.geometry as geo

    start = time.process_time()
    with pytest.raises(InputError, match="more than 1024 offsets"):
        geo.score(str(llama), offsets=range(10**6))
    assert time.process_time() - start < 60  # (a bound on a hang, not a timing: the quadratic check took minutes)
    with pytest.raises(InputError, match=f"offset -{CONTEXT + 1} is beyond the model's context length {CONTEXT}"):
        geo.score(str(llama), offsets=[0, -(CONTEXT + 1)])
    df = geo.score(str(llama), offsets=[0, CONTEXT], levels="layer")
    assert sorted(df["offset"].unique()) == [0, CONTEXT]


def test_reach_of_a_dynamic_rotary_scaling_is_stretched():
    from attnscope.geometry.offsets import reach

    assert reach({"max_position_embeddings": 2048}) == 2048
    assert reach({"max_position_embeddings": 2048, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}) == 8192
    assert reach({}) is None


@pytest.mark.parametrize("key, value", [("max_position_embeddings", 0), ("max_position_embeddings", -5),
                                        ("n_positions", "2048"), ("llama.context_length", True)])
def test_a_stated_context_length_that_is_none_is_refused_not_left_unbounded(key, value):
    from attnscope.errors import FormatError
    from attnscope.geometry.offsets import check_reach

    config = {"architecture": "llama", "gguf_metadata": {key: value}} if "." in key else {key: value}
    with pytest.raises(FormatError, match=f"states {key} = {value!r}, not a context length"):
        check_reach([0, 1], config, "m")
    check_reach([0, 2048], {"max_position_embeddings": 2048}, "m")  # a real one holds
    check_reach([0, 10**6], {}, "m")  # none stated: held to MAX_OFFSET by check_offsets, not here


@pytest.mark.parametrize("count", [0, -64, 63, 130, 64.0, "64"])
def test_a_gguf_rotary_dimension_count_that_is_none_is_refused(count):
    from attnscope.errors import FormatError
    from attnscope.families.rope import gguf_layout

    config = {"architecture": "llama", "gguf_metadata": {"llama.rope.dimension_count": count}}
    with pytest.raises(FormatError, match="rope.dimension_count is .*an even number from 2 to the head dimension 128"):
        gguf_layout(config, 128, 0, None)
    for ok, rotated in ((None, 128), (64, 64), (128, 128)):
        meta = {} if ok is None else {"llama.rope.dimension_count": ok}
        layout = gguf_layout({"architecture": "llama", "gguf_metadata": meta}, 128, 0, None)
        assert layout is not None and 2 * len(layout.inv_freq) == rotated


# ------------------------------------------------------------------------------------ lying configs

LIES = {
    "layers-1e6": ({"num_hidden_layers": 1_000_000}, "layer 999999 of 1000000 in the config"),
    # past 2^31 - 1: refused as config.json is read (attnscope.sources.hf.check_config_sizes), naming the field
    "layers-1e12-float": ({"num_hidden_layers": 1e12}, "num_hidden_layers is 1000000000000.0; a size is a whole"),
    "heads-0": ({"num_attention_heads": 0}, "num_attention_heads=0 is not a valid"),
    "heads-bool": ({"num_attention_heads": True}, "num_attention_heads=True is not a valid"),
    "width-negative": ({"hidden_size": -16}, "hidden_size=-16 is not a valid"),
    "heads-2^31": ({"num_attention_heads": 2**31}, "num_attention_heads is 2147483648; a size is a whole number"),
    "width-lies": ({"hidden_size": 4096}, "q_proj.weight' has shape (16, 16)"),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_open_model_refuses_a_config_that_lies_about_its_weights(llama, tmp_path, lie):
    from attnscope.errors import AttnscopeError
    from attnscope.heads.maps import open_model

    patch, words = LIES[lie]
    with pytest.raises(AttnscopeError, match=re.escape(words)):
        open_model(edited(llama, tmp_path / lie, **patch))


@pytest.mark.parametrize("lie", ["layers-1e6", "heads-0", "heads-2^31"])
def test_cli_heads_refuses_a_config_that_lies_about_its_weights(llama, tmp_path, lie):
    patch, words = LIES[lie]
    model = edited(llama, tmp_path / lie, **patch)
    out = tmp_path / "out"
    res = limited_cli("heads", model, "--windows", "1", "--length", "16", "--out", out / "h.csv")
    line = refused(res, words, out=out)
    assert "ZeroDivisionError" not in line


@pytest.mark.parametrize("lie", ["layers-1e6"])
def test_cli_atlas_refuses_a_config_that_lies_about_its_weights(llama, tmp_path, lie):
    patch, words = LIES[lie]
    model = edited(llama, tmp_path / lie, **patch)
    out = tmp_path / "out"
    refused(limited_cli("atlas", model, "--out", out), words, out=out)


@pytest.mark.parametrize("command", [("geometry",), ("heads", "--windows", "1", "--length", "16")])
def test_cli_gguf_with_2_to_the_31_heads_says_so(tmp_path, command):
    pytest.importorskip("gguf", reason="needs the gguf extra")
    path = write_gguf(tmp_path / "m.gguf", 2**31)
    res = limited_cli(command[0], path, *command[1:])
    line = refused(res, "head_count is 2147483648", "more heads than the width 8")
    assert "expected shape" not in line


def test_the_config_check_is_the_geometry_check():
    """One mechanism: heads' check before loading is the family's own reading of the weights."""
    from attnscope.errors import FormatError
    from attnscope.families import check_against_weights
    from attnscope.sources import DictSource

    import numpy as np

    q = np.zeros((16, 16), np.float32)
    tensors = {f"layers.{i}.self_attn.{p}_proj.weight": q for i in range(2) for p in "qk"}
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 16}
    assert [i.n_layers for i in check_against_weights(DictSource(tensors, cfg))] == [2]
    with pytest.raises(FormatError, match="layer 2 of 3 in the config"):
        check_against_weights(DictSource(tensors, {**cfg, "num_hidden_layers": 3}))


# ------------------------------------------------------------------------------------ wrong words


def test_cli_unreadable_weights_say_permission_denied(llama, tmp_path):
    model = tmp_path / "locked"
    shutil.copytree(llama, model)
    (model / "model.safetensors").chmod(0)
    probe = subprocess.run(["cat", str(model / "model.safetensors")], preexec_fn=_limit_memory_and_file_rights,
                           capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip("this machine lets the process read a mode-000 file even without CAP_DAC_OVERRIDE")
    res = limited_cli("heads", model, "--windows", "1", "--length", "16", preexec=_limit_memory_and_file_rights)
    line = refused(res, "model.safetensors", "permission denied")
    assert "no such file" not in line.lower()


@pytest.mark.parametrize("command", [("heads",), ("atlas", "--out", "OUT")])
def test_cli_a_missing_gguf_is_no_such_file(tmp_path, command):
    out = tmp_path / "out"
    args = [str(out) if a == "OUT" else a for a in command[1:]]
    line = refused(limited_cli(command[0], "x.gguf", *args), "x.gguf: no such file", out=out)
    assert "directory" not in line and "hub" not in line


@pytest.mark.parametrize("name", ["x.gguf", "./x.gguf", "sub/dir/x.safetensors"])
def test_open_a_missing_model_file_is_no_such_file(name):
    from attnscope.heads.maps import open_model
    from attnscope.sources import open_source

    for opener in (open_source, open_model):
        with pytest.raises(InputError, match=f"^{re.escape(name)}: no such file$"):
            opener(name)


def _odd_shard(llama: Path, where: Path, kind: str) -> Path:
    shutil.copytree(llama, where)
    (where / "model.safetensors").unlink()
    if kind == "fifo":
        os.mkfifo(where / "model.safetensors")
    else:
        (where / "model.safetensors").symlink_to(kind)
    return where


ODD = {"fifo": "not a regular file (a FIFO)", "/dev/zero": "not a regular file (a character device)"}


@pytest.mark.parametrize("kind", sorted(ODD))
def test_cli_a_shard_that_is_not_a_regular_file_says_so_and_never_blocks(llama, tmp_path, kind):
    model = _odd_shard(llama, tmp_path / "m", kind)
    line = refused(limited_cli("heads", model, "--windows", "1", "--length", "16"), "model.safetensors", ODD[kind])
    assert "missing" not in line


@pytest.mark.parametrize("kind", sorted(ODD))
def test_score_a_shard_that_is_not_a_regular_file_says_so(llama, tmp_path, kind):
    import attnscope.geometry as geo
    from attnscope.errors import FormatError

    model = _odd_shard(llama, tmp_path / "m", kind)
    for spec in (model, model / "model.safetensors"):
        with pytest.raises(FormatError, match=re.escape(ODD[kind])):
            geo.score(str(spec))


def test_atlas_of_a_number_is_a_type_error_naming_source():
    import attnscope

    with pytest.raises(ArgumentTypeError, match=r"^source must be a GGUF file.*not int 123") as err:
        attnscope.atlas(123)
    assert isinstance(err.value, TypeError) and err.value.params == ("source",)


def test_cli_options_are_refused_before_the_model_loads(llama, tmp_path):
    """Each refusal names an option although the folder would fail to load (a weight is missing): the options,
    the window length and the corpus size are all checked before the weights are read."""
    broken = without_mlp(llama, tmp_path / "broken")
    out = tmp_path / "out"
    refused(limited_cli("heads", broken, "--windows", "-1", "--out", out / "h.csv"), "--windows must be at least 1, not -1",
            out=out)
    refused(limited_cli("atlas", broken, "--length", "1000000000", "--out", out),
            f"window length 1000000000 is longer than the model's maximum {CONTEXT}", out=out)
    refused(limited_cli("atlas", broken, "--random-length", "100", "--out", out), "--random-length 100", out=out)
    # 100 windows x 60 words: more than the built-in corpus's held-out split holds in this tokenizer
    refused(limited_cli("heads", broken, "--windows", "100", "--length", "60", "--out", out / "h.csv"),
            "valid split of 'builtin'", "not 100", out=out)
    # and the same folder fails on the missing weight once its options are fine: the check above came first
    refused(limited_cli("heads", broken, "--windows", "1", "--length", "16"), "no weights for 1 parameter")


@pytest.mark.parametrize("variable", ["HOME", "MPLCONFIGDIR"])
def test_cli_an_unwritable_matplotlib_folder_prints_nothing_of_matplotlib(llama, tmp_path, variable):
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # nothing can be made below a file, not even by root
    plots = tmp_path / "plots"
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env.update({"ATTNSCOPE_QUIET": "1", "OMP_NUM_THREADS": "1", variable: str(blocker / "sub")})
    res = subprocess.run([sys.executable, "-m", "attnscope", "geometry", str(llama), "--plot", str(plots)],
                         capture_output=True, text=True, env=env, timeout=TIMEOUT, preexec_fn=_limit_memory, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "matplotlib" not in res.stderr.lower() and "mkdir" not in res.stderr, res.stderr
    assert len(list(plots.glob("*.png"))) >= 1


def test_cli_atlas_zoo_takes_a_registry_file_and_group(tiny_zoo, tmp_path):
    out = tmp_path / "out"
    refused(limited_cli("atlas", "--zoo", f"{tiny_zoo}:nope", "--out", out), "no zoo group 'nope'", "known groups: tiny")
    missing = tmp_path / "none.yaml"
    refused(limited_cli("atlas", "--zoo", f"{missing}:tiny", "--out", out), f"no such zoo file: {missing}")


def test_cli_report_atlas_of_a_ctranslate2_model_keeps_the_report(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "zoo"))
    import numpy as np
    from _fakes import write_ct2

    model = write_ct2(tmp_path / "ct2", "TransformerEncoderModelSpec", {
        "encoder/num_heads": np.array(2, dtype=np.int16),
        "encoder/layer_0/self_attention/linear_0/weight": np.random.default_rng(0).normal(size=(24, 8)).astype(np.float32),
    })  # fmt: skip
    out = tmp_path / "report"
    res = limited_cli("report", model, "--atlas", "--out", out)
    assert res.returncode == 0, res.stderr[-2000:]
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("attnscope: note:")]
    assert len(notes) == 1 and "no atlas section" in notes[0] and "CTranslate2" in notes[0], res.stderr
    page = (out / "report.html").read_text()
    assert "No atlas section for this model" in page and "CTranslate2 model cannot be run" in page



def test_window_plan_tokenizes_only_when_the_corpus_size_does_not_settle_it(llama, monkeypatch):
    from attnscope.heads.load import WindowPlan
    from attnscope.training import data
    from attnscope.training.tokenizers import load_tokenizer

    calls = []
    real = data.heldout_windows
    monkeypatch.setattr(data, "heldout_windows", lambda *a, **k: calls.append(a) or real(*a, **k))
    tok = load_tokenizer(llama)
    WindowPlan("builtin", 1, 16).check(tok, CONTEXT)  # 16 tokens: the held-out bytes settle it
    assert calls == []
    with pytest.raises(InputError, match="only 77 windows of 60, not 100"):
        WindowPlan("builtin", 100, 60).check(tok, CONTEXT)
    assert len(calls) == 1
    with pytest.raises(InputError, match=f"window length {CONTEXT + 1} is longer than the model's maximum {CONTEXT}"):
        WindowPlan("builtin", 1, CONTEXT + 1).check(tok, CONTEXT)


def test_a_config_claiming_fewer_layers_than_the_weights_hold_is_said(llama, tmp_path):
    """transformers loads the configured layers and ignores the rest; attnscope does the same, and says so."""
    from attnscope.errors import AttnscopeWarning
    from attnscope.families import check_against_weights
    from attnscope.sources.hf import HFDirectorySource

    fewer = edited(llama, tmp_path / "fewer", num_hidden_layers=1)
    with pytest.warns(AttnscopeWarning, match="the config says 1 layer but the weights also hold layer 1"):
        infos = check_against_weights(HFDirectorySource.open(str(fewer)))
    assert [i.n_layers for i in infos] == [1]
    from attnscope.geometry import score

    with pytest.warns(AttnscopeWarning, match="only the configured 1 are used"):
        df = score(str(fewer), levels="layer")
    assert sorted(df["layer"].unique()) == [0]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the honest config: no warning
        check_against_weights(HFDirectorySource.open(str(llama)))
