"""Tiny random model repositories (LLaMA layout, sharded safetensors) for the local hub server."""

from __future__ import annotations

import json

import numpy as np

SHA_MAIN = "a" * 40  #: commit of main in the test repos
SHA_V1 = "b" * 40  #: commit of the tag v1
TOKEN = "hf_test_token"  #: the token a gated test repo accepts


def _st(tensors: dict[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save

    return save(tensors)


def llama_repo(
    n_layers: int = 4,
    d: int = 32,
    n_heads: int = 4,
    n_kv: int = 2,
    inter: int = 64,
    vocab: int = 64,
    layers_per_shard: int = 2,
    extra_shard: bool = True,
    seed: int = 0,
) -> dict[str, bytes]:
    """config.json, model.safetensors.index.json and shards; ``extra_shard`` adds one with no q/k at all."""
    rng = np.random.default_rng(seed)
    e = d // n_heads

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[-1])

    groups: list[dict[str, np.ndarray]] = []
    for start in range(0, n_layers, layers_per_shard):
        shard: dict[str, np.ndarray] = {}
        for i in range(start, min(n_layers, start + layers_per_shard)):
            p = f"model.layers.{i}."
            shard[p + "self_attn.q_proj.weight"] = w(n_heads * e, d)
            shard[p + "self_attn.k_proj.weight"] = w(n_kv * e, d)
            shard[p + "self_attn.v_proj.weight"] = w(n_kv * e, d)
            shard[p + "self_attn.o_proj.weight"] = w(d, n_heads * e)
            shard[p + "mlp.gate_proj.weight"] = w(inter, d)
            shard[p + "mlp.up_proj.weight"] = w(inter, d)
            shard[p + "mlp.down_proj.weight"] = w(d, inter)
            shard[p + "input_layernorm.weight"] = np.ones(d, np.float32)
        groups.append(shard)
    rest = {"model.embed_tokens.weight": w(vocab, d), "model.norm.weight": np.ones(d, np.float32),
            "lm_head.weight": w(vocab, d)}
    if extra_shard:
        groups.append(rest)
    else:
        groups[0].update(rest)
    n = len(groups)
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    for k, shard in enumerate(groups, start=1):
        fname = f"model-{k:05d}-of-{n:05d}.safetensors"
        files[fname] = _st(shard)
        weight_map.update({name: fname for name in shard})
    total = sum(len(b) for b in files.values())
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}
    ).encode()
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": d,
              "num_attention_heads": n_heads, "num_key_value_heads": n_kv, "num_hidden_layers": n_layers,
              "intermediate_size": inter, "vocab_size": vocab}
    files["config.json"] = json.dumps(config).encode()
    files["README.md"] = b"# a tiny random llama for attnscope tests\n"
    return files


def single_file_repo(**kw: int) -> dict[str, bytes]:
    """The same kind of model as one ``model.safetensors`` (no index)."""
    files = llama_repo(layers_per_shard=10**6, extra_shard=False, **kw)
    (shard,) = [f for f in files if f.endswith(".safetensors")]
    files["model.safetensors"] = files.pop(shard)
    del files["model.safetensors.index.json"]
    return files


def qk_shards(files: dict[str, bytes]) -> set[str]:
    """The shards whose tensors include a q or k projection."""
    wmap = json.loads(files["model.safetensors.index.json"])["weight_map"]
    return {f for k, f in wmap.items() if k.endswith(("q_proj.weight", "k_proj.weight"))}


def qk_bytes(files: dict[str, bytes]) -> int:
    """Bytes of all q/k tensors (float32)."""
    from safetensors.numpy import load

    total = 0
    for name, blob in files.items():
        if name.endswith(".safetensors"):
            total += sum(a.nbytes for k, a in load(blob).items() if k.endswith(("q_proj.weight", "k_proj.weight")))
    return total


def neox_repo(seed: int = 0, n_layers: int = 2, d: int = 32, n_heads: int = 4, vocab: int = 64) -> dict[str, bytes]:
    """A tiny random GPT-NeoX (Pythia's layout: one fused query_key_value per layer) as transformers saves it:
    config.json and one model.safetensors."""
    import tempfile
    from pathlib import Path

    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(hidden_size=d, num_attention_heads=n_heads, num_hidden_layers=n_layers,
                        intermediate_size=2 * d, vocab_size=vocab, max_position_embeddings=64, rotary_pct=0.25)
    model = GPTNeoXForCausalLM(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        _word_tokenizer(vocab).save(str(Path(tmp) / "tokenizer.json"))
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}


def _word_tokenizer(vocab: int):  # noqa: ANN202 - a tokenizers.Tokenizer
    """A word-level tokenizer of ``vocab`` ids (``w0`` ... ; unknown words -> ``w0``), so the model can be run."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def checkpoint_suite(steps: list[int], builder=neox_repo) -> tuple[dict[str, str], dict[str, dict[str, bytes]]]:  # noqa: ANN001
    """Branches ``step<N>`` of one model at several training steps, Pythia-style: (branch -> commit sha,
    sha -> files). Each step's weights are another random draw (seed = its index)."""
    revisions, trees = {}, {}
    for i, step in enumerate(steps):
        sha = f"{i + 1:040x}"
        revisions[f"step{step}"] = sha
        trees[sha] = builder(seed=i)
    return revisions, trees
