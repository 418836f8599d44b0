"""ONNX files: W_q and W_k found by following the graph, never by running it (needs the ``onnx`` extra).

Exporters name the projection weights anonymously (``onnx::MatMul_470``), so names are not used.
Instead, for each ``Softmax`` in graph order (an attention block), the walk goes up through
element-wise ops (scale, mask) to the score ``MatMul`` whose two inputs are both activations
(query-side input 0, key-side input 1), then up each side through Transpose / Reshape / scale / bias /
Cast to the projection: a ``MatMul`` (weight ``[d_in, d_out]``) or ``Gemm`` (``transB`` read) fed by
an initializer or a ``Constant``. The head count comes from the ``Reshape`` on that path (a constant
shape, or a ``Concat`` whose head and head-dim entries are constants), else from a ``config.json``
beside the file (or one level up, the transformers.js layout).

The source exposes ``onnx.layers.{i}.q_weight`` / ``k_weight`` as ``[d_in, d_out]`` (input-by-output)
under the internal ``model_type`` ``onnx:graph`` (:mod:`attnscope.families.onnx`). A graph whose
blocks cannot all be traced is one FormatError naming the blocks it found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from attnscope.errors import AttnscopeError, FormatError, InputError

from .base import WeightSource, relative_name

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: the internal model_type of ONNX graphs (see attnscope.families.onnx)
ONNX_MODEL_TYPE = "onnx:graph"
#: ops between a projection and the score MatMul that keep "which weight" unambiguous
_PASS = {"Transpose", "Reshape", "Mul", "Div", "Add", "Sub", "Cast", "Identity", "Squeeze", "Unsqueeze"}
#: ops between the score MatMul and its Softmax (scale, mask, bias)
_SCORE_PASS = {"Mul", "Div", "Add", "Sub", "Where", "Cast", "Identity"}
_MAX_DEPTH = 24


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise InputError("reading ONNX files needs the onnx package: pip install 'attnscope[onnx]'") from None
    return onnx


@dataclass(frozen=True)
class _Proj:
    """One traced projection: where its weight lives and the head count read on the way."""

    weight: str  # initializer / constant name
    transposed: bool  # stored [d_out, d_in] (Gemm transB=1)
    heads: int | None


class _Graph:
    """Producer / constant lookup over one ONNX graph."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self._np = numpy_helper
        self.nodes = list(graph.node)
        self.producer = {out: n for n in self.nodes for out in n.output}
        self.init = {t.name: t for t in graph.initializer}
        self.const = {}
        for n in self.nodes:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        self.const[n.output[0]] = a.t

    def is_const(self, name: str) -> bool:
        return name in self.init or name in self.const or name == ""

    def array(self, name: str) -> np.ndarray:
        t = self.init.get(name)
        if t is None:
            t = self.const[name]
        return self._np.to_array(t)

    def vector(self, name: str, depth: int = 0) -> list[int | None] | None:
        """A 1-D integer tensor's entries where known (None = computed at run time)."""
        if self.is_const(name) and name:
            return [int(v) for v in np.asarray(self.array(name)).reshape(-1)]
        node = self.producer.get(name)
        if node is None or depth > 6:
            return None
        if node.op_type == "Concat":
            out: list[int | None] = []
            for inp in node.input:
                part = self.vector(inp, depth + 1)
                if part is None:
                    return None
                out.extend(part)
            return out
        if node.op_type in ("Unsqueeze", "Cast", "Identity"):
            return self.vector(node.input[0], depth + 1) or [None]
        return [None]  # Shape -> Gather -> ...: one run-time entry

    def attr(self, node: Any, key: str, default: Any = None) -> Any:
        from onnx import helper

        for a in node.attribute:
            if a.name == key:
                return helper.get_attribute_value(a)
        return default


def _heads_from_reshape(shape: list[int | None] | None, d_out: int) -> int | None:
    """h from a reshape target ``[b, t, h, e]`` (0 / -1 / run-time entries allowed where inferable)."""
    if not shape or len(shape) < 2:
        return None
    h, e = shape[-2], shape[-1]
    if h is not None and h > 0 and (e is None or e <= 0 or h * e == d_out) and d_out % h == 0:
        return h
    if e is not None and e > 0 and d_out % e == 0:
        return d_out // e
    return None


