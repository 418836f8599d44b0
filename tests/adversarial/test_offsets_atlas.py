"""Hostile use of today's position-aware geometry and atlas: wrong types name their parameter, the
CLI names its flag, and an atlas that stops half-way never leaves a mix of old and new files."""

from __future__ import annotations

import numpy as np
import pytest

from attnscope.errors import ArgumentTypeError, InputError
from attnscope.geometry import check_offsets, parse_offsets

from ._helpers import assert_one_line_error, cli


@pytest.mark.parametrize("bad", [5, 2.0, None, {0: 1, 16: 2}])
def test_offsets_that_are_not_a_list_name_the_parameter(bad):
    with pytest.raises(ArgumentTypeError, match=r"^offsets must be a list of integers") as err:
        check_offsets(bad)
    assert isinstance(err.value, TypeError) and err.value.params == ("offsets",)


def test_offsets_accepts_arrays_and_generators():
    assert check_offsets(np.array([0, 16])) == [0, 16]
    assert check_offsets(o for o in (0, 1)) == [0, 1]


@pytest.mark.parametrize("bad", [5, [0, 1], None])
def test_parse_offsets_of_a_non_string_is_a_type_error(bad):
    with pytest.raises(ArgumentTypeError, match=r"^spec must be a string"):
        parse_offsets(bad)


@pytest.mark.parametrize("bad", [[0, 0], [1.5]])
def test_offset_value_errors_carry_the_parameter(bad):
    with pytest.raises(InputError) as err:
        check_offsets(bad)
    assert err.value.params == ("offsets",)


def test_cli_repeated_offsets_names_the_flag(tmp_path):
    res = cli("geometry", "score", "--demo", "--offsets", "1,1", "--out", tmp_path / "o.csv")
    assert_one_line_error(res, "--offsets repeats 1")
    assert not (tmp_path / "o.csv").exists()
