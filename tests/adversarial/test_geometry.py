"""Hostile input for ``attnscope geometry`` and the sources it reads: one line and exit 2, nothing written.

Wrong-kind metadata in GGUF / CTranslate2 files, bad output paths (checked before any work), a
full disk, nonsense options, the same SOURCE twice, and the CLI's catch-all for bugs.
"""

from __future__ import annotations

import sys

import pytest
import typer

from attnscope.errors import FormatError
from attnscope.sources import open_source

from ._helpers import (
    assert_one_line_error,
    cli,
    files_under,
    fill_up,
    no_temporaries,
    tiny_filesystem,
    write_ct2_dir,
    write_gguf,
)


@pytest.mark.parametrize(
    "value, kind",
    [(0, "uint32"), (-4, "int32"), ("four", "string"), (2.5, "float32"), (True, "bool")],
)
def test_gguf_head_count_of_the_wrong_kind(tmp_path, value, kind):
    path = write_gguf(tmp_path / "m.gguf", value, kind)
    with pytest.raises(FormatError, match=r"attention\.head_count is .*expected an integer >= 1") as err:
        _ = open_source(str(path)).config
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_gguf_block_count_string_and_kv_mismatch(tmp_path):
    with pytest.raises(FormatError, match="block_count is '1'"):
        _ = open_source(str(write_gguf(tmp_path / "a.gguf", 4, block_count="1"))).config


@pytest.mark.parametrize("config", [[1, 2], "a string", 3])
def test_ct2_config_json_that_is_not_an_object(tmp_path, config):
    d = write_ct2_dir(tmp_path / "ct2", config=config)
    with pytest.raises(FormatError, match="must hold a JSON object"):
        _ = open_source(str(d)).config


def test_ct2_head_count_zero(tmp_path):
    d = write_ct2_dir(tmp_path / "ct2", num_heads=0)
    with pytest.raises(FormatError, match=r"encoder/num_heads is 0; expected an integer >= 1"):
        _ = open_source(str(d)).config


def test_cli_bad_gguf_metadata_is_one_line(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", -1, "int32")
    out = tmp_path / "out.csv"
    assert_one_line_error(cli("geometry", path, "--out", out), "head_count")
    assert not out.exists()


def test_cli_ct2_config_list_is_one_line(tmp_path):
    d = write_ct2_dir(tmp_path / "ct2", config=["not", "a", "mapping"])
    assert_one_line_error(cli("geometry", d), "config.json", "JSON object")


# ------------------------------------------------------------------------------ options, before work


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--k", "nan"], ["--k"]),
        (["--k", "-1"], ["--k"]),
        (["--out", "{tmp}/file/out.csv"], ["--out", "is a file, not a directory"]),
        (["--out", "/proc/attnscope.csv"], ["--out", "/proc"]),
        (["--out", "{tmp}/dir.csv"], ["--out", "is a directory"]),
        (["--out", "{tmp}/scores.txt"], ["--out", ".csv, .parquet"]),
        (["--plot", "{tmp}/file"], ["--plot", "not a directory"]),
        (["--plot", "/proc/figs"], ["--plot", "/proc"]),
    ],
)
def test_cli_bad_options_are_refused_before_any_work(tmp_path, args, needles):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir.csv").mkdir()
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    # the SOURCE does not exist: the error must be about the option, i.e. raised before loading
    assert_one_line_error(cli("geometry", tmp_path / "missing-model", *args), *needles)
    assert [p.name for p in files_under(tmp_path)] == ["file"]


