"""The argparse value types ``ovserve export`` and ``ovserve parse`` share: a refused value's
message says what the flag takes and what was given, the same way for both tools."""

from __future__ import annotations

import argparse

import pytest

from ovserve.cli_types import int_at_least


@pytest.mark.parametrize(
    ("minimum", "text", "message"),
    [
        (0, "-1", "expected a non-negative integer, got -1"),
        (0, "ten", "expected a non-negative integer, got 'ten'"),
        (1, "0", "expected a positive integer, got 0"),
        (1, "1.5", "expected a positive integer, got '1.5'"),
        (3, "2", "expected an integer of at least 3, got 2"),
    ],
)
def test_a_refused_number_says_what_the_flag_takes(minimum: int, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message}$"):
        int_at_least(minimum)(text)


@pytest.mark.parametrize(("minimum", "text", "value"), [(0, "0", 0), (1, "1", 1), (1, " 42 ", 42)])
def test_a_number_at_the_minimum_or_above_is_taken(minimum: int, text: str, value: int) -> None:
    assert int_at_least(minimum)(text) == value
