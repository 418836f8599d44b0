"""Hostile GGUF and safetensors headers: one line and exit 2, quickly, under a memory limit; a header fuzz.

Each hostile file is a few hundred bytes written byte by byte here (independent of the readers under
test), differing from a valid file only by its lie. Every command runs in a subprocess under
``RLIMIT_AS`` (3 GiB: enough to import torch, far below what the lies ask for), so a regression that
sizes an allocation by a claim fails as a MemoryError instead of swapping the machine.
"""

from __future__ import annotations

import json
import resource
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ._helpers import assert_one_line_error

LIMIT = 3 << 30  # bytes of address space for each subprocess
FUZZ = Path(__file__).with_name("_header_fuzz.py")

# ------------------------------------------------------------------------------------ raw GGUF bytes

U8, U32, STR, ARR, F32_TYPE = 0, 4, 8, 9, 0


def _s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", U32, value)


def kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", STR) + _s(value)


def tensor_info(name: str, dims: tuple[int, ...], offset: int, ggml_type: int = F32_TYPE) -> bytes:
    return _s(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)


BASE_KV = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1),
           kv_u32("llama.embedding_length", 8), kv_u32("llama.attention.head_count", 2)]


def gguf_bytes(kvs=None, tensors=None, *, n_kv=None, n_tensors=None, data=None, pad_to=0) -> bytes:
    """A GGUF v3 file: the header, padding to 32 bytes, the data; counts as given or as true."""
    kvs = BASE_KV if kvs is None else kvs
    if tensors is None:  # q and k of one layer, 8 x 8 float32 each
        tensors = [tensor_info("blk.0.attn_q.weight", (8, 8), 0), tensor_info("blk.0.attn_k.weight", (8, 8), 256)]
        data = np.arange(128, dtype=np.float32).tobytes() if data is None else data
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(tensors)
    head += b"\0" * (-len(head) % 32)
    out = head + (data or b"")
    return out + b"\0" * max(0, pad_to - len(out))


HOSTILE = {  # name -> (file bytes, a word the one-line error holds)
    "array of 2^40 uint8 in 4 KB": (gguf_bytes(BASE_KV + [_s("tokenizer.ggml.token_type")
                                                         + struct.pack("<IIQ", ARR, U8, 2**40)], pad_to=4096),
                                    "tokenizer.ggml.token_type"),
    "1.5 million key/value fields claimed": (gguf_bytes(n_kv=1_500_000), "metadata keys"),
    "string length 2^63": (gguf_bytes(BASE_KV + [_s("general.name") + struct.pack("<IQ", STR, 2**63)]),
                           "general.name"),
    "key length 2^63": (gguf_bytes(BASE_KV + [struct.pack("<Q", 2**63) + b"x" * 32]), "metadata key 4"),
    "tensor offset past the end": (gguf_bytes(tensors=[tensor_info("blk.0.attn_q.weight", (8, 8), 2**40)]),
                                   "blk.0.attn_q.weight"),
    "n_dims 2^31": (gguf_bytes(tensors=[_s("blk.0.attn_q.weight") + struct.pack("<I", 2**31)]), "dims"),
}

