"""A model folder never makes attnscope read outside it: every file that an index, a manifest or an
ONNX graph names must be a relative path inside the folder (no ``..``, no absolute path), else one
line naming the entry; symlinks inside the folder stay allowed (hub snapshots link into blobs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnscope.errors import FormatError
from attnscope.sources import open_source
from attnscope.sources.base import path_inside, relative_name

from ._helpers import assert_one_line_error, cli

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("_geometry_models", Path(__file__).parents[1] / "geometry" / "models.py")
models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(models)


@pytest.mark.parametrize("name", ["../x.safetensors", "a/../../x", "/etc/passwd", "..\\x", "C:\\x", "\\\\srv\\x",
                                  "", "a/..", None, 3])
def test_relative_name_refuses_what_leaves_the_folder(name):
    with pytest.raises(FormatError) as err:
        relative_name(name, "idx.json entry 'w'")
    assert "idx.json entry 'w'" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["model-00001.safetensors", "sub/dir/w.bin", "./w.bin", "a..b.safetensors"])
def test_relative_name_keeps_names_inside(tmp_path, name):
    assert path_inside(tmp_path, name, "x") == tmp_path / name


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    root = tmp_path_factory.mktemp("outside")
    return models.write_model(models.llama_model(seed=0), root / "model", "sharded")


def _with_index(src: Path, dst: Path, rewrite) -> Path:
    shutil.copytree(src, dst)
    idx = dst / "model.safetensors.index.json"
    data = json.loads(idx.read_text())
    data["weight_map"] = {k: rewrite(v) for k, v in data["weight_map"].items()}
    idx.write_text(json.dumps(data))
    return dst


def test_index_naming_etc_passwd_is_refused_in_one_line(sharded, tmp_path):
    d = _with_index(sharded, tmp_path / "m", lambda v: "../../../../etc/passwd")
    with pytest.raises(FormatError, match=r"'\.\./\.\./\.\./\.\./etc/passwd' is outside the model's folder"):
        open_source(str(d))
    res = cli("geometry", d, "--out", tmp_path / "o.csv")
    assert_one_line_error(res, "model.safetensors.index.json", "../../../../etc/passwd", "outside")
    assert not (tmp_path / "o.csv").exists()


def test_index_pointing_at_a_valid_shard_one_folder_up_is_refused(sharded, tmp_path):
    d = _with_index(sharded, tmp_path / "m", lambda v: f"../{v}")
    for shard in sharded.glob("*.safetensors"):
        shutil.copy(shard, tmp_path / shard.name)  # the shards really are there, one folder up
    with pytest.raises(FormatError, match="outside the model's folder"):
        open_source(str(d))


def test_index_with_an_absolute_path_is_refused(sharded, tmp_path):
    d = _with_index(sharded, tmp_path / "m", lambda v: str(sharded / v))  # valid files, absolute names
    with pytest.raises(FormatError, match="outside the model's folder"):
        open_source(str(d))


def test_symlinked_shards_as_in_the_hub_cache_still_score(sharded, tmp_path):
    from attnscope.geometry import score

    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for f in sharded.iterdir():
        shutil.copy(f, blobs / f.name)
        (snap / f.name).symlink_to(blobs / f.name)
    a, b = score(str(snap)), score(str(sharded))
    np.testing.assert_array_equal(a["symmetry"].to_numpy(), b["symmetry"].to_numpy())


def test_onnx_external_data_outside_the_folder_is_refused(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph)
    d = tmp_path / "m"
    d.mkdir()
    onnx.save(model, str(d / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.data", size_threshold=0)
    with pytest.raises(FormatError, match="no attention found"):  # inside the folder: read, then no Softmax
        open_source(str(d / "model.onnx"))
    shutil.move(str(d / "w.data"), str(tmp_path / "w.data"))  # a valid data file, one folder up
    m = onnx.load(str(d / "model.onnx"), load_external_data=False)
    for e in m.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = "../w.data"
    onnx.save(m, str(d / "model.onnx"))
    with pytest.raises(FormatError, match=r"external data of tensor 'w': '\.\./w\.data' is outside the model's folder"):
        open_source(str(d / "model.onnx"))


def test_zoo_package_paths_stay_inside_the_package():
    from attnscope.zoo.packages import join_parts, pypi_path
    from attnscope.zoo.registry import resolve_source

    with pytest.raises(FormatError, match="outside the package"):
        resolve_source("pkg:attnscope/../../etc")
    with pytest.raises(FormatError, match="outside its site-packages folder"):
        pypi_path("pypi:numpy/../../../etc/passwd")
    with pytest.raises(FormatError, match="join: target"):
        join_parts("x", "../escape.bin", ("pypi:numpy/numpy/__init__.py",))
    assert Path(resolve_source("pkg:attnscope/zoo")).is_dir()


def test_sharded_weights_refuse_before_resolving_any_shard(tmp_path):
    """The index is checked where the hub's source reads it too: no shard name is ever resolved
    (downloaded, for the hub) before every entry has been checked."""
    from attnscope.sources.hf import ShardedWeights

    idx = tmp_path / "model.safetensors.index.json"
    idx.write_text(json.dumps({"weight_map": {"a.weight": "model-1.safetensors", "b.weight": "../../secret"}}))
    asked = []

    def resolve(name):
        asked.append(name)
        return tmp_path / name

    with pytest.raises(FormatError, match=r"entry 'b\.weight': '\.\./\.\./secret' is outside"):
        ShardedWeights("org/repo", "index", "model.safetensors.index.json", resolve)
    assert asked == ["model.safetensors.index.json"]


def test_heads_refuses_a_model_whose_index_leaves_the_folder(tmp_path):
    """``heads`` loads through transformers, which would follow the index: attnscope checks it first."""
    from attnscope.heads.maps import open_model

    hf = tmp_path / "bert"
    models.write_model(models.bert_model(seed=1), hf, "sharded")
    idx = hf / "model.safetensors.index.json"
    data = json.loads(idx.read_text())
    first = next(iter(data["weight_map"]))
    data["weight_map"][first] = "../../../../etc/passwd"
    idx.write_text(json.dumps(data))
    with pytest.raises(FormatError, match=r"'\.\./\.\./\.\./\.\./etc/passwd' is outside the model's folder"):
        open_model(hf)
