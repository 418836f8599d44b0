"""Bad calls from Python: the exception type, and a message in Python's words.

Each message names the parameter (``windows``, ``k=``), never a command-line flag; a wrong type is a
``TypeError`` naming what the parameter accepts; a wrong table names the columns it needs. The CLI
shows the same messages with flags (tests/cli/test_help_and_errors.py).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pandas as pd
import pytest

from attnscope.errors import AttnscopeError, ArgumentTypeError, AttnscopeWarning, warn

FLAG = re.compile(r"(?<![\w-])--[a-z]")


def _bad_calls(tmp: Path):
    """(label, call, exception type, words the message must hold)."""
    import attnscope.geometry as geo
    from attnscope import dynamics as dyn
    from attnscope.devices import check_device
    from attnscope.heads import derive_pattern, extract
    from attnscope.plots.geometry import plot_layer_curves
    from attnscope.training import compare, train
    from attnscope.training.config import TrainConfig

    wrong_table = pd.DataFrame({"model": ["m"], "entropy": [1.0]})
    cfg = dyn.load_preset("paper")
    return [
        ("score k a string", lambda: geo.score("x", k="two"), TypeError, ["k must be a number", "str 'two'"]),
        ("score k negative", lambda: geo.score("x", k=-1.0), AttnscopeError, ["k must be a finite number >= 0"]),
        ("score levels", lambda: geo.score("x", levels="rows"), AttnscopeError, ["levels must be head, layer or both"]),
        ("train a dict", lambda: train({"steps": 5}), TypeError, ["cfg must be a TrainConfig", "dict"]),
        ("train steps text", lambda: TrainConfig(steps="five").validate(), AttnscopeError, ["steps must be an integer"]),
        ("trajectory a name", lambda: dyn.trajectory("paper"), TypeError, ["cfg must be a DynamicsConfig", "'paper'"]),
        ("lyapunov steps 0", lambda: dyn.lyapunov_table(cfg, [1.0], steps=0), AttnscopeError,
         ["need steps >= 1 and transient >= 0", "steps=0"]),
        ("summarize wrong table", lambda: geo.summarize(wrong_table), AttnscopeError,
         ["df is not a score table", "needs the columns model, family, stack, level", "has no family, stack, level"]),
        ("summarize not a table", lambda: geo.summarize([1, 2]), TypeError, ["df must be a pandas DataFrame"]),
        ("plot wrong table", lambda: plot_layer_curves(wrong_table), AttnscopeError, ["needs the columns", "has no"]),
        ("score levels a number", lambda: geo.score("x", levels=5), TypeError, ["levels must be", "int 5"]),
        ("trajectory steps text", lambda: dyn.trajectory(cfg, steps="10"), TypeError, ["steps must be a whole number"]),
        ("compare a number", lambda: compare(5), TypeError, ["run_dirs must be a run directory or a list"]),
        ("compare smooth text", lambda: compare([tmp], smooth="2"), TypeError, ["smooth must be a whole number"]),
        ("derive a list", lambda: derive_pattern([1, 2]), TypeError, ["df must be a pandas DataFrame"]),
        ("device gpu", lambda: check_device("gpu"), AttnscopeError, ["device='gpu' is not a name torch accepts"]),
        ("extract windows 0", lambda: extract("x", windows=0), AttnscopeError, ["windows must be at least 1, not 0"]),
        ("extract windows text", lambda: extract("x", windows="10"), TypeError, ["windows must be a whole number"]),
        ("compare one str", lambda: compare(str(tmp / "c-default")), AttnscopeError, [f"{tmp / 'c-default'}: not a"]),
        ("compare at", lambda: compare([tmp], at=[0]), AttnscopeError, ["the steps in at must be positive"]),
        ("resolve two configs", lambda: dyn.resolve_config("paper", "x.yaml"), AttnscopeError,
         ["give only one of preset, config and weights_seed"]),
        ("bifurcation chunk", lambda: dyn.bifurcation(cfg, [1.0], steps=10, transient=5, chunk=0), AttnscopeError,
         ["chunk must be >= 1"]),
    ]


CASES = [c[0] for c in _bad_calls(Path("/nonexistent"))]


@pytest.mark.parametrize("label", CASES)
def test_bad_call_names_the_parameter_not_a_flag(tmp_path, label):
    _, call, kind, words = next(c for c in _bad_calls(tmp_path) if c[0] == label)
    with pytest.raises(kind) as err:
        call()
    text = str(err.value)
    assert "\n" not in text and not FLAG.search(text), text
    for w in words:
        assert w in text, text
    if isinstance(err.value, AttnscopeError) and not label.startswith("compare one"):  # a path, no parameter
        assert err.value.params and all(p in text for p in err.value.params), text  # the CLI's flags come from these


def test_wrong_types_are_type_errors_and_attnscope_errors():
    err = ArgumentTypeError("k must be a number, not str 'two'", params="k")
    assert isinstance(err, TypeError) and isinstance(err, AttnscopeError) and err.params == ("k",)


def test_warnings_point_at_the_callers_code():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warn("warmup=5 is not below steps=2", params=("warmup", "steps"))
    assert seen[0].filename == __file__ and isinstance(seen[0].message, AttnscopeWarning)
    assert seen[0].message.params == ("warmup", "steps")


def test_compare_skips_a_grids_bookkeeping_folder(tmp_path):
    """``compare(sorted(Path(grid).iterdir()))`` (docs/training.md) reads the runs, not ``.grid``."""
    from attnscope.training import compare

    (tmp_path / ".grid").mkdir()
    with pytest.raises(AttnscopeError, match="give at least one run directory"):
        compare(sorted(tmp_path.iterdir()))


def _run(root: Path, name: str, init: str, **config) -> Path:
    """A minimal finished run directory (run.json + metrics.jsonl) as ``attnscope train`` writes it."""
    import json

    d = root / name
    d.mkdir()
    (d / "metrics.jsonl").write_text("\n".join(json.dumps({"step": s, "loss": 3.0 - s / 10}) for s in (0, 10)) + "\n")
    (d / "run.json").write_text(json.dumps({"objective": "mlm", "init": init, "data": "builtin", "seed": 0,
                                            "model": {"n_layers": 2}, **config}))
    return d


def test_a_missing_partner_names_the_setting_that_differs(tmp_path):
    from attnscope.training import compare

    runs = [_run(tmp_path, "default", "default", warmup=0), _run(tmp_path, "sym", "symmetric", warmup=10)]
    with pytest.raises(AttnscopeError) as err:
        compare(runs)
    text = str(err.value)
    assert "the nearest, default, differs in warmup (10 vs 0)" in text and "baseline=RUN" in text, text
    assert "objective" not in text and err.value.params == ("baseline",)


def test_compare_takes_one_run_as_a_plain_string(tmp_path):
    from attnscope.training import compare

    run = _run(tmp_path, "c-default", "default")
    assert list(compare(str(run)).runs["run"]) == ["c-default"]


def test_cluster_features_as_one_string_are_names_not_characters():
    from attnscope.heads import cluster_heads

    df = pd.DataFrame({"layer": [0] * 6, "head": range(6), "entropy": [1.0, 2, 3, 7, 8, 9],
                       "distance": [1.0, 1, 2, 5, 6, 5]})
    assert cluster_heads(df, features="entropy,distance", k_max=3).features == ("entropy", "distance")


def test_the_warmup_warning_speaks_python_and_points_at_the_call(tmp_path):
    from attnscope.training import TrainConfig, train

    cfg = TrainConfig(out=str(tmp_path / "r"), steps=2, warmup=5, n_layers=1, n_heads=2, d_model=16, d_ff=32,
                      batch_size=2, seq_len=16, eval_windows=2, threads=1, progress=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        train(cfg)
    [w] = [w for w in seen if isinstance(w.message, AttnscopeWarning)]
    assert str(w.message).startswith("warmup=5 is not below steps=2") and "--" not in str(w.message)
    assert w.filename == __file__  # the user's line, not trainer.py
