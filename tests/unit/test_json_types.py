"""The readers of JSON someone else wrote: a field of the wrong kind reads as absent."""

from __future__ import annotations

import pytest

from ovserve.json_types import JsonValue, json_int, json_list, json_object


@pytest.mark.parametrize(
    ("value", "expected"),
    [(336, 336), (336.0, 336), ("336", 336), (" -2 ", -2), (True, None), (1.5, None), ("3e2", None), ([1], None)],
)
def test_json_int_takes_integers_however_they_are_written(value: JsonValue, expected: int | None) -> None:
    assert json_int(value) == expected


def test_objects_and_lists_of_the_wrong_kind_read_as_empty() -> None:
    assert json_object({"a": 1}) == {"a": 1} and json_object([1]) == {} and json_object(None) == {}
    assert json_list([1, "a"]) == [1, "a"] and json_list({"a": 1}) == [] and json_list("ab") == []
