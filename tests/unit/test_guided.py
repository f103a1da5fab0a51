"""JSON-schema keywords are enforced by the grammar or refused with a 400, never silently dropped."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from outlines_core.json_schema import build_regex_from_schema

from ovserve.core.guided import UNENFORCED_KEYWORDS, integer_range_regex, schema_regex
from ovserve.errors import BadRequestError

PARAM = "response_format.json_schema.schema"
INTEGERS = {"type": "array", "items": {"type": "integer"}}
OBJECT = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}

# Each refused keyword, with a schema it belongs in and a value that should constrain the output.
REFUSED: dict[str, tuple[dict[str, Any], Any]] = {
    "multipleOf": ({"type": "integer"}, 3),
    "uniqueItems": (INTEGERS, True),
    "contains": (INTEGERS, {"const": 1}),
    "minContains": (INTEGERS, 2),
    "maxContains": (INTEGERS, 1),
    "minProperties": (OBJECT, 1),
    "maxProperties": (OBJECT, 1),
    "patternProperties": (OBJECT, {"^x": {"type": "string"}}),
    "propertyNames": (OBJECT, {"pattern": "^a$"}),
    "dependentRequired": (OBJECT, {"a": ["b"]}),
    "dependentSchemas": (OBJECT, {"a": {"required": ["b"]}}),
    "dependencies": (OBJECT, {"a": ["b"]}),
    "unevaluatedItems": ({"type": "array", "prefixItems": [{"type": "integer"}]}, {"type": "string"}),
    "unevaluatedProperties": ({"type": "object"}, False),
    "not": ({"type": "integer"}, {"const": 1}),
    "if": ({"type": "integer"}, {"const": 1}),
    "then": ({"type": "integer"}, {"const": 1}),
    "else": ({"type": "integer"}, {"const": 1}),
}


def outlines_regex(schema: dict[str, Any]) -> str:
    return str(build_regex_from_schema(json.dumps(schema), whitespace_pattern=""))


def refusal(schema: dict[str, Any]) -> str:
    with pytest.raises(BadRequestError) as caught:
        schema_regex(schema, param=PARAM)
    assert caught.value.param == PARAM
    return caught.value.message


def test_the_refused_list_is_exactly_the_keywords_tested_here() -> None:
    assert set(REFUSED) == UNENFORCED_KEYWORDS


@pytest.mark.parametrize("keyword", sorted(REFUSED))
def test_outlines_core_still_ignores_each_refused_keyword(keyword: str) -> None:
    # If this fails, outlines-core learnt the keyword: stop refusing it.
    base, value = REFUSED[keyword]
    assert outlines_regex({**base, keyword: value}) == outlines_regex(base)


@pytest.mark.parametrize("keyword", sorted(REFUSED))
def test_each_unenforced_keyword_is_refused_with_its_pointer(keyword: str) -> None:
    base, value = REFUSED[keyword]
    message = refusal({"type": "object", "properties": {"x": {**base, keyword: value}}})
    assert f"'{keyword}' at /properties/x/{keyword}" in message
    assert "cannot be enforced" in message


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"type": "number", "minimum": 0, "maximum": 1}, "minimum"),
        ({"type": "number", "exclusiveMaximum": 1}, "exclusiveMaximum"),
        ({"allOf": [{"type": "integer"}, {"const": 3}]}, "allOf"),
        ({"anyOf": [{"type": "integer"}], "type": "string"}, "type"),
        ({"type": "string", "pattern": "^a+$", "minLength": 5}, "pattern"),
        ({"type": "string", "format": "date", "maxLength": 5}, "format"),
    ],
)
def test_bounds_and_combinations_outlines_core_drops_are_refused(schema: dict[str, Any], keyword: str) -> None:
    assert f"'{keyword}' at /{keyword}" in refusal(schema)


def test_outlines_core_drops_the_refused_combinations() -> None:
    # The evidence behind the combination rules in guided._prepare.
    assert outlines_regex({"type": "number", "maximum": 1}) == outlines_regex({"type": "number"})
    assert outlines_regex({"anyOf": [{"type": "integer"}], "type": "string"}) == outlines_regex(
        {"anyOf": [{"type": "integer"}]}
    )
    assert outlines_regex({"type": "string", "pattern": "a", "minLength": 5}) == outlines_regex(
        {"type": "string", "minLength": 5}
    )
    assert re.fullmatch(outlines_regex({"allOf": [{"type": "integer"}, {"const": 3}]}), "33")


@pytest.mark.parametrize(
    ("low", "high"),
    [(0, 9), (5, 123), (-50, 7), (-9, -3), (None, 5), (3, None), (None, None), (-20, None), (100, 100), (99, 1001)],
)
def test_integer_range_regex_matches_exactly_the_range(low: int | None, high: int | None) -> None:
    pattern = re.compile(integer_range_regex(low, high))
    for n in range(-1200, 1200):
        inside = (low is None or n >= low) and (high is None or n <= high)
        assert bool(pattern.fullmatch(str(n))) == inside, n
    assert not pattern.fullmatch("-0") and not pattern.fullmatch("007")


def test_integer_bounds_are_enforced_inside_an_object() -> None:
    schema = {
        "type": "object",
        "properties": {"digit": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["digit"],
    }
    pattern = re.compile(schema_regex(schema, param=PARAM))
    assert all(pattern.fullmatch(f'{{"digit":{n}}}') for n in range(10))
    for outside in ("10", "-1", "123456789012345678901234567890"):
        assert not pattern.fullmatch(f'{{"digit":{outside}}}')


@pytest.mark.parametrize(
    ("schema", "inside", "outside"),
    [
        ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 5}, ["1", "4"], ["0", "5"]),
        ({"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 3}, ["1", "3"], ["0", "4"]),
        ({"type": "integer", "minimum": 1.5, "maximum": 3.5}, ["2", "3"], ["1", "4"]),
        ({"type": ["integer", "null"], "minimum": 1}, ["1", "null", "99"], ["0", "-3"]),
    ],
)
def test_integer_bound_spellings_are_enforced(schema: dict[str, Any], inside: list[str], outside: list[str]) -> None:
    pattern = re.compile(schema_regex(schema, param=PARAM))
    assert all(pattern.fullmatch(text) for text in inside)
    assert not any(pattern.fullmatch(text) for text in outside)


def test_empty_integer_range_is_a_400() -> None:
    with pytest.raises(BadRequestError, match="no integer"):
        schema_regex({"type": "integer", "minimum": 5, "maximum": 4}, param=PARAM)


def test_annotations_and_enforced_keywords_compile() -> None:
    schema = {
        "title": "t",
        "description": "d",
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 5, "default": "x", "examples": ["a"]},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2, "uniqueItems": False},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    assert re.fullmatch(schema_regex(schema, param=PARAM), '{"name":"ab","tags":["a"]}')
