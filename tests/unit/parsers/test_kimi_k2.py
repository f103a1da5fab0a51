"""Kimi K2 tool calls: ``functions.NAME:IDX`` ids, plural and singular section markers."""

from __future__ import annotations

from ovserve.core.output import parse_text
from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from tests.unit.parsers.conformance import assert_parses
from tests.unit.parsers.forced import call_pattern

FMT = TOOL_PARSERS["kimi_k2"]
BEGIN, END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL, ARGS, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def call(call_id: str, arguments: str) -> str:
    return CALL + call_id + ARGS + arguments + CALL_END


def test_single_call() -> None:
    text = BEGIN + call("functions.get_weather:0", '{"city": "Beijing"}') + END
    assert_parses(text, calls=[("get_weather", {"city": "Beijing"})], tool_format=FMT)


def test_the_call_id_is_the_models_own() -> None:
    # The template writes past calls and their results back under this id.
    text = BEGIN + call("functions.get_weather:0", "{}") + call("functions.get_time:1", "{}") + END
    parsed = parse_text(text, tool_format=FMT, reasoning_format=None, chunk=3)
    assert [tool_call["id"] for tool_call in parsed["tool_calls"]] == [
        "functions.get_weather:0",
        "functions.get_time:1",
    ]  # type: ignore[attr-defined]


def test_parallel_calls_keep_their_order() -> None:
    text = (
        BEGIN
        + call("functions.get_weather:0", '{"city": "Beijing"}')
        + call("functions.get_weather:1", '{"city": "Shanghai"}')
        + END
    )
    calls = [("get_weather", {"city": "Beijing"}), ("get_weather", {"city": "Shanghai"})]
    assert_parses(text, calls=calls, tool_format=FMT)


def test_whitespace_around_markers_is_allowed() -> None:
    text = BEGIN + "\n" + CALL + " functions.get_weather:3 " + ARGS + ' {"city": "Rome"} ' + CALL_END + "\n" + END
    assert_parses(text, calls=[("get_weather", {"city": "Rome"})], tool_format=FMT)


def test_call_after_text() -> None:
    text = "I'll check the weather." + BEGIN + call("functions.get_weather:0", '{"city": "Oslo"}') + END
    assert_parses(text, content="I'll check the weather.", calls=[("get_weather", {"city": "Oslo"})], tool_format=FMT)


def test_text_after_the_section_is_content() -> None:
    text = BEGIN + call("functions.get_weather:0", '{"city": "Oslo"}') + END + "One moment."
    assert_parses(text, content="One moment.", calls=[("get_weather", {"city": "Oslo"})], tool_format=FMT)


def test_singular_section_markers() -> None:
    text = "<|tool_call_section_begin|>" + call("functions.ping:0", "{}") + "<|tool_call_section_end|>"
    assert_parses(text, calls=[("ping", {})], tool_format=FMT)


def test_dotted_tool_names_stay_whole_and_the_prefix_is_optional() -> None:
    text = BEGIN + call("functions.web.search:0", '{"q": "x"}') + call("lookup:1", "{}") + END
    assert_parses(text, calls=[("web.search", {"q": "x"}), ("lookup", {})], tool_format=FMT)


def test_nested_unicode_and_escaped_arguments() -> None:
    arguments = '{"query": "\\"quoted\\" 北京", "filters": {"tags": ["a", "b"], "range": [1, 2.5]}, "none": null}'
    expected = {"query": '"quoted" 北京', "filters": {"tags": ["a", "b"], "range": [1, 2.5]}, "none": None}
    assert_parses(BEGIN + call("functions.search:0", arguments) + END, calls=[("search", expected)], tool_format=FMT)


def test_empty_arguments() -> None:
    assert_parses(BEGIN + call("functions.get_time:0", "{}") + END, calls=[("get_time", {})], tool_format=FMT)


def test_reasoning_then_call() -> None:
    text = "<think>Need the weather.</think>" + BEGIN + call("functions.get_weather:0", '{"city": "Oslo"}') + END
    assert_parses(
        text,
        reasoning="Need the weather.",
        calls=[("get_weather", {"city": "Oslo"})],
        tool_format=FMT,
        reasoning_format=REASONING_PARSERS["qwen3"],
    )


def test_truncated_section_is_content() -> None:
    text = "Sure." + BEGIN + CALL + "functions.get_weather:0" + ARGS + '{"city": "Os'
    assert_parses(text, content=text, tool_format=FMT)


def test_call_id_without_index_is_content() -> None:
    text = BEGIN + call("functions.get_weather", '{"city": "Oslo"}') + END
    assert_parses(text, content=text, tool_format=FMT)


def test_arguments_that_are_not_json_are_content() -> None:
    text = BEGIN + call("functions.get_weather:0", "{city: Oslo}") + END
    assert_parses(text, content=text, tool_format=FMT)


def test_call_without_end_marker_is_content() -> None:
    text = BEGIN + CALL + "functions.get_weather:0" + ARGS + '{"city": "Oslo"}' + END
    assert_parses(text, content=text, tool_format=FMT)


def test_markers_are_declared_special() -> None:
    assert {BEGIN, END, CALL, ARGS, CALL_END} <= set(FMT.special_tokens)


def test_forced_call_is_one_call_the_parser_reads() -> None:
    text = BEGIN + call("functions.get_weather:7", '{"city":"Oslo","units":"c"}') + END
    pattern = call_pattern(FMT, "get_weather")
    assert pattern.fullmatch(text)
    assert not pattern.fullmatch(text.replace(":7", ""))
    assert not pattern.fullmatch(text.replace('"c"', '"k"'))
    assert_parses(text, calls=[("get_weather", {"city": "Oslo", "units": "c"})], tool_format=FMT)
