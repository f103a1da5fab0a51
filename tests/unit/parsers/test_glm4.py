"""GLM-4.5 / 4.6 / 4.7 key/value tool calls, through the conformance oracle (whole and streamed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from ovserve.parsers.base import ToolCallFormat
from tests.unit.parsers.conformance import assert_parses

GLM45 = TOOL_PARSERS["glm45"]
GLM47 = TOOL_PARSERS["glm47"]
THINK = REASONING_PARSERS["qwen3"]
TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
        "required": ["city"],
    },
    "search": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "filters": {"type": "object"}, "tags": {"type": "array"}},
    },
    "ping": {"type": "object", "properties": {}},
}


def glm45(name: str, **arguments: str) -> str:
    """A call as the GLM-4.5 template writes it (values already as text)."""
    pairs = "".join(f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n" for key, value in arguments.items())
    return f"<tool_call>{name}\n{pairs}</tool_call>"


def glm47(name: str, **arguments: str) -> str:
    """A call as the GLM-4.7 template writes it: no newlines."""
    pairs = "".join(f"<arg_key>{key}</arg_key><arg_value>{value}</arg_value>" for key, value in arguments.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


LAYOUTS = pytest.mark.parametrize(("fmt", "write"), [(GLM45, glm45), (GLM47, glm47)], ids=["glm45", "glm47"])


def test_glm4_is_the_glm45_layout() -> None:
    assert TOOL_PARSERS["glm4"] is GLM45


@LAYOUTS
def test_single_call_types_values_by_the_schema(fmt: ToolCallFormat, write: Callable[..., str]) -> None:
    text = write("get_weather", city="Paris", days="3", metric="false")
    assert_parses(
        text,
        calls=[("get_weather", {"city": "Paris", "days": 3, "metric": False})],
        tool_format=fmt,
        tools=TOOLS,
    )


@LAYOUTS
def test_parallel_calls_keep_their_order(fmt: ToolCallFormat, write: Callable[..., str]) -> None:
    text = write("get_weather", city="Paris") + write("search", query="rain")
    assert_parses(
        text,
        calls=[("get_weather", {"city": "Paris"}), ("search", {"query": "rain"})],
        tool_format=fmt,
        tools=TOOLS,
    )


@LAYOUTS
def test_call_after_text_and_text_after_call(fmt: ToolCallFormat, write: Callable[..., str]) -> None:
    text = "I'll check.\n" + write("get_weather", city="Paris") + "\nDone."
    assert_parses(
        text,
        content="I'll check.\n\nDone.",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=fmt,
        tools=TOOLS,
    )


@LAYOUTS
def test_nested_json_arrays_unicode_and_escaped_quotes(fmt: ToolCallFormat, write: Callable[..., str]) -> None:
    text = write(
        "search",
        query='say "hi" to 東京',
        filters='{"near": {"lat": 1.5, "tags": ["a", "b"]}, "q": "x \\"y\\""}',
        tags='["café", 2, null]',
    )
    expected = {
        "query": 'say "hi" to 東京',
        "filters": {"near": {"lat": 1.5, "tags": ["a", "b"]}, "q": 'x "y"'},
        "tags": ["café", 2, None],
    }
    assert_parses(text, calls=[("search", expected)], tool_format=fmt, tools=TOOLS)


@LAYOUTS
def test_empty_arguments(fmt: ToolCallFormat, write: Callable[..., str]) -> None:
    assert_parses(write("ping"), calls=[("ping", {})], tool_format=fmt, tools=TOOLS)


@LAYOUTS
def test_reasoning_then_call(fmt: ToolCallFormat, write: Callable[..., str]) -> None:
    text = "<think>The user asks about Paris.</think>\n" + write("get_weather", city="Paris")
    assert_parses(
        text,
        reasoning="The user asks about Paris.",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=fmt,
        reasoning_format=THINK,
        tools=TOOLS,
    )


def test_string_values_keep_their_whitespace_and_markup() -> None:
    value = "  a </arg_value> b\n"
    text = glm47("search", query=value)
    assert_parses(text, calls=[("search", {"query": value})], tool_format=GLM47, tools=TOOLS)


@LAYOUTS
def test_end_marker_inside_a_value_is_its_text(fmt: ToolCallFormat, write: Callable[..., str]) -> None:
    value = 'end = "</tool_call>"'
    text = write("search", query=value) + write("ping")
    assert_parses(text, calls=[("search", {"query": value}), ("ping", {})], tool_format=fmt, tools=TOOLS)


def test_either_format_reads_either_layout() -> None:
    assert_parses(
        glm47("get_weather", city="Paris", days="1"),
        calls=[("get_weather", {"city": "Paris", "days": 1})],
        tool_format=GLM45,
        tools=TOOLS,
    )
    assert_parses(
        glm45("get_weather", city="Paris", days="1"),
        calls=[("get_weather", {"city": "Paris", "days": 1})],
        tool_format=GLM47,
        tools=TOOLS,
    )


def test_literal_backslash_n_between_tags_is_a_separator() -> None:
    # vLLM's GLM-4.7 parser tolerates models that write "\n" as two characters between the tags.
    text = "<tool_call>get_weather<arg_key>city</arg_key>\\n<arg_value>Paris</arg_value></tool_call>"
    assert_parses(text, calls=[("get_weather", {"city": "Paris"})], tool_format=GLM47, tools=TOOLS)


def test_unknown_tool_values_are_json_or_text() -> None:
    text = glm45("other", n="7", word="hello")
    assert_parses(text, calls=[("other", {"n": 7, "word": "hello"})], tool_format=GLM45, tools=TOOLS)


def test_truncated_output_is_content() -> None:
    text = "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par"
    assert_parses(text, content=text, tool_format=GLM45, tools=TOOLS)


def test_malformed_calls_are_content() -> None:
    malformed = [
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris\n</tool_call>",  # no </arg_value>
        "<tool_call>get_weather\n<arg_value>Paris</arg_value>\n</tool_call>",  # value without key
        "<tool_call>get weather\n</tool_call>",  # not a name
        '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',  # Hermes JSON
        "<tool_call>\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",  # no name
        "<tool_call>get_weather\n<arg_key>city</arg_key>\nParis\n</tool_call>",  # bare value
    ]
    for text in malformed:
        assert_parses("Hi " + text, content="Hi " + text, tool_format=GLM45, tools=TOOLS)
