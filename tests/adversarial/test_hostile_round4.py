"""Hostile round 4 (issue 49): config files bounded, pattern sizes, steps, page escaping, checks before loads."""

from __future__ import annotations

import pytest

from attnscope.errors import ConfigError


def _laughs(tail: str) -> str:
    """A ~400-byte YAML whose aliases, nested nine deep, stand for 9**9 values ("billion laughs")."""
    lines, prev = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"], "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
        prev = name
    return "\n".join(lines) + "\n" + tail


@pytest.mark.parametrize("tail", ["heads:\n  - positions: [*i]\n", "heads:\n  - window: *i\n", "heads: *i\n"])
def test_pattern_yaml_aliases_are_bounded(tmp_path, tail):
    from attnscope.sparse.patterns import load_pattern

    path = tmp_path / "p.yaml"
    path.write_text(_laughs(tail))
    with pytest.raises(ConfigError, match="aliases expand to more than 100,000 values") as info:
        load_pattern(path)
    assert len(str(info.value)) < 300


def test_config_files_are_bounded_in_size_and_self_reference(tmp_path):
    from attnscope.tables import MAX_CONFIG_BYTES, read_mapping

    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (MAX_CONFIG_BYTES + 1) + "\n")
    with pytest.raises(ConfigError, match="a config file is at most"):
        read_mapping(big)
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &a [1, *a]\n")
    with pytest.raises(ConfigError, match="contains itself"):
        read_mapping(loop)


def test_pattern_errors_quote_a_short_excerpt():
    """A value built of shared nested lists (what aliases make) is quoted in a few characters, never expanded."""
    from attnscope.sparse.patterns import HeadPattern

    value: list = [1] * 9
    for _ in range(5):  # 9**6 numbers: a repr of megabytes
        value = [value] * 9
    for kwargs in ({"window": value}, {"positions": [value]}, {"anchors": value}):
        with pytest.raises(ConfigError) as info:
            HeadPattern(**kwargs)
        assert len(str(info.value)) < 200
    with pytest.raises(ConfigError) as info:
        HeadPattern.from_dict(value)
    assert len(str(info.value)) < 300


# ------------------------------------------------------------------ item 3: every stack of the architecture
def _whisper_like(path, cross: dict):
    import sys

    import numpy as np

    from tests.adversarial._helpers import FAKES

    if str(FAKES) not in sys.path:
        sys.path.insert(0, str(FAKES))
    from _fakes import write_ct2

    variables = {"num_heads": np.array(2, dtype=np.int16)}
    for stack in ("encoder", "decoder"):
        for i in range(2):
            variables[f"{stack}/layer_{i}/self_attention/linear_0/weight"] = np.ones((24, 8), dtype=np.float32)
    for i in range(2):
        for j, rows in ((0, 8), (1, 16)):
            name = f"decoder/layer_{i}/attention/linear_{j}/weight"
            variables[cross.get(name, name)] = np.ones((rows, 8), dtype=np.float32)
    write_ct2(path, "WhisperSpec", variables)
    return path


def test_ct2_whisper_with_its_cross_attention_scores_three_stacks(tmp_path):
    from attnscope.geometry import score

    df = score(str(_whisper_like(tmp_path / "ok", {})), levels=("layer",))
    assert set(df["stack"]) == {"encoder", "decoder", "cross"}


@pytest.mark.parametrize("renamed", ["decoder/layer_0/attention/linear_1/weight",
                                     "decoder/layer_1/attention/linear_0/weight"])
def test_ct2_a_renamed_cross_attention_tensor_is_refused(tmp_path, renamed):
    """Two bytes of a variable name changed: no silent table without the cross stack."""
    from attnscope.errors import FormatError
    from attnscope.geometry import score

    path = _whisper_like(tmp_path / "bad", {renamed: renamed[:-2] + "XX"})
    with pytest.raises(FormatError, match=f"cross-attention .* lacks {renamed}"):
        score(str(path), levels=("layer",))


