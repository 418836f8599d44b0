"""The GGUF header walk against the gguf package's own reader: same metadata, same tensor index, on real files.

The reference is ``gguf.GGUFReader`` (which materialises the whole header): every value the walk keeps
equals the reader's, every value it skips is a tokenizer key or a long array, and every tensor record
(type, shape, absolute offset, byte size) is the same, on files written by the gguf package (both byte
orders), the tiny llama of the offline demo and the offline real models where installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from attnscope.errors import FormatError, InputError
from attnscope.sources.gguf_header import KEEP_ARRAY, read_gguf_header

sys.path.insert(0, str(Path(__file__).parents[1] / "adversarial"))
from _header_fuzz import write_gguf  # noqa: E402


def assert_same_as_gguf_reader(path: Path) -> None:
    from gguf import GGUFReader

    ours = read_gguf_header(path)
    ref = GGUFReader(path)
    assert (ours.data_offset, ours.alignment) == (ref.data_offset, ref.alignment)
    assert list(ours.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert (mine.ggml_type, mine.shape, mine.offset, mine.n_bytes) == (
            int(t.tensor_type), tuple(int(x) for x in t.shape), int(t.data_offset), int(t.n_bytes)), t.name
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert set(ours.metadata) | ours.skipped == set(fields)
    for key, value in ours.metadata.items():
        assert value == fields[key].contents(), key
    for key in ours.skipped:
        assert key.startswith("tokenizer.") or len(fields[key].data) > KEEP_ARRAY, key
    everything = read_gguf_header(path, keep=lambda key: True)
    assert everything.tensors == ours.tensors
    for key, value in everything.metadata.items():
        assert value == fields[key].contents(), key


def test_written_files_both_byte_orders(tmp_path):
    path = write_gguf(tmp_path / "little.gguf")
    assert_same_as_gguf_reader(path)
    big = tmp_path / "big.gguf"
    _write_big_endian(big)
    assert_same_as_gguf_reader(big)
    assert read_gguf_header(big).metadata["llama.block_count"] == 3


def _write_big_endian(path: Path) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_block_count(3)
    w.add_array("llama.short", [1.5, 2.5])
    w.add_token_list(["a", "bb", "ccc"])
    w.add_tensor("blk.0.attn_q.weight", np.arange(64, dtype=">f4").reshape(8, 8), raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_tiny_llama_of_the_offline_demo(tinycoder_gguf):
    assert_same_as_gguf_reader(tinycoder_gguf)


@pytest.mark.slow  # the reference reader materialises each vocabulary (10-50 s on a loaded machine)
@pytest.mark.parametrize("model_id", ["HuggingFaceTB/SmolLM2-135M-Instruct", "google/gemma-3-270m",
                                      "Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ"])
def test_offline_real_models(model_id):
    from attnscope.zoo.registry import get_entry, resolve_source

    e = get_entry(model_id)
    if e is None:
        pytest.skip(f"{model_id} is not in the zoo registry")
    try:
        path = resolve_source(e.source, entry_id=e.id, parts=e.parts, with_files=e.with_files, sha256=e.sha256)
    except InputError as exc:  # names the missing package and its pip command
        pytest.skip(str(exc))
    assert_same_as_gguf_reader(Path(path))


def test_tokenizer_arrays_are_skipped_but_checked(tmp_path):
    """The vocabulary is not kept, yet a lie inside it (a string running past the end) is refused."""
    path = write_gguf(tmp_path / "base.gguf")
    head = read_gguf_header(path)
    assert "tokenizer.ggml.tokens" in head.skipped and "tokenizer.ggml.tokens" not in head.metadata
    assert head.metadata["llama.some_short_array"] == [1, 2, 3]
    data = bytearray(path.read_bytes())
    at = data.index(b"tok7") - 8  # the length of the 8th token
    data[at:at + 8] = (2**40).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="tokenizer.ggml.tokens"):
        read_gguf_header(path)


def test_long_strings_and_arrays_are_skipped(tmp_path):
    import gguf

    path = tmp_path / "long.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.description", "x" * 70_000)
    w.add_array("llama.long", list(range(KEEP_ARRAY + 1)))
    w.add_array("llama.short", list(range(KEEP_ARRAY)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    head = read_gguf_header(path)
    assert {"general.description", "llama.long"} <= head.skipped
    assert head.metadata["llama.short"] == list(range(KEEP_ARRAY))
    assert head.tensors == {}


def test_unreadable_path_is_one_line(tmp_path):
    with pytest.raises(FormatError) as ei:
        read_gguf_header(tmp_path)  # a directory
    assert str(tmp_path) in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("chunk", [9, 16, 64, 1000])
def test_reads_across_buffer_refills(tmp_path, monkeypatch, chunk):
    """The cursor's buffer refilled every few bytes (mid-length, mid-string) gives the same header."""
    from attnscope.sources import gguf_header

    path = write_gguf(tmp_path / "base.gguf")
    monkeypatch.setattr(gguf_header, "_CHUNK", chunk)
    assert_same_as_gguf_reader(path)
