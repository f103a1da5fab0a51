from __future__ import annotations

from ovserve.parsers import llama3
from tests.unit.parsers.helpers import assert_same_everywhere

FMT = llama3.FORMAT


def test_bare_json_call() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert_same_everywhere(FMT, text, "", [("get_weather", {"city": "Paris"})])


def test_python_tag_and_two_calls() -> None:
    text = '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}'
    assert_same_everywhere(FMT, text, "", [("a", {"x": 1}), ("b", {})])


def test_json_after_prose_is_content() -> None:
    text = 'Here is JSON: {"name": "a", "parameters": {}}'
    assert_same_everywhere(FMT, text, text, [])


def test_malformed_falls_back_to_content() -> None:
    text = '{"name": "a", "parameters": {"x": }'
    assert_same_everywhere(FMT, text, text, [])