def test_cli_same_source_twice(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", 2)
    assert_one_line_error(cli("geometry", path, str(path).replace("/m.gguf", "/./m.gguf")), "given twice")


@pytest.mark.parametrize(
    "args, needles",
    [
        (["{src}"], ["--zoo", "{src}"]),
        (["--workers", "0"], ["--workers"]),
        (["--workers", "-3"], ["--workers"]),
        (["--plot", "{tmp}/figs"], ["geometry plot"]),
        (["--out", "{tmp}/file"], ["--out", "not a directory"]),
        (["--executor", "inline", "--slurm-time", "5"], ["--executor slurm"]),
        (["--executor", "slurm", "--slurm-mem", "nan"], ["--slurm-mem"]),
    ],
)
def test_cli_zoo_nonsense(tmp_path, tiny_zoo, args, needles):
    (tmp_path / "file").write_text("x")
    sub = {"{src}": str(tmp_path / "m.gguf"), "{tmp}": str(tmp_path)}
    fix = lambda s: sub.get(s, s).replace("{tmp}", str(tmp_path))
    args = [fix(a) for a in args]
    out = ["--out", str(tmp_path / "survey")] if "--out" not in args else []
    assert_one_line_error(cli("geometry", "--zoo", f"{tiny_zoo}:tiny", *out, *args), *[fix(n) for n in needles])
    assert not (tmp_path / "survey").exists()


# ------------------------------------------------------------------------------ a full disk


def test_cli_enospc_names_the_path_and_writes_nothing(tmp_path):
    src = write_gguf(tmp_path / "m.gguf", 2)
    with tiny_filesystem(tmp_path / "disk") as disk:
        fill_up(disk)
        out = disk / "scores.csv"
        assert_one_line_error(cli("geometry", src, "--out", out), str(out), "no space left on device")
        assert not out.exists() and no_temporaries(disk)


# ------------------------------------------------------------------------------ the catch-all


def _app(exc: BaseException) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def boom() -> None:
        raise exc

    return app


@pytest.mark.parametrize(
    "exc, code, needle",
    [
        (RuntimeError("unexpected\nsecond line"), 1, "internal error: RuntimeError: unexpected"),
        (OSError(28, "No space left on device", "/x/y.csv"), 2, "cannot write /x/y.csv: no space left on device"),
        (PermissionError(13, "Permission denied", "/x"), 2, "/x: Permission denied"),
        (FormatError("bad file\nwith detail"), 2, "error: bad file"),
        (KeyboardInterrupt(), 130, "attnscope: interrupted"),  # typer makes it a silent Exit(130)
    ],
)
def test_run_app_prints_one_line(monkeypatch, capsys, exc, code, needle):
    from attnscope.cli._common import run_app

    monkeypatch.delenv("ATTNSCOPE_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["attnscope"])
    with pytest.raises(SystemExit) as ex:
        run_app(_app(exc))
    err = capsys.readouterr().err
    assert ex.value.code == code and err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_run_app_debug_shows_the_traceback(monkeypatch, capsys):
    from attnscope.cli._common import run_app

    monkeypatch.setenv("ATTNSCOPE_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["attnscope"])
    with pytest.raises(SystemExit) as ex:
        run_app(_app(RuntimeError("unexpected")))
    err = capsys.readouterr().err
    assert ex.value.code == 1 and err.startswith("Traceback") and err.splitlines()[-1].startswith("attnscope: internal")


def test_cli_debug_flag_adds_the_traceback_and_keeps_the_exit_code():
    res = cli("--debug", "geometry", "nowhere", "--k", "0")
    assert res.returncode == 2 and "Traceback" in res.stderr
    assert res.stderr.splitlines()[-1].startswith("attnscope: error: --k")
    assert_one_line_error(cli("geometry", "nowhere", "--k", "0"), "--k")


def test_cli_a_device_or_fifo_is_not_a_model(tmp_path):
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for spec in ("/dev/zero", str(fifo)):
        assert_one_line_error(cli("geometry", spec), f"{spec}: not a regular file")


@pytest.mark.parametrize("args, needle", [
    (["train", "--steps", "1", "--out", ""], "--out is given an empty value"),
    (["train", "--steps", "1", "--seeds", "0", "--out="], "--out is given an empty value"),
    (["train", "--steps", "1", "--seeds", "0", "--executor", "", "--out", "g"], "--executor is given an empty value"),
    (["compare", "r", "--out", ""], "--out is given an empty value"),
    (["dynamics", "lyapunov", "--steps", "5", "--transient", "0", "--out", ""], "--out is given an empty value"),
    (["geometry", ""], "an argument is empty"),
])
def test_cli_empty_arguments_are_refused_before_anything_is_written(tmp_path, args, needle):
    """``--out ''`` used to be Path('') = the current directory: a run, a grid or a comparison was written there."""
    assert_one_line_error(cli(*args, cwd=tmp_path), needle)
    assert list(tmp_path.iterdir()) == []