def test_declarative_decoder_without_its_cross_stack_is_refused(tmp_path):
    """A BART-style file whose encoder_attn tensors were renamed: refused naming the cross stack."""
    import json

    import numpy as np
    from safetensors.numpy import save_file

    from attnscope.errors import FormatError
    from attnscope.geometry import score

    cfg = {"model_type": "bart", "d_model": 8, "encoder_layers": 1, "decoder_layers": 1,
           "encoder_attention_heads": 2, "decoder_attention_heads": 2}
    w = np.ones((8, 8), dtype=np.float32)
    tensors = {f"model.{s}.layers.0.{a}.{p}_proj.weight": w
               for s, a in (("encoder", "self_attn"), ("decoder", "self_attn"), ("decoder", "encoder_atXn"))
               for p in ("q", "k")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(FormatError, match="bart decoder stack but not its cross stack"):
        score(str(tmp_path), levels=("layer",))


# ------------------------------------------------------------------ item 5: steps, numbers, sizes
def _fake_run(path, steps=("step-10",), metrics=None):
    for name in steps:
        (path / "checkpoints" / name).mkdir(parents=True)
        (path / "checkpoints" / name / "config.json").write_text("{}")
    if metrics is not None:
        (path / "metrics.jsonl").write_text(metrics)
    return path


def test_colliding_checkpoint_steps_of_a_run_are_refused(tmp_path):
    from attnscope.emergence.revisions import list_revisions
    from attnscope.errors import FormatError

    run = _fake_run(tmp_path, ("step-10", "step-010", "step-20"))
    with pytest.raises(FormatError, match="step-010 and step-10 are both step 10"):
        list_revisions(str(run))


@pytest.mark.parametrize("name", ["step-99999999999999999999", "step-" + "9" * 200])
def test_an_absurd_step_name_is_one_line(tmp_path, name):
    from attnscope.emergence.revisions import list_revisions
    from attnscope.errors import AttnscopeError

    run = _fake_run(tmp_path, ("step-10", name))
    with pytest.raises(AttnscopeError, match="larger than any run trains") as info:
        list_revisions(str(run))
    assert len(str(info.value)) < 300 and "rerun" not in str(info.value)
    folder = tmp_path / "folder"
    for n in ("step-10", name):
        (folder / n).mkdir(parents=True)
        (folder / n / "config.json").write_text("{}")
    with pytest.raises(AttnscopeError, match="larger than any training step") as info:
        list_revisions(str(folder))
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("line", ['{"step": 10, "tokens": 1' + "0" * 50_000 + "}",
                                  '{"step": 1' + "0" * 30 + ', "loss": 1.0}',
                                  '{"step": 10, "tokens": 1e400}'])
def test_absurd_numbers_in_a_run_log_are_one_line(tmp_path, line):
    from attnscope.emergence.revisions import list_revisions, training_loss
    from attnscope.errors import FormatError

    run = _fake_run(tmp_path, metrics='{"step": 0, "tokens": 0, "loss": 2.0}\n' + line + "\n")
    with pytest.raises(FormatError, match="metrics.jsonl: line 2") as info:
        list_revisions(str(run))
    assert len(str(info.value)) < 300
    with pytest.raises(FormatError, match="line 2"):
        training_loss(str(run), "run")


@pytest.mark.parametrize("spec", ["step-10\nstep-20", "x" * 100_000, "1" * 5000 + ":"])
def test_revisions_are_quoted_short_and_on_one_line(spec):
    from attnscope.emergence.revisions import Revision, select_revisions
    from attnscope.errors import InputError

    revs = [Revision("step-10", 10, None, "a"), Revision("step-20", 20, None, "b")]
    with pytest.raises(InputError) as info:
        select_revisions(revs, spec)
    text = str(info.value)
    assert "\n" not in text and len(text) < 300, text[:300]
    if "\n" in spec:
        assert "step-10\\nstep-20" in text


@pytest.mark.parametrize("field", ["window", "stride", "positions"])
def test_pattern_sizes_are_bounded(field):
    """window 2**63 - 1 was accepted and gave a negative density (int64 overflow) and torch's TypeError."""
    from attnscope.sparse.patterns import HeadPattern, Pattern

    big = 2**63 - 1
    with pytest.raises(ConfigError, match="beyond any sequence length"):
        HeadPattern(**{field: [big] if field == "positions" else big})
    edge = HeadPattern(window=1 << 31)
    assert 0 < Pattern((edge,)).density(64, causal=False) <= 1


def test_sparse_attention_refuses_an_absurd_window_in_one_line():
    torch = pytest.importorskip("torch")
    from attnscope.sparse import sparse_attention

    q = torch.zeros(1, 1, 8, 4)
    with pytest.raises(ConfigError, match="beyond any sequence length"):
        sparse_attention(q, q, q, {"all": {"window": 2**63 - 1}}, impl="gather")


def _square(payload):
    import pandas as pd

    return pd.DataFrame({"x": [payload["x"]]})


@pytest.mark.parametrize("kind", ["not-executable", "missing", "exits"])
def test_a_worker_pool_that_cannot_start_is_one_line_naming_its_cause(tmp_path, kind):
    """As a user who cannot execute the interpreter again: one line, not "BrokenProcessPool" and "rerun" per task."""
    import multiprocessing.spawn

    from attnscope.errors import InputError
    from attnscope.runs import Task, run_tasks

    exe = tmp_path / "python"
    if kind != "missing":
        exe.write_text("#!/bin/sh\nexit 1\n")
        exe.chmod(0o755 if kind == "exits" else 0o644)
    old = multiprocessing.spawn.get_executable()
    multiprocessing.spawn.set_executable(str(exe))
    try:
        with pytest.raises(InputError, match="worker pool") as info:
            run_tasks(_square, [Task(f"t{i}", {"x": i}) for i in range(3)], tmp_path / "store", executor="local",
                      workers=2, progress=False)
    finally:
        multiprocessing.spawn.set_executable(old)
    text = str(info.value)
    assert str(exe) in text and "rerun" not in text and "\n" not in text
    if kind == "not-executable":
        assert "permission denied" in text


# ------------------------------------------------------------------ item 4: what reaches a page
def _effects(tokens):
    import pandas as pd

    n = len(tokens)
    return pd.DataFrame({"model": "m", "layer": 0, "head": 0, "intervention": "sym", "window": 0,
                         "position": range(n), "token": pd.Series(tokens, dtype=object), "delta_loss": [0.1 * (i + 1) for i in range(n)]})


def _scripts(page: str) -> list[str]:
    import re

    return re.findall(r"<script>(.*?)</script>", page, flags=re.S)


def test_an_element_id_never_reaches_a_script_raw():
    from attnscope.pages.token_effects import token_effects_fragment

    evil = "x');alert(1);('"
    page = token_effects_fragment(_effects(["a", "b"]), element_id=evil)
    import json
    import re

    call = _scripts(page)[-1]
    ids = re.findall(r'getElementById\(("(?:[^"\\]|\\.)*")\)', call)  # each argument one JSON string literal
    assert [json.loads(i) for i in ids] == [evil, evil + "-data"]
    assert "getElementById('" not in call
    page = token_effects_fragment(_effects(["a"]), element_id="a</script><script>alert(1)//")
    assert "</script><script>alert" not in page


@pytest.mark.parametrize("bad", ["", "two words", "x\n", 3])
def test_an_element_id_that_is_no_html_id_is_refused(bad):
    from attnscope.errors import InputError
    from attnscope.pages.token_effects import token_effects_fragment

    with pytest.raises(InputError, match="element_id"):
        token_effects_fragment(_effects(["a"]), element_id=bad)


def test_token_texts_are_visible_on_every_path():
    """None, a lone surrogate, a right-to-left override and zero-width characters: shown, never raw or a crash."""
    import json
    import re

    from attnscope.pages.token_effects import token_effects_fragment, token_effects_payload

    tokens = [None, "\ud800", "a\u202eb", "z\u200bw", " ", "\x07"]
    page = token_effects_fragment(_effects(tokens))
    page.encode("utf-8")  # no lone surrogate left in the page
    for raw in ("\u202e", "\u200b", "\x07"):
        assert raw not in page
    data = json.loads(re.search(r'<script type="application/json" id="[^"]+-data">(.*?)</script>', page, re.S)[1])
    entry = data["heads"]["m|0,0"]["sym"]
    assert entry["windows"]["0"]["tokens"] == ["", "\\ud800", "a\\u202eb", "z\\u200bw", " ", "\\x07"]
    listed = [t for _, _, t, _ in entry["up"]]
    assert "\u00b7" in listed and "\u2205" in listed and " " not in listed  # a space token reads "·" in the lists
    payload = token_effects_payload(_effects(tokens))
    json.dumps(payload, ensure_ascii=False).encode("utf-8")


def test_head_view_hook_must_be_a_javascript_name():
    from attnscope.errors import InputError
    from attnscope.pages.head_view import head_view_parts

    with pytest.raises(InputError, match="hook"):
        head_view_parts(object(), hook="x;alert(1)")  # type: ignore[arg-type]


def test_token_labels_escape_bidi_and_zero_width():
    from attnscope.heads.tokens import readable, visible

    assert visible("a\u202eb\u2066c\u200dd\ufeff") == "a\\u202eb\\u2066c\\u200dd\\ufeff"
    assert readable("a b\n\u202e") == "a b\n\\u202e"


# ------------------------------------------------------------------ item 6: checks before a model loads
@pytest.mark.parametrize("kwargs,match", [
    ({"text": "\ud800"}, "lone surrogate"),
    ({"text": "x", "device": "bogus"}, "device='bogus' is not a name torch accepts"),
    ({"text": "x", "device": "cuda:9"}, "device='cuda:9'"),
    ({"text": "x", "length": 0}, "length must be at least 1"),
    ({"ids": []}, "ids is empty"),
    ({"ids": [-1, 2]}, "ids must be token ids >= 0"),
    ({"text": "x", "ids": [1]}, "text= or ids="),
])
def test_text_weights_checks_everything_before_the_load(monkeypatch, kwargs, match):
    from attnscope.errors import AttnscopeError
    from attnscope.heads import maps
    from attnscope.heads.text import text_weights

    def loaded(*args, **kw):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(maps, "open_model", loaded)
    with pytest.raises(AttnscopeError, match=match):
        text_weights("some/model", 0, 0, **kwargs)


def test_a_short_run_does_not_report_a_share_of_its_training_time():
    """3 steps reported 'geometry logging 212% of training time': the first scoring outweighs a few steps."""
    from attnscope.cli.train import overhead_text

    short = overhead_text({"train_seconds": 0.4, "geometry_seconds": 0.85, "geometry_overhead": 2.12})
    assert "%" not in short and "0.85 s beside 0.40 s" in short
    long = overhead_text({"train_seconds": 100.0, "geometry_seconds": 0.1, "geometry_overhead": 0.001})
    assert "0.10% of training time" in long


def test_a_gguf_vocabulary_with_a_token_listed_twice_is_refused_before_a_run(tmp_path):
    """Scoring its weights still works (no tokenizer needed); running it is refused in one line naming the token."""
    pytest.importorskip("gguf")
    import numpy as np

    import gguf

    from attnscope.errors import FormatError
    from attnscope.sources.gguf_header import read_gguf_header

    path = tmp_path / "dup.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.embedding_length", 8)
    w.add_uint32("llama.attention.head_count", 2)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "a", "b", "a"])
    w.add_tensor("blk.0.attn_q.weight", np.ones((8, 8), dtype=np.float32))
    w.add_tensor("blk.0.attn_k.weight", np.ones((8, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    read_gguf_header(path)  # the weights' reader does not need the vocabulary
    with pytest.raises(FormatError, match="lists 'a' twice, as ids 1 and 3"):
        read_gguf_header(path, unique_vocabulary=True)
    from attnscope.heads.load import _load_gguf

    with pytest.raises(FormatError, match="twice"):
        _load_gguf(path)


# ------------------------------------------------------------------ papercuts
def test_top_suggests_the_behaviour_columns_a_name_begins():
    from attnscope.atlas.build import atlas_columns
    from attnscope.cli.atlas import _suggest_top_columns
    from attnscope.errors import InputError

    with pytest.raises(InputError, match="did you mean induction_random, induction_text"):
        _suggest_top_columns([(3, "induction")], atlas_columns("both"))
    with pytest.raises(InputError, match="did you mean directionality"):
        _suggest_top_columns([(3, "-directionalty")], atlas_columns("both"))
    _suggest_top_columns([(3, "-directionality"), (2, "sink_random")], atlas_columns("both"))


def test_the_head_view_numbers_windows_from_0_as_the_per_token_view():
    from attnscope.pages.head_view import JS

    assert "i + ': '" in JS and "(i + 1) + ': '" not in JS


def test_a_gguf_load_counts_transformers_dequantisation(tmp_path, monkeypatch):
    """58 s of a GGUF load said nothing: the tokenizer and the per-tensor conversion are shown as they run."""
    from tests.heads._tiny_gguf import missing_gguf_runtime, tiny_llama_gguf

    if missing_gguf_runtime():
        pytest.skip("transformers' GGUF runtime not installed")
    import attnscope.progress as progress_mod
    from attnscope.heads.load import _load_gguf

    seen = []
    real = progress_mod.phase

    def spy(desc, **kwargs):
        seen.append((desc, kwargs.get("total")))
        return real(desc, **kwargs)

    monkeypatch.setattr(progress_mod, "phase", spy)
    _load_gguf(tiny_llama_gguf(tmp_path))
    assert any("rebuilding its tokenizer" in d for d, _ in seen)
    assert any("dequantises its tensors" in d and total and total > 10 for d, total in seen), seen


def test_train_shows_its_silent_phases(tmp_path, monkeypatch):
    """train said nothing for 20 s: reading the data and step 0 are phases of the progress display."""
    import attnscope.training.trainer as trainer
    from attnscope.training import TrainConfig, train

    seen = []
    real = trainer.phase

    def spy(desc, **kwargs):
        seen.append(desc)
        return real(desc, **kwargs)

    monkeypatch.setattr(trainer, "phase", spy)
    train(TrainConfig(tokenizer="bytes", steps=2, warmup=0, out=str(tmp_path / "r"), n_layers=1, d_model=32, n_heads=2,
                      seq_len=32, max_seq_len=32, batch_size=2, eval_windows=2, score_every=100))
    assert any("reading and tokenising the data" in d for d in seen) and any("step 0" in d for d in seen), seen


def test_a_settling_interval_from_few_layers_says_few_beside_it(capsys):
    import pandas as pd

    from attnscope.cli.emergence import print_settling

    settled = pd.DataFrame([{"x": "symmetry", "y": "induction_random", "rho": 0.8, "ci_low": 0.5, "ci_high": 1.0,
                             "n": 9, "n_units": 3, "few_units": True, "q_run": 0.04}])
    print_settling(settled)
    out = capsys.readouterr().out
    assert "+0.80 [+0.50, +1.00] (few)" in out


def test_the_formation_summary_counts_borderline_and_transients(capsys):
    import pandas as pd

    from attnscope.cli.emergence import print_formation

    formed = pd.DataFrame([{"stack": "encoder", "level": "layer", "metric": "directionality", "outcome": o,
                            "borderline": b, "formed_step": s}
                           for o, b, s in (("formed", True, 50), ("formed", False, 100), ("transient", False, None),
                                           ("inside the noise", False, None))])
    print_formation(formed)
    out = capsys.readouterr().out
    assert "borderline" in out and "transient" in out
    row = [line for line in out.splitlines() if "encoder" in line][0]
    assert "2/4 (1 borderline)" in row and " 1 " in row


def test_a_dynamics_override_value_is_bounded_too():
    from attnscope.dynamics.model import _parse_value

    text, prev = "&a [1, 1, 1, 1, 1, 1, 1, 1, 1]", "a"
    for name in "bcdefghi":
        text = f"&{name} [{text}, " + ", ".join([f"*{prev}"] * 8) + "]"
        prev = name
    with pytest.raises(ConfigError, match="aliases expand to more than") as info:
        _parse_value(text)
    assert len(str(info.value)) < 200
    assert _parse_value("1.5") == 1.5 and _parse_value("[1, 2]") == [1, 2]


def test_build_report_checks_its_device_before_scoring(monkeypatch):
    from attnscope import report
    from attnscope.errors import InputError

    def scored(*args, **kwargs):
        raise AssertionError("scored before the device was checked")

    monkeypatch.setattr("attnscope.geometry.score", scored)
    with pytest.raises(InputError, match="device='bogus'"):
        report.build_report("some/model", data="builtin", device="bogus")


def test_a_log_hears_of_slow_work_before_its_bar_counts_anything(capsys):
    """emergence said nothing for 25-36 s in a log: a line once the work has run a moment, none for a quick refusal."""
    import time

    from attnscope.progress import note_after, plain_lines

    with plain_lines():
        with note_after("emergence x: 3 revision(s) chosen ...", after=0.05):
            time.sleep(0.3)
        with note_after("never said", after=5):
            pass
    err = capsys.readouterr().err
    assert err == "emergence x: 3 revision(s) chosen ...\n"
