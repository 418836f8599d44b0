"""Fuzz loop for GGUF and safetensors headers, run as a script in a memory-limited subprocess.

``python _header_fuzz.py gguf|safetensors N`` writes a small valid file, then lets hypothesis mutate
its header N times (the numbers that are counts, lengths, types, dims and offsets; stray bytes; bytes
inserted or deleted anywhere before the data; cut files; for safetensors also the JSON entries) and
opens each mutant the way attnscope does, reading every tensor it accepts. Any exception other than an
AttnscopeError fails the run (non-zero exit, hypothesis prints the falsifying example), and so does a
GGUF mutant accepted with other numbers: every tensor it reads under a name and type of the valid file
must hold that tensor's values (a byte inserted before the data once shifted every tensor silently). The test (test_hostile_headers.py) sets RLIMIT_AS first,
so an allocation sized by a lie fails as MemoryError instead of swapping.
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnscope.errors import AttnscopeError

#: values a liar picks for a count, a length or an offset
SPECIAL = [0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 31, 32, 33, 64, 255, 256, 2**16, 2**31 - 1, 2**31, 2**32 - 1,
           2**32, 2**40, 2**62, 2**63, 2**64 - 1]


def write_gguf(path: Path) -> Path:
    """A small valid llama GGUF: scalars, a short array, a 50-token vocabulary with scores, F32/F16/Q8_0 tensors."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_embedding_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_name("fuzz-base")
    w.add_array("llama.some_short_array", [1, 2, 3])
    w.add_token_list([f"tok{i}" for i in range(50)])
    w.add_token_scores([float(i) for i in range(50)])
    rng = np.random.default_rng(0)
    w.add_tensor("blk.0.attn_q.weight", rng.normal(size=(32, 32)).astype(np.float32))
    w.add_tensor("blk.0.attn_k.weight", rng.normal(size=(16, 32)).astype(np.float16))
    q8 = gguf.GGMLQuantizationType.Q8_0
    w.add_tensor("blk.0.attn_v.weight", gguf.quants.quantize(rng.normal(size=(16, 32)).astype(np.float32), q8),
                 raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_slots(path: Path) -> tuple[list[tuple[int, int]], int]:
    """(offset, size) of every 4- or 8-byte integer of the header (counts, lengths, types, dims, offsets), and
    where the data starts, found with the gguf package's own reader on the valid file."""
    from gguf import GGUFReader

    r = GGUFReader(path)
    base = r.data.__array_interface__["data"][0]
    slots = set()
    records = [f.parts for f in r.fields.values()] + [t.field.parts for t in r.tensors]
    for parts in records:
        found = []
        for p in parts:
            at = p.__array_interface__["data"][0] - base
            if p.dtype.kind in "ui" and p.nbytes in (4, 8):
                found.append((at, p.nbytes))
            elif p.dtype.kind in "ui" and p.dtype.itemsize == 8:  # a tensor's dims
                found.extend((at + 8 * i, 8) for i in range(p.size))
        slots.update(found[:6])  # a vocabulary's first string lengths, not all 50
    return sorted(slots), int(r.data_offset)


def rarely(strategy, absent=None):
    """``strategy`` one time in four, else ``absent``: most examples keep the rest of the file valid."""
    return st.one_of(st.just(absent), st.just(absent), st.just(absent), strategy)


def open_gguf(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Open ``path`` as attnscope does; {tensor name: (ggml type, its values flattened)}."""
    from attnscope.sources.gguf import GGUFSource
    from attnscope.sources.gguf_header import read_gguf_header

    read_gguf_header(path, keep=lambda key: True)  # every value decoded
    read_gguf_header(path, keep=lambda key: False)  # every value skipped (the path before transformers)
    src = GGUFSource(path)
    values = {}
    for name in src.keys():
        arr = src.get_numpy(name)
        assert arr.dtype == np.float32
        values[name] = (src.tensor_type(name), arr.ravel())
    assert isinstance(src.config["num_attention_heads"], int)
    return values


def mutations(slots: list[tuple[int, int]], header_end: int):
    slot = st.tuples(st.sampled_from(slots), st.one_of(st.sampled_from(SPECIAL), st.integers(0, 2**64 - 1)))
    byte = st.tuples(st.integers(0, header_end - 1), st.integers(0, 255))
    # (where, bytes inserted there, bytes deleted there), anywhere up to the first bytes of the data
    splice = st.tuples(st.integers(0, header_end + 8), st.sampled_from([b"", b"\0", b"\1", b"\0" * 8, b"\xff" * 3]),
                       st.sampled_from([0, 0, 1, 4, 8]))
    return st.tuples(st.lists(slot, max_size=3), rarely(st.lists(byte, min_size=1, max_size=2), []),
                     rarely(st.integers(0, header_end + 64)), rarely(st.lists(splice, min_size=1, max_size=2), []))


def fuzz_gguf(n: int, root: Path) -> None:
    base = write_gguf(root / "base.gguf")
    data = base.read_bytes()
    slots, header_end = gguf_slots(base)
    target = root / "mutant.gguf"
    truth = open_gguf(base)

    @settings(max_examples=n, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(mutations(slots, header_end))
    def run(mut):
        slot_changes, byte_changes, cut, splices = mut
        buf = bytearray(data)
        for (at, size), value in slot_changes:
            buf[at:at + size] = (value % 2 ** (8 * size)).to_bytes(size, "little")
        for at, value in byte_changes:
            buf[at] = value
        for at, inserted, deleted in sorted(splices, reverse=True):  # from the back: the positions stay true
            buf[at:at + deleted] = inserted
        target.write_bytes(bytes(buf if cut is None else buf[:cut]))
        try:
            read = open_gguf(target)
        except AttnscopeError as exc:
            assert "\n" not in str(exc) and str(target) in str(exc), str(exc)
            return
        for name, (ggml_type, values) in read.items():  # accepted: the numbers are the file's own
            if name in truth and truth[name][0] == ggml_type:
                np.testing.assert_array_equal(values, truth[name][1], err_msg=f"{name} read with other numbers")

    run()


# ------------------------------------------------------------------------------------ safetensors


def write_safetensors_dir(root: Path) -> Path:
    from safetensors.numpy import save_file

    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"a": np.ones((4, 4), np.float32), "b": np.ones(3, np.float16), "c": np.arange(4).reshape(2, 2)},
              str(root / "model.safetensors"))
    return root


def _split(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


SMALL = st.integers(-2, 80) | st.sampled_from(SPECIAL)
JSON_VALUE = st.one_of(
    st.lists(SMALL, min_size=2, max_size=2),  # data_offsets-like
    st.lists(SMALL, max_size=3),  # shape-like
    st.sampled_from(["F32", "F16", "BF16", "I64", "U8", "F4", "C64", "XX", ""]),  # dtype-like
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
                 lambda inner: st.lists(inner, max_size=3), max_leaves=5),
)


def fuzz_safetensors(n: int, root: Path) -> None:
    from attnscope.sources import open_source

    folder = write_safetensors_dir(root / "model")
    path = folder / "model.safetensors"
    header, body = _split(path.read_bytes())
    names = sorted(k for k in header if k != "__metadata__")

    entry_change = st.tuples(st.sampled_from(names), st.sampled_from(["dtype", "shape", "data_offsets"]), JSON_VALUE)
    flips = rarely(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=2), [])
    length = rarely(st.sampled_from(SPECIAL) | st.integers(0, 2**64 - 1))

    @settings(max_examples=n, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(entry_change, max_size=3), length, flips, rarely(st.integers(0, 400)))
    def run(changes, new_length, byte_changes, cut):
        h = json.loads(json.dumps(header))
        for name, key, value in changes:
            h[name][key] = value
        raw = json.dumps(h).encode()
        raw += b" " * (-len(raw) % 8)
        buf = bytearray(struct.pack("<Q", len(raw) if new_length is None else new_length % 2**64) + raw + body)
        for at, value in byte_changes:
            if at < len(buf):
                buf[at] = value
        path.write_bytes(bytes(buf if cut is None else buf[:cut]))
        try:
            src = open_source(str(folder))
            for name in src.keys():
                src.get(name)
        except AttnscopeError as exc:
            assert "\n" not in str(exc), str(exc)

    run()


if __name__ == "__main__":
    kind, count = sys.argv[1], int(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        {"gguf": fuzz_gguf, "safetensors": fuzz_safetensors}[kind](count, Path(tmp))
    print(f"{kind}: {count} examples, no exception but AttnscopeError")