def _trace_projection(g: _Graph, start: str) -> tuple[_Proj | None, str]:
    """Walk up from an input of the score MatMul to the projection weight; (proj, why-not)."""
    frontier, seen, reshapes = [start], set(), []
    found: list[tuple[str, bool]] = []
    why = "no projection found"
    while frontier:
        name = frontier.pop()
        if name in seen or len(seen) > _MAX_DEPTH:
            continue
        seen.add(name)
        node = g.producer.get(name)
        if node is None:
            why = f"reaches graph input {name!r}"
            continue
        op = node.op_type
        if op in ("MatMul", "Gemm"):
            a, b = node.input[0], node.input[1]
            if g.is_const(b) and not g.is_const(a):
                found.append((b, op == "Gemm" and bool(g.attr(node, "transB", 0))))
                continue
            why = f"reaches {op} {node.name or node.output[0]!r} with no weight"
            continue
        if op not in _PASS:
            why = f"reaches {op} {node.name or node.output[0]!r}"
            continue
        if op == "Reshape":
            reshapes.append(node.input[1])
            frontier.append(node.input[0])
            continue
        frontier.extend(i for i in node.input if i and not g.is_const(i))
    weights = sorted(set(found))
    if len(weights) != 1:
        return None, (why if not weights else f"reaches {len(weights)} projection weights")
    weight, transposed = weights[0]
    d_out = int(g.array(weight).shape[0 if transposed else 1])
    heads = None
    for shape_name in reshapes:
        heads = _heads_from_reshape(g.vector(shape_name), d_out)
        if heads:
            break
    return _Proj(weight, transposed, heads), ""


def _score_matmul(g: _Graph, softmax: Any) -> Any | None:
    """The MatMul of two activations that feeds ``softmax`` through element-wise ops."""
    frontier, seen = [softmax.input[0]], set()
    while frontier:
        name = frontier.pop(0)
        if name in seen or len(seen) > _MAX_DEPTH:
            continue
        seen.add(name)
        node = g.producer.get(name)
        if node is None:
            continue
        if node.op_type == "MatMul" and not any(g.is_const(i) for i in node.input):
            return node
        if node.op_type in _SCORE_PASS:
            frontier.extend(i for i in node.input if i and not g.is_const(i))
    return None


