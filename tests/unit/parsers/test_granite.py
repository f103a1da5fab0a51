"""IBM Granite 3.x tool calls: <|tool_call|> (or the text <tool_call>) and a JSON list."""

from __future__ import annotations

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from tests.unit.parsers.conformance import assert_parses
from tests.unit.parsers.forced import call_pattern

FMT = TOOL_PARSERS["granite"]
MARK = "<|tool_call|>"


def test_single_call() -> None:
    text = MARK + '[{"arguments": {"location": "Boston"}, "name": "get_current_weather"}]'
    assert_parses(text, calls=[("get_current_weather", {"location": "Boston"})], tool_format=FMT)


def test_parallel_calls_keep_their_order() -> None:
    text = (
        MARK + '[{"name": "get_weather", "arguments": {"city": "Boston"}}, '
        '{"name": "get_time", "arguments": {"zone": "EST"}}]'
    )
    assert_parses(text, calls=[("get_weather", {"city": "Boston"}), ("get_time", {"zone": "EST"})], tool_format=FMT)


def test_granite_3_1_text_marker_at_the_start() -> None:
    text = '<tool_call>[{"name": "get_weather", "arguments": {"city": "Boston"}}]'
    assert_parses(text, calls=[("get_weather", {"city": "Boston"})], tool_format=FMT)


def test_text_marker_later_in_the_output_is_content() -> None:
    text = 'Use <tool_call>[{"name": "get_weather", "arguments": {}}] to call it.'
    assert_parses(text, content=text, tool_format=FMT)


def test_call_after_text() -> None:
    text = "Let me check." + MARK + '[{"name": "get_weather", "arguments": {"city": "Boston"}}]'
    assert_parses(text, content="Let me check.", calls=[("get_weather", {"city": "Boston"})], tool_format=FMT)


def test_text_after_the_list_makes_it_content() -> None:
    # The list runs to the end of the output (vLLM parses the rest of the output as one JSON list).
    text = MARK + '[{"name": "get_weather", "arguments": {}}] Anything else?'
    assert_parses(text, content=text, tool_format=FMT)


def test_nested_unicode_and_escaped_arguments() -> None:
    text = MARK + '[{"name": "note", "arguments": {"text": "\\"Grüße\\" 你好", "tags": [["a"], {"b": 1.5}]}}]'
    assert_parses(text, calls=[("note", {"text": '"Grüße" 你好', "tags": [["a"], {"b": 1.5}]})], tool_format=FMT)


def test_empty_arguments() -> None:
    assert_parses(MARK + '[{"name": "get_time", "arguments": {}}]', calls=[("get_time", {})], tool_format=FMT)


def test_reasoning_then_call() -> None:
    text = (
        "Here is my thought process:\nThe user asks for Boston weather.\n"
        "Here is my response:\n" + MARK + '[{"name": "get_weather", "arguments": {"city": "Boston"}}]'
    )
    assert_parses(
        text,
        reasoning="\nThe user asks for Boston weather.\n",
        calls=[("get_weather", {"city": "Boston"})],
        tool_format=FMT,
        reasoning_format=REASONING_PARSERS["granite"],
    )


def test_truncated_call_is_content() -> None:
    text = MARK + '[{"name": "get_weather", "arguments": {"city": "Bos'
    assert_parses(text, content=text, tool_format=FMT)


def test_malformed_list_is_content() -> None:
    text = MARK + "[{'name': 'get_weather'}]"
    assert_parses(text, content=text, tool_format=FMT)


def test_granite_4_hermes_calls_are_not_this_format() -> None:
    # Granite 4 writes Hermes blocks: serve it with hermes3.
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Boston"}}\n</tool_call>'
    assert_parses(text, content=text, tool_format=FMT)
    assert_parses(text, calls=[("get_weather", {"city": "Boston"})], tool_format=TOOL_PARSERS["hermes3"])


def test_marker_is_declared_special() -> None:
    assert MARK in FMT.special_tokens


def test_forced_call_is_one_call_the_parser_reads() -> None:
    text = MARK + '[{"name":"get_weather","arguments":{"city":"Boston"}}]'
    pattern = call_pattern(FMT, "get_weather")
    assert pattern.fullmatch(text)
    assert not pattern.fullmatch(text.replace("get_weather", "get_time"))
    assert_parses(text, calls=[("get_weather", {"city": "Boston"})], tool_format=FMT)