MORE_HOSTILE = {
    "tensor count 2^40": (gguf_bytes(n_tensors=2**40), "tensors"),
    "dims whose product is 2^64": (gguf_bytes(tensors=[tensor_info("blk.0.attn_q.weight", (2**32, 2**32), 0)]),
                                   "blk.0.attn_q.weight"),
    "65537 real one-byte fields": (gguf_bytes(BASE_KV + [_s(f"k{i}") + struct.pack("<IB", U8, 1) for i in range(65537)]),
                                   "metadata keys"),
    "string array with one length past the end": (
        gguf_bytes(BASE_KV + [_s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 3) + _s("a") + _s("b")
                              + struct.pack("<Q", 2**62)]), "tokenizer.ggml.tokens"),
    "alignment 3": (gguf_bytes(BASE_KV + [kv_u32("general.alignment", 3)]), "alignment"),
    "alignment as a string": (gguf_bytes(BASE_KV + [kv_str("general.alignment", "32")]), "alignment"),
    "unknown value type": (gguf_bytes(BASE_KV + [_s("x") + struct.pack("<I", 99)]), "unknown value type"),
    "an array of arrays": (gguf_bytes(BASE_KV + [_s("x") + struct.pack("<I", ARR) + struct.pack("<IQ", ARR, 1)
                                                 + struct.pack("<IQB", U8, 1, 1)]), "array of arrays"),
    "unknown ggml type": (gguf_bytes(tensors=[tensor_info("blk.0.attn_q.weight", (8, 8), 0, ggml_type=999)]),
                          "ggml type"),
    "misaligned tensor offset": (gguf_bytes(tensors=[tensor_info("blk.0.attn_q.weight", (8, 8), 4)],
                                            data=b"\0" * 512), "multiple of the alignment"),
    "overlapping tensors": (gguf_bytes(tensors=[tensor_info("blk.0.attn_q.weight", (8, 8), 0),
                                                tensor_info("blk.0.attn_k.weight", (8, 8), 128)],
                                       data=b"\0" * 512), "overlap"),
    "a tensor named twice": (gguf_bytes(tensors=[tensor_info("blk.0.attn_q.weight", (8, 8), 0),
                                                 tensor_info("blk.0.attn_q.weight", (8, 8), 256)],
                                        data=b"\0" * 512), "twice"),
    "a key named twice": (gguf_bytes(BASE_KV + [kv_u32("llama.block_count", 1)]), "twice"),
    "Q8_0 rows not whole blocks": (gguf_bytes(tensors=[tensor_info("blk.0.attn_q.weight", (8, 8), 0, ggml_type=8)],
                                              data=b"\0" * 512), "blocks"),
    "5 dims": (gguf_bytes(tensors=[tensor_info("blk.0.attn_q.weight", (1, 1, 1, 1, 1), 0)], data=b"\0" * 64), "dims"),
}


def limited(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``python ARGS`` with at most :data:`LIMIT` bytes of address space (the hang guard is ``timeout``)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, preexec_fn=cap,
                          env={**_env(), "ATTNSCOPE_QUIET": "1", "OMP_NUM_THREADS": "1"})


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "ATTNSCOPE_DEBUG"}


def test_the_base_file_is_valid(tmp_path):
    """The hostile files differ from this one only by their lie: it opens, and its tensors read back."""
    from attnscope.sources import open_source

    path = tmp_path / "base.gguf"
    path.write_bytes(gguf_bytes())
    src = open_source(str(path))
    assert src.config["num_attention_heads"] == 2 and src.config["num_hidden_layers"] == 1
    np.testing.assert_array_equal(src.get_numpy("blk.0.attn_k.weight").ravel(), np.arange(64, 128, dtype=np.float32))


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_geometry_refuses_a_lying_gguf_in_one_line(tmp_path, case):
    data, needle = HOSTILE[case]
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    res = limited(["-m", "attnscope", "geometry", str(path), "--out", str(tmp_path / "out.csv")])
    line = assert_one_line_error(res, str(path), needle)
    assert "internal error" not in line and "MemoryError" not in res.stderr


def test_every_lie_is_a_format_error_under_a_memory_limit(tmp_path):
    """All cases through the API in one memory-limited process: FormatError, one line, naming the file."""
    cases = {**HOSTILE, **MORE_HOSTILE}
    for i, (case, (data, _)) in enumerate(sorted(cases.items())):
        (tmp_path / f"{i}.gguf").write_bytes(data)
    script = (
        "import json, sys\n"
        "from attnscope.errors import FormatError\n"
        "from attnscope.sources.gguf import GGUFSource\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        GGUFSource(p)\n"
        "        out[p] = None\n"
        "    except FormatError as exc:\n"
        "        out[p] = str(exc)\n"
        "print(json.dumps(out))\n"
    )
    paths = [str(tmp_path / f"{i}.gguf") for i in range(len(cases))]
    res = limited(["-c", script, *paths])
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout)
    for i, (case, (_, needle)) in enumerate(sorted(cases.items())):
        msg = got[paths[i]]
        assert msg is not None, f"{case}: accepted"
        assert "\n" not in msg and msg.startswith(paths[i]) and needle.lower() in msg.lower(), (case, msg)
        assert len(msg) < 400, (case, msg)


