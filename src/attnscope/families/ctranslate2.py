"""Family specs for CTranslate2 model directories, keyed ``ct2:<spec name>`` (Whisper, OpenNMT Transformer).

Einstein legend: h query head, g kv head, d model dim, e head dim.

CTranslate2 stores ``nn.Linear``-style weights ``[out, in]`` and fuses projections:

* self-attention (encoder and causal decoder): ``<stack>/layer_{i}/self_attention/linear_0/weight``
  ``[(h + 2g) e, d]`` with rows ``[q; k; v]`` (g = h unless ``num_heads_kv`` says otherwise);
* cross-attention (decoder of an encoder-decoder model): ``decoder/layer_{i}/attention/linear_0``
  ``[h e, d]`` (q) and ``linear_1`` ``[2 h e, d]`` (rows ``[k; v]``).

Stacks: ``encoder``, ``decoder`` (self-attention) and ``cross``, each only when present in the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnscope.errors import FormatError, UnsupportedError

from .base import AttentionFactors, FamilySpec, StackInfo
from .gguf import read_float32, split_heads

if TYPE_CHECKING:  # pragma: no cover
    from attnscope.sources.base import WeightSource

CT2_SPECS = ("WhisperSpec", "TransformerSpec", "TransformerDecoderModelSpec", "TransformerEncoderModelSpec")
#: encoder-decoder specs: an encoder, a decoder and its cross-attention in every decoder layer, all three required
SEQ2SEQ_SPECS = frozenset({"WhisperSpec", "TransformerSpec"})
_CROSS = "decoder/layer_{}/attention/linear_{}/weight"


class CT2TransformerSpec(FamilySpec):
    """CTranslate2 Transformer-style specs with fused ``linear_0`` self-attention (one instance per spec name;
    the family name is the config ``model_type``, ``ct2:<spec>``)."""

    def __init__(self, spec: str) -> None:
        self.name = f"ct2:{spec}"
        self.model_types = (self.name,)

    def stacks(self, config: dict[str, Any], source: "WeightSource | None" = None) -> list[StackInfo]:
        out = []
        spec = config.get("ct2_spec", "")
        for stack in ("encoder", "decoder"):
            n_layers = config.get(f"{stack}_layers")
            if not n_layers:
                continue
            h = int(config[f"{stack}_attention_heads"])
            g = int(config.get(f"{stack}_kv_heads") or h)
            d = int(config["d_model"])
            if d % h:
                raise FormatError(f"d_model {d} is not divisible by {h} {stack} heads")
            out.append(StackInfo(stack, int(n_layers), h, g, d, d // h, extra={"ct2_spec": spec}))
            if stack == "decoder" and source is not None and self._has_cross(source, spec, int(n_layers)):
                out.append(StackInfo("cross", int(n_layers), h, h, d, d // h, extra={"ct2_spec": spec}))
        if source is not None and spec in SEQ2SEQ_SPECS:
            missing = [s for s in ("encoder", "decoder") if s not in {i.stack for i in out}]
            if missing:
                raise FormatError(f"{source.name}: a {spec} has an encoder and a decoder, and this file has no "
                                  f"{' and no '.join(missing)} layers (tensor names <stack>/layer_N/...)")
        return out

    @staticmethod
    def _has_cross(source: "WeightSource", spec: str, n_layers: int) -> bool:
        """Whether the decoder has cross-attention: in every layer (an encoder-decoder spec), or in none; a file
        where some of its q or k/v tensors are missing (a renamed variable) is refused naming the first."""
        names = [_CROSS.format(i, j) for i in range(n_layers) for j in (0, 1)]
        present = [source.has(n) for n in names]
        if all(present):
            return True
        if any(present) or spec in SEQ2SEQ_SPECS:
            first = names[present.index(False)]
            raise FormatError(f"{source.name}: the decoder's cross-attention (the {spec}'s third stack) lacks {first}; "
                              "a file whose tensor names do not give every stack is not scored")
        return False

    def layer_factors(self, source: "WeightSource", info: StackInfo, layer: int, fold: str = "none") -> AttentionFactors:
        if fold == "all":
            raise UnsupportedError(f"{self.name}: input-norm gain folding is not declared for CTranslate2 models")
        # fold == "qk": these models have no q/k norm, nothing to fold
        h, g, d, e = info.n_heads, info.n_kv_heads, info.d_model, info.d_head
        if info.stack == "cross":
            base = f"decoder/layer_{layer}/attention"
            wq = read_float32(source, f"{base}/linear_0/weight")
            wkv = read_float32(source, f"{base}/linear_1/weight")
            if wkv.shape[0] != 2 * g * e:
                raise FormatError(f"{source.name}: {base}/linear_1/weight has {wkv.shape[0]} rows, expected {2 * g * e}")
            wk = wkv[: g * e]
        else:
            base = f"{info.stack}/layer_{layer}/self_attention"
            w = read_float32(source, f"{base}/linear_0/weight")
            if w.shape[0] != (h + 2 * g) * e:
                raise FormatError(f"{source.name}: {base}/linear_0/weight has {w.shape[0]} rows, expected {(h + 2 * g) * e}")
            wq, wk = w[: h * e], w[h * e : (h + g) * e]
        d_k = wk.shape[1]
        q = split_heads(wq, h, e, d, f"{source.name} {base} q")
        k = split_heads(wk, g, e, d_k, f"{source.name} {base} k")
        return AttentionFactors(info.stack, layer, q, k)


SPECS = [CT2TransformerSpec(spec) for spec in CT2_SPECS]
