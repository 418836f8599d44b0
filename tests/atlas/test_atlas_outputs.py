"""An atlas folder is replaced whole: a kill while the files move in leaves a folder a reader refuses (changing
nothing) and the next write completes."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)",
)


@pytest.fixture(scope="module")
def atlas_dir(tmp_path_factory):
    """An atlas of a tiny GGUF llama written by the CLI's writer: its folder."""
    import attnscope
    from attnscope.cli.atlas import write_atlas

    root = tmp_path_factory.mktemp("atlas-out")
    gguf = write_llama_gguf_model(root / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))
    res = attnscope.atlas(str(gguf), windows=2, length=48, random_windows=2, random_length=12, n_boot=50)
    write_atlas(res.table, res.correlations, res.info, root / "out", hue="layer", maps=res.maps, settings={"n_boot": 50})
    return root / "out"


class Killed(BaseException):
    pass


def test_a_kill_while_the_atlas_moves_in_is_finished_by_the_next_write(atlas_dir, monkeypatch):
    from attnscope.cli.atlas import write_atlas
    from attnscope.errors import FormatError
    from attnscope.outputs import MANIFEST, check_result_set, clean_stale
    from attnscope.tables import read_table

    manifest = json.loads((atlas_dir / MANIFEST).read_text())["results"]["atlas"]
    assert {"atlas.csv", "atlas.parquet", "correlations.csv", "atlas.json", "atlas.html"} <= set(manifest["files"])
    assert manifest["settings"] == {"n_boot": 50}
    table, corr = read_table(atlas_dir / "atlas.parquet"), read_table(atlas_dir / "correlations.csv")
    info = json.loads((atlas_dir / "atlas.json").read_text())
    old_corr = (atlas_dir / "correlations.csv").read_bytes()
    table["symmetry"] = -table["symmetry"]  # a different atlas
    corr["rho"], corr["ci_low"], corr["ci_high"] = -corr["rho"], -corr["ci_high"], -corr["ci_low"]
    real, calls = os.replace, []

    def replace(src, dst):  # two files move into the folder, then the process dies
        if Path(dst).parent == atlas_dir:
            calls.append(dst)
            if len(calls) == 3:
                raise Killed
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        write_atlas(table, corr, info, atlas_dir, hue="layer")
    monkeypatch.setattr(os, "replace", real)
    assert (atlas_dir / "correlations.csv").read_bytes() == old_corr  # the tables moved in, the rest still old
    with pytest.raises(FormatError, match="killed while moving its files"):
        read_table(atlas_dir / "atlas.csv")  # a reader changes nothing
    assert (atlas_dir / "correlations.csv").read_bytes() == old_corr
    clean_stale(atlas_dir)  # what the next write into the folder does first
    new_table = read_table(atlas_dir / "atlas.csv")
    assert new_table["symmetry"].tolist() == pytest.approx(table["symmetry"].tolist())
    assert read_table(atlas_dir / "correlations.csv")["rho"].tolist() == pytest.approx(corr["rho"].tolist(), nan_ok=True)
    check_result_set(atlas_dir, "atlas")
    assert not [n for n in os.listdir(atlas_dir) if n.startswith(".")]


def test_the_atlas_lists_every_file_it_writes(atlas_dir):
    """atlas_file_names (checked before any work) names exactly the files write_atlas wrote (no interventions)."""
    from attnscope.cli.atlas import atlas_file_names
    from attnscope.outputs import MANIFEST

    written = {p.name for p in atlas_dir.iterdir() if p.is_file() and p.name != MANIFEST}
    assert set(atlas_file_names(False)) == written
    assert set(atlas_file_names(False)) < set(atlas_file_names(True))


@pytest.mark.parametrize("args", [[], ["--zoo", "offline-demo"]], ids=["source", "zoo"])
def test_a_file_of_the_users_in_out_is_refused_before_any_work(tmp_path, monkeypatch, args):
    """A user's own atlas.html in --out: one line naming it, before the model is loaded (not after the work)."""
    from typer.testing import CliRunner

    import attnscope.atlas
    import attnscope.atlas.zoo
    from attnscope.cli import app

    def no_work(*a, **k):
        raise AssertionError("the atlas ran before --out was checked")

    monkeypatch.setattr(attnscope.atlas, "atlas", no_work)
    monkeypatch.setattr(attnscope.atlas.zoo, "run_zoo_atlas", no_work)
    out = tmp_path / "out"
    out.mkdir()
    (out / "atlas.html").write_text("mine")
    source = [] if args else [str(tmp_path / "absent.gguf")]
    r = CliRunner().invoke(app, ["atlas", *source, "--out", str(out), *args])
    from attnscope.errors import InputError

    assert isinstance(r.exception, InputError), r.output  # main() prints it as one line, exit 2
    assert "atlas.html exists" in str(r.exception)
    assert (out / "atlas.html").read_text() == "mine"
