"""Arguments written as text (XML-style formats): typed by their property schema."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from ovserve.core.guided import schema_regex
from ovserve.errors import BadRequestError
from ovserve.parsers.schemas import property_schema, schema_arguments, text_value_regex, typed_value

SCHEMA_REGEX = functools.partial(schema_regex, param="tools")


@pytest.mark.parametrize(
    ("text", "schema", "value"),
    [
        ("Paris", {"type": "string"}, "Paris"),
        ("123", {"type": "string"}, "123"),
        ("null", {"type": "string"}, "null"),
        (" two words \n", {"type": "string"}, " two words \n"),
        ("None", {"type": ["string", "null"]}, None),
        ("null", {"anyOf": [{"type": "string"}, {"type": "null"}]}, None),
        ("42", {"type": ["integer", "string"]}, 42),
        ("abc", {"type": ["integer", "string"]}, "abc"),
        ("celsius", {"enum": ["celsius", "fahrenheit"]}, "celsius"),
        ("5", {"type": "integer"}, 5),
        (" 5 ", {"type": "integer"}, 5),
        ("five", {"type": "integer"}, "five"),
        ("2.5", {"type": "number"}, 2.5),
        ("NaN", {"type": "number"}, "NaN"),
        ("true", {"type": "boolean"}, True),
        ("True", {"type": "boolean"}, True),
        ("FALSE", {"type": "boolean"}, False),
        ("None", {"type": "null"}, None),
        ('{"a": [1, "x"]}', {"type": "object"}, {"a": [1, "x"]}),
        ("{'a': True}", {"type": "object"}, {"a": True}),
        ("[1, 2]", {"type": "array"}, [1, 2]),
        ("{oops", {"type": "object"}, "{oops"),
        ("12", None, 12),
        ("hello", None, "hello"),
        ("hello", {}, "hello"),
        ('{"k": 1}', {"description": "anything"}, {"k": 1}),
        ("Infinity", None, "Infinity"),
    ],
)
def test_typed_value(text: str, schema: Any, value: Any) -> None:
    assert typed_value(text, schema) == value
    assert type(typed_value(text, schema)) is type(value)


def test_property_schema_of_unknown_tools_and_arguments_is_none() -> None:
    tools = {"f": {"type": "object", "properties": {"x": {"type": "integer"}}}, "g": {}}
    assert property_schema(tools, "f", "x") == {"type": "integer"}
    assert property_schema(tools, "f", "y") is None
    assert property_schema(tools, "g", "x") is None
    assert property_schema(tools, "h", "x") is None


def test_schema_arguments_keep_order_required_and_definitions() -> None:
    parameters = {
        "type": "object",
        "properties": {"b": {"$ref": "#/$defs/unit"}, "a": {"type": "integer"}},
        "required": ["a"],
        "$defs": {"unit": {"enum": ["c", "f"]}},
    }
    assert schema_arguments(parameters) == [
        ("b", {"$defs": {"unit": {"enum": ["c", "f"]}}, "$ref": "#/$defs/unit"}, False),
        ("a", {"$defs": {"unit": {"enum": ["c", "f"]}}, "type": "integer"}, True),
    ]
    assert schema_arguments({"type": "object"}) == []


@pytest.mark.parametrize(
    ("schema", "accepted", "rejected"),
    [
        ({"type": "string"}, ["", "multi\nline \"text\" & 'quotes'"], ["a<b"]),
        ({"type": "string", "enum": ["c", "f(x)"]}, ["c", "f(x)"], ["fx", "d"]),
        ({"type": "string", "const": "only"}, ["only"], ["other"]),
        ({"type": "string", "maxLength": 3}, ["abc", ""], ["abcd"]),
        ({"type": "string", "minLength": 2}, ["ab", "abcdef"], ["a"]),
        ({"type": "string", "pattern": "^[a-z]+$"}, ["abc"], ["ABC", ""]),
        ({"type": "string", "format": "date"}, ["2025-01-31"], ["31.01.2025"]),
        ({"type": ["string", "null"]}, ["null", "text"], ["<"]),
        ({"type": "integer"}, ["-3", "0"], ["3.5", "three"]),
        ({"type": "object", "properties": {"a": {"type": "boolean"}}}, ['{"a":true}', "{}"], ['{"a": 1}']),
    ],
)
def test_text_value_regex(schema: Any, accepted: list[str], rejected: list[str]) -> None:
    pattern = re.compile(text_value_regex(schema, SCHEMA_REGEX))
    for text in accepted:
        assert pattern.fullmatch(text), text
        if schema.get("type") == "string":
            assert typed_value(text, schema) == text
    for text in rejected:
        assert not pattern.fullmatch(text), text


def test_text_value_regex_refuses_what_the_grammar_cannot_enforce() -> None:
    with pytest.raises(BadRequestError, match="multipleOf"):
        text_value_regex({"type": "integer", "multipleOf": 2}, SCHEMA_REGEX)