def test_heads_checks_the_header_before_transformers_reads_it(tmp_path):
    """The path that hands a GGUF file to transformers refuses the 2^40 array before transformers sees it."""
    from attnscope.heads.load import missing_gguf_runtime

    if missing_gguf_runtime():
        pytest.skip(f"transformers' GGUF loader needs {', '.join(missing_gguf_runtime())} (attnscope[gguf])")
    data, needle = HOSTILE["array of 2^40 uint8 in 4 KB"]
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    res = limited(["-m", "attnscope", "heads", str(path), "--windows", "1", "--length", "16"])
    assert_one_line_error(res, str(path), needle, "corrupt GGUF header")


def test_transformers_path_walks_the_whole_header(tmp_path, monkeypatch):
    """open_gguf refuses a lie inside the tokenizer's arrays (which GGUFSource skips) before loading."""
    from attnscope.errors import FormatError
    from attnscope.heads import load

    data, _ = MORE_HOSTILE["string array with one length past the end"]
    path = tmp_path / "vocab.gguf"
    path.write_bytes(data)
    monkeypatch.setattr(load, "missing_gguf_runtime", lambda: [])
    monkeypatch.setattr(load, "_load_gguf", lambda p: pytest.fail("transformers reached"))
    with pytest.raises(FormatError, match="tokenizer.ggml.tokens"):
        load.open_gguf(path)


# ------------------------------------------------------------------------------------ safetensors


def _safetensors_dir(root: Path, header: dict, data: bytes, length: int | None = None) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    raw = json.dumps(header).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return root


GOOD = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}

SAFETENSORS_LIES = {
    "header length 2^60": ({**GOOD}, 2**60, "header"),
    "header length past the end": ({**GOOD}, 5000, "header"),
    "offsets past the end": ({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 2**40]}}, None, "'a'"),
    "negative offset": ({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [-16, 0]}}, None, "'a'"),
    "end before begin": ({"a": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}}, None, "'a'"),
    "shape x dtype is not the span": ({"a": {"dtype": "F32", "shape": [2**31, 2**31], "data_offsets": [0, 16]}},
                                      None, "'a'"),
    "overlapping tensors": ({**GOOD, "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, None, "share"),
    "shape holds a string": ({"a": {"dtype": "F32", "shape": ["2", 2], "data_offsets": [0, 16]}}, None, "shape"),
}


@pytest.mark.parametrize("case", sorted(SAFETENSORS_LIES))
def test_a_lying_safetensors_header_is_one_line(tmp_path, case):
    from attnscope.errors import FormatError
    from attnscope.sources import open_source

    header, length, needle = SAFETENSORS_LIES[case]
    folder = _safetensors_dir(tmp_path / "m", header, b"\0" * 16, length)
    with pytest.raises(FormatError) as ei:
        src = open_source(str(folder))
        for name in src.keys():
            src.get(name)
    msg = str(ei.value)
    assert "\n" not in msg and str(folder / "model.safetensors") in msg and needle in msg, msg


def test_a_true_safetensors_header_passes(tmp_path):
    from attnscope.sources import open_source

    data = np.arange(4, dtype=np.float32).tobytes()
    src = open_source(str(_safetensors_dir(tmp_path / "m", GOOD, data)))
    np.testing.assert_array_equal(src.get("a").numpy(), np.arange(4, dtype=np.float32).reshape(2, 2))


def test_hub_headers_are_checked_without_a_file_size():
    from attnscope.errors import FormatError
    from attnscope.sources.safetensors_header import check_header, check_header_length

    assert check_header(GOOD, None, "repo: f") is GOOD
    for header, _, _ in (SAFETENSORS_LIES[c] for c in ("negative offset", "shape x dtype is not the span",
                                                        "overlapping tensors")):
        with pytest.raises(FormatError, match="repo: f"):
            check_header(header, None, "repo: f")
    with pytest.raises(FormatError, match="header"):
        check_header_length(2**60, None, "repo: f")


# ------------------------------------------------------------------------------------ fuzz


@pytest.mark.parametrize("kind", ["gguf", "safetensors"])
def test_header_fuzz(kind):
    """50 mutated headers of each kind: nothing but AttnscopeError, in a memory-limited process."""
    res = limited([str(FUZZ), kind, "50"])
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gguf", "safetensors"])
def test_header_fuzz_long(kind):
    res = limited([str(FUZZ), kind, "3000"], timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
