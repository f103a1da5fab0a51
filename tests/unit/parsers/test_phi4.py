from __future__ import annotations

from ovserve.parsers import phi4
from tests.unit.parsers.helpers import assert_same_everywhere

FMT = phi4.FORMAT


def test_one_call() -> None:
    text = 'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    assert_same_everywhere(FMT, text, "", [("get_weather", {"city": "Paris"})])


def test_two_calls() -> None:
    text = 'functools[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"k": [1, 2]}}]'
    assert_same_everywhere(FMT, text, "", [("a", {}), ("b", {"k": [1, 2]})])


def test_malformed_falls_back_to_content() -> None:
    text = 'functools[{"name": "a", "arguments": {]'
    assert_same_everywhere(FMT, text, text, [])