def _find_config(path: Path) -> dict[str, Any] | None:
    for cand in (path.parent / "config.json", path.parent.parent / "config.json"):
        if cand.is_file():
            try:
                cfg = json.loads(cand.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                continue
            if isinstance(cfg, dict):
                return cfg
    return None


def _model_file(path: Path) -> Path | None:
    if path.is_file() and path.suffix.lower() == ".onnx":
        return path
    if path.is_dir():
        for cand in (path / "model.onnx", path / "onnx" / "model.onnx"):
            if cand.is_file():
                return cand
    return None


def _load_onnx(onnx: Any, path: Path) -> Any:
    """The ModelProto of ``path`` with its external data loaded, each location checked to be a
    relative path inside the file's folder first (:func:`~attnscope.sources.base.relative_name`)."""
    from onnx.external_data_helper import load_external_data_for_model

    def short(exc: BaseException) -> str:
        return (str(exc).splitlines() or [type(exc).__name__])[0][:120]

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf decode errors are plain Exceptions
        raise FormatError(f"{path}: not a readable ONNX file ({short(exc)})") from None
    external = [t for t in _graph_tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    for t in external:
        location = next((e.value for e in t.external_data if e.key == "location"), None)
        relative_name(location, f"{path}: external data of tensor {t.name!r}")
    if external:
        try:
            load_external_data_for_model(model, str(path.parent))
        except Exception as exc:  # a missing or short external data file
            raise FormatError(f"{path}: cannot read its external data ({short(exc)})") from None
    return model


def _graph_tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto of a graph: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for sub in attr.graphs:
                yield from _graph_tensors(sub)


class ONNXSource(WeightSource):
    """The q/k projection weights of an ONNX graph, one block (layer) per Softmax."""

    def __init__(self, path: Path) -> None:
        onnx = _import_onnx()
        self.path = path
        self.name = str(path)
        model = _load_onnx(onnx, path)
        g = _Graph(model.graph)
        softmaxes = [n for n in g.nodes if n.op_type == "Softmax"]
        if not softmaxes:
            raise FormatError(f"{path}: no attention found (no Softmax in the graph of {len(g.nodes)} nodes)")
        blocks, problems = [], []
        for i, sm in enumerate(softmaxes):
            label = sm.name or sm.output[0]
            mm = _score_matmul(g, sm)
            if mm is None:
                problems.append(f"block {i} ({label}): no score MatMul of two activations")
                continue
            q, why_q = _trace_projection(g, mm.input[0])
            k, why_k = _trace_projection(g, mm.input[1])
            if q is None or k is None:
                problems.append(f"block {i} ({label}): " + (f"query side {why_q}" if q is None else f"key side {why_k}"))
                continue
            blocks.append((q, k))
        if problems:
            raise FormatError(
                f"{path}: found {len(softmaxes)} attention block(s) but cannot trace q/k weights of "
                f"{len(problems)}: {'; '.join(problems[:3])}"
            )
        self._graph = g
        self._config = self._make_config(blocks)
        self._tensors: dict[str, tuple[str, bool]] = {}
        for i, (q, k) in enumerate(blocks):
            self._tensors[f"onnx.layers.{i}.q_weight"] = (q.weight, q.transposed)
            self._tensors[f"onnx.layers.{i}.k_weight"] = (k.weight, k.transposed)

    def _make_config(self, blocks: list[tuple[_Proj, _Proj]]) -> dict[str, Any]:
        user = _find_config(self.path) or {}
        n_heads_cfg = user.get("num_attention_heads") or user.get("n_head") or user.get("num_heads")
        sizes = set()
        for i, (q, k) in enumerate(blocks):
            wq, wk = self._graph.array(q.weight), self._graph.array(k.weight)
            d_q, out_q = (wq.shape[1], wq.shape[0]) if q.transposed else wq.shape
            d_k, out_k = (wk.shape[1], wk.shape[0]) if k.transposed else wk.shape
            h = q.heads or n_heads_cfg
            g = k.heads or (out_k * h // out_q if h and out_q % h == 0 else None)  # same head dim on both sides
            if not h or not g:
                raise FormatError(
                    f"{self.path}: block {i}: cannot tell the head count from the graph; put the model's "
                    "config.json (num_attention_heads) beside the file"
                )
            if out_q % h or out_k % g or out_q // h != out_k // g:
                raise FormatError(f"{self.path}: block {i}: q [{d_q}, {out_q}] / k [{d_k}, {out_k}] do not split into "
                                  f"{h} / {g} heads of one size")
            sizes.add((int(d_q), int(d_k), int(h), int(g), int(out_q // h)))
        if len(sizes) != 1:
            raise FormatError(f"{self.path}: attention blocks of different shapes {sorted(sizes)[:3]}; not supported")
        d_q, d_k, h, g, e = sizes.pop()
        cfg = {"model_type": ONNX_MODEL_TYPE, "n_layers": len(blocks), "n_heads": h, "n_kv_heads": g,
               "d_model": d_q, "d_head": e, "causal": bool(user.get("is_decoder")) or _is_causal_type(user)}  # fmt: skip
        if d_k != d_q:
            cfg["d_model_kv"] = d_k
        if user.get("model_type"):
            cfg["source_model_type"] = user["model_type"]
        return cfg

    @classmethod
    def detect(cls, spec: str) -> bool:
        return _model_file(Path(spec).expanduser()) is not None

    @classmethod
    def open(cls, spec: str, **options: Any) -> "ONNXSource":
        path = _model_file(Path(spec).expanduser())
        if path is None:
            raise InputError(f"{spec}: no ONNX file (expected a .onnx file, or model.onnx / onnx/model.onnx in it)")
        return cls(path)

    @property
    def config(self) -> dict[str, Any]:
        return self._config

    def keys(self) -> list[str]:
        return list(self._tensors)

    def get(self, name: str) -> "torch.Tensor":
        import torch

        try:
            weight, transposed = self._tensors[name]
        except KeyError:
            raise FormatError(f"{self.name}: no tensor named {name!r}") from None
        arr = np.asarray(self._graph.array(weight))
        return torch.from_numpy(np.array(arr.T if transposed else arr, copy=True))  # [d_in, d_out], one layer


def _is_causal_type(config: dict[str, Any]) -> bool:
    """True when a config.json beside the file names a model_type attnscope scores as a decoder."""
    from attnscope.families import get_family

    if not config.get("model_type"):
        return False
    try:
        stacks = get_family(config).stacks(config)
    except AttnscopeError:
        return False
    return bool(stacks) and stacks[0].stack == "decoder"
