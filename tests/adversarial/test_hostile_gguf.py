"""GGUF files whose tensor table does not match their bytes, and configs with absurd sizes: one line each.

Once a dim of 0 next to a huge one was an internal error (``np.zeros`` in the GGUF source), and a byte
inserted before the data shifted every tensor with only a non-finite warning after; a config.json with
``vocab_size: 1e12`` gave transformers' "look at the above report" with no report.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from attnscope.errors import FormatError
from attnscope.sources.gguf_header import read_gguf_header

from ._helpers import assert_one_line_error, cli
from .test_hostile_headers import gguf_bytes, tensor_info

Q, K = "blk.0.attn_q.weight", "blk.0.attn_k.weight"


def _header_end() -> int:
    """Where the base file's header (before its padding) ends."""
    full = gguf_bytes()
    return len(full) - 512 - _padding()


def _padding() -> int:
    raw = gguf_bytes(data=b"")
    return len(raw) - len(raw.rstrip(b"\0"))


def _refused(tmp_path, raw: bytes, *needles: str) -> str:
    path = tmp_path / "m.gguf"
    path.write_bytes(raw)
    with pytest.raises(FormatError) as err:
        read_gguf_header(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text
    for n in needles:
        assert n in text, text
    return text


def test_the_base_file_is_read_exactly():
    assert _padding() > 0  # so that the cases below cut or grow real padding


@pytest.mark.parametrize("dims", [(0, 2**40), (2**40, 0), (0,), (8, 0, 8)])
def test_a_zero_dim_is_one_line(tmp_path, dims):
    raw = gguf_bytes(tensors=[tensor_info(Q, dims, 0), tensor_info(K, (8, 8), 0)], data=b"\0" * 256)
    _refused(tmp_path, raw, Q, "each must be from 1 to 2^63 - 1")


def test_a_zero_dim_is_one_line_from_the_cli(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(tensors=[tensor_info(Q, (0, 2**40), 0), tensor_info(K, (8, 8), 0)],
                                data=b"\0" * 256))
    assert_one_line_error(cli("geometry", path), Q, "dims")


def test_a_dim_past_int64_is_one_line(tmp_path):
    _refused(tmp_path, gguf_bytes(tensors=[tensor_info(Q, (2**63, 1), 0)]), Q, "2^63")


@pytest.mark.parametrize("inserted", [b"\1", b"\0", b"\0" * 32, b"\0" * 33])
def test_a_byte_inserted_before_the_data_is_refused(tmp_path, inserted):
    raw = gguf_bytes()
    at = len(raw) - 512  # the data's start: everything after it shifts
    _refused(tmp_path, raw[:at] + inserted + raw[at:], "bytes")


@pytest.mark.parametrize("where", ["padding", "data"])
def test_a_byte_deleted_before_the_data_is_refused(tmp_path, where):
    raw = gguf_bytes()
    at = len(raw) - 512 - (1 if where == "padding" else 0)
    _refused(tmp_path, raw[:at] + raw[at + 1:], "GGUF")


def test_bytes_appended_are_refused_naming_how_many(tmp_path):
    _refused(tmp_path, gguf_bytes() + b"\0" * 64, "64 bytes more than its table says")


def test_a_gap_between_tensors_is_refused_naming_it(tmp_path):
    raw = gguf_bytes(tensors=[tensor_info(Q, (8, 8), 0), tensor_info(K, (8, 8), 288)], data=b"\0" * 544)
    _refused(tmp_path, raw, K, "a gap of 32 bytes")


def test_a_first_tensor_after_the_data_start_is_refused(tmp_path):
    raw = gguf_bytes(tensors=[tensor_info(Q, (8, 8), 32), tensor_info(K, (8, 8), 288)], data=b"\0" * 544)
    _refused(tmp_path, raw, Q, "a gap of")


def test_padding_that_is_not_zero_is_refused(tmp_path):
    raw = bytearray(gguf_bytes())
    raw[len(raw) - 512 - 1] = 7  # the last byte of the header's padding
    _refused(tmp_path, bytes(raw), "is not zero")


def test_a_last_tensor_without_its_padding_is_read(tmp_path):
    """Writers pad each tensor's data to the alignment; a file that ends right after its last tensor is whole."""
    data = np.arange(64 + 20, dtype=np.float32).tobytes()  # q 8x8, then k 4x5 (80 bytes, 16 short of padded)
    raw = gguf_bytes(tensors=[tensor_info(Q, (8, 8), 0), tensor_info(K, (4, 5), 256)], data=data)
    path = tmp_path / "m.gguf"
    path.write_bytes(raw)
    assert read_gguf_header(path).tensors[K].n_bytes == 80
    path.write_bytes(raw + b"\0" * 16)  # and padded
    assert read_gguf_header(path).tensors[K].n_bytes == 80
    path.write_bytes(raw + b"\0" * 15 + b"\1")
    with pytest.raises(FormatError, match="is not zero"):
        read_gguf_header(path)
    path.write_bytes(raw + b"\0" * 17)
    with pytest.raises(FormatError, match="1 bytes more"):
        read_gguf_header(path)


# -------------------------------------------------------------------------------- configs with absurd sizes


@pytest.fixture
def minilm_copy(tmp_path):
    """A copy of the shipped all-MiniLM-L6-v2 folder whose config.json a test may edit."""
    import shutil

    from attnscope.zoo import select

    src = select("offline-demo")[0].spec
    if not os.path.isdir(str(src)):
        pytest.skip("the offline demo model is not installed")
    dst = tmp_path / "model"
    shutil.copytree(str(src), dst)
    return dst


def _set(folder, **values):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("value", [1e12, 10**12, 384.5, float("nan")], ids=["1e12", "10^12", "half", "nan"])
def test_an_absurd_config_size_is_one_line_naming_the_field(minilm_copy, value):
    from attnscope.sources.hf import HFDirectorySource

    _set(minilm_copy, vocab_size=value)
    with pytest.raises(FormatError, match=r"config.json: vocab_size is .*a size is a whole number"):
        HFDirectorySource.open(str(minilm_copy))


def test_an_absurd_nested_config_size_is_refused(minilm_copy):
    from attnscope.sources.hf import HFDirectorySource

    _set(minilm_copy, text_config={"hidden_size": 2**40})
    with pytest.raises(FormatError, match=r"text_config.hidden_size is 1099511627776"):
        HFDirectorySource.open(str(minilm_copy))


def test_heads_with_vocab_size_1e12_is_one_line(minilm_copy):
    _set(minilm_copy, vocab_size=1e12)
    assert_one_line_error(cli("heads", minilm_copy, "--windows", "1", "--length", "16"), "vocab_size is 1000000000000.0")


@pytest.mark.slow
def test_heads_with_a_config_that_does_not_fit_the_weights_says_so(minilm_copy):
    _set(minilm_copy, vocab_size=30523)  # the weights hold 30522 rows: transformers' "see the above report"
    assert_one_line_error(cli("heads", minilm_copy, "--windows", "1", "--length", "16"),
                          "config.json does not fit the weights", "vocab_size")
