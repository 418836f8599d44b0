"""Family specs for GGUF files (llama.cpp naming), keyed ``gguf:<arch>``.

Einstein legend: h query head, g kv head, d model dim, e head dim.

Tensors are ``blk.{i}.attn_q.weight`` [h*e, d] and ``blk.{i}.attn_k.weight`` [g*e, d] (numpy order,
as :class:`attnscope.sources.gguf.GGUFSource` returns them), or one fused ``blk.{i}.attn_qkv.weight``
[(h + 2g)*e, d] with rows ``[q | k | v]`` (Phi-3, GPT-2 style archs). llama.cpp's converter permutes
q/k rows *within* each head for RoPE; the same permutation on q and k leaves every M_h unchanged,
so heads are sliced as ``(h e)`` without undoing it. Every GGUF arch here is a causal decoder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.errors import FormatError, UnsupportedError

from .base import AttentionFactors, FamilySpec, StackInfo, fold_gains

if TYPE_CHECKING:  # pragma: no cover
    from attnscope.sources.base import WeightSource

#: llama.cpp architectures with separate or fused (attn_qkv) q/k projections and plain MHA/GQA heads
GGUF_ARCHS = (
    "llama", "mistral", "mistral3", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma", "gemma2", "gemma3",
    "phi3", "starcoder2", "granite", "olmo", "olmo2", "internlm2", "stablelm", "gpt2", "command-r",
    "cohere2", "exaone", "smollm3", "phi2",
)
#: archs whose q/k-norm gains can be folded: q/k rows are not permuted by llama.cpp's converter (NeoX
#: rotary), so a per-head gain lines up with the head dim; the converter already adds Gemma's ``+ 1``
QK_NORM_FOLD_ARCHS = frozenset({"qwen3", "qwen3moe", "gemma3"})
#: archs whose fused ``attn_qkv`` is known to be plain rows [q | k | v]; any other fused layout (falcon,
#: bloom: interleaved per head) is refused rather than sliced wrongly
FUSED_QKV_ARCHS = frozenset({"phi3", "phi2", "gpt2"})


def read_float32(source: "WeightSource", name: str) -> np.ndarray:
    get_numpy = getattr(source, "get_numpy", None)
    if get_numpy is not None:
        return get_numpy(name)
    return source.get(name).float().numpy()


def split_heads(w: np.ndarray, n: int, e: int, d: int, what: str) -> np.ndarray:
    """``[n*e, d]`` (nn.Linear rows ``(n e)``) -> ``[n, d, e]`` input-by-output factors."""
    if w.shape != (n * e, d):
        raise FormatError(f"{what}: expected shape {(n * e, d)}, found {tuple(w.shape)}")
    return np.ascontiguousarray(w.reshape(n, e, d).transpose(0, 2, 1), dtype=np.float32)


class GGUFLlamaLikeSpec(FamilySpec):
    """llama.cpp decoders whose attention is plain multi-head / grouped-query attention (one instance per arch;
    the family name is the config ``model_type``, ``gguf:<arch>``, as for every other family)."""

    def __init__(self, arch: str) -> None:
        self.name = f"gguf:{arch}"
        self.model_types = (self.name,)

    def stacks(self, config: dict[str, Any], source: "WeightSource | None" = None) -> list[StackInfo]:
        from attnscope.sources.base import metadata_count

        label = source.name if source is not None else self.name
        arch = config.get("architecture")

        def count(key: str, what: str, default: Any = None) -> int:
            value = config.get(key)
            return metadata_count(default if value is None else value, f"{arch}.{what}", label)

        n_q = count("num_attention_heads", "attention.head_count")
        n_kv = count("num_key_value_heads", "attention.head_count_kv", n_q)
        d = count("hidden_size", "embedding_length")
        if config.get("head_dim") is None and n_q > d:
            raise FormatError(f"{label}: {arch}.attention.head_count is {n_q}, more heads than the width {d} has "
                              "dimensions (a head dim of 0)")
        e = count("head_dim", "attention.key_length", d // n_q)
        info = StackInfo("decoder", count("num_hidden_layers", "block_count"), n_q, n_kv, d, e,
                         extra={"arch": arch})
        return [info]

    def layer_factors(self, source: "WeightSource", info: StackInfo, layer: int, fold: str = "none") -> AttentionFactors:
        h, g, d, e = info.n_heads, info.n_kv_heads, info.d_model, info.d_head
        base = f"blk.{layer}"
        if source.has(f"{base}.attn_q.weight"):
            wq = read_float32(source, f"{base}.attn_q.weight")
            wk = read_float32(source, f"{base}.attn_k.weight")
        elif source.has(f"{base}.attn_qkv.weight"):
            arch = self.name.split(":", 1)[1]
            if arch not in FUSED_QKV_ARCHS:
                raise UnsupportedError(
                    f"{source.name}: fused attn_qkv of GGUF arch {arch!r} has an unverified row layout; "
                    f"supported fused archs: {', '.join(sorted(FUSED_QKV_ARCHS))}"
                )
            wqkv = read_float32(source, f"{base}.attn_qkv.weight")
            if wqkv.shape[0] != (h + 2 * g) * e:
                raise FormatError(
                    f"{source.name}: {base}.attn_qkv.weight has {wqkv.shape[0]} rows, expected {(h + 2 * g) * e}"
                )
            wq, wk = wqkv[: h * e], wqkv[h * e : (h + g) * e]
        else:
            raise FormatError(f"{source.name}: no attn_q/attn_k or attn_qkv tensor for layer {layer} "
                              f"(layer {layer} of {info.n_layers} in the file's block_count)")
        q = split_heads(wq, h, e, d, f"{source.name} {base} q")
        k = split_heads(wk, g, e, d, f"{source.name} {base} k")
        if fold != "none":
            q, k = self._fold(source, base, q, k, fold)
        return AttentionFactors("decoder", layer, q, k)

    def _fold(self, source: "WeightSource", base: str, q: np.ndarray, k: np.ndarray, fold: str) -> tuple:
        """Fold ``attn_q_norm`` / ``attn_k_norm`` (and with "all" ``attn_norm``) gains into q [h, d, e], k [g, d, e]."""
        arch = self.name.split(":", 1)[1]
        gains = {}
        for key in ("attn_q_norm", "attn_k_norm"):
            if source.has(f"{base}.{key}.weight"):
                if arch not in QK_NORM_FOLD_ARCHS:
                    raise UnsupportedError(
                        f"{source.name}: folding {key} of GGUF arch {arch!r} is not verified (rows may be permuted); "
                        f"supported: {', '.join(sorted(QK_NORM_FOLD_ARCHS))}"
                    )
                gains[key] = read_float32(source, f"{base}.{key}.weight")
        in_gain = None
        if fold == "all":
            if not source.has(f"{base}.attn_norm.weight"):
                raise FormatError(f"{source.name}: no {base}.attn_norm.weight to fold (fold_norms='all')")
            in_gain = read_float32(source, f"{base}.attn_norm.weight")
        return fold_gains(q, k, q_gain=gains.get("attn_q_norm"), k_gain=gains.get("attn_k_norm"), in_gain=in_gain)


SPECS = [GGUFLlamaLikeSpec(arch) for arch in GGUF_ARCHS]
