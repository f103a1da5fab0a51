"""Mistral v11+ tool calls (Devstral, Magistral, Mistral-Small-3.2): [TOOL_CALLS]name[ARGS]{...}."""

from __future__ import annotations

from ovserve.core.output import parse_text
from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from tests.unit.parsers.conformance import assert_parses
from tests.unit.parsers.forced import call_pattern

FMT = TOOL_PARSERS["devstral"]
CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


def test_single_call() -> None:
    text = CALLS + "get_weather" + ARGS + '{"city": "Paris"}'
    assert_parses(text, calls=[("get_weather", {"city": "Paris"})], tool_format=FMT)


def test_parallel_calls_keep_their_order() -> None:
    text = CALLS + "get_weather" + ARGS + '{"city": "Paris"}' + CALLS + "get_time" + ARGS + '{"zone": "CET"}'
    assert_parses(text, calls=[("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})], tool_format=FMT)


def test_call_ids_written_by_the_model_are_not_part_of_the_name() -> None:
    text = CALLS + "get_weather" + CALL_ID + "a1b2c3d4e" + ARGS + '{"city": "Paris"}'
    assert_parses(text, calls=[("get_weather", {"city": "Paris"})], tool_format=FMT)


def test_call_after_text() -> None:
    text = "I'll look it up." + CALLS + "get_weather" + ARGS + '{"city": "Lyon"}'
    assert_parses(text, content="I'll look it up.", calls=[("get_weather", {"city": "Lyon"})], tool_format=FMT)


def test_text_after_the_arguments_makes_the_call_content() -> None:
    # The arguments run to the end of the output: prose after them is no JSON.
    text = CALLS + "get_weather" + ARGS + '{"city": "Lyon"} Let me know.'
    assert_parses(text, content=text, tool_format=FMT)


def test_nested_unicode_and_escaped_arguments() -> None:
    arguments = (
        '{"path": "C:\\\\tmp\\\\x", "quote": "\\"é\\"", '
        '"edits": [{"line": 1, "text": "ünïcode"}, {"line": 2, "text": null}]}'
    )
    expected = {
        "path": "C:\\tmp\\x",
        "quote": '"é"',
        "edits": [{"line": 1, "text": "ünïcode"}, {"line": 2, "text": None}],
    }
    assert_parses(CALLS + "edit_file" + ARGS + arguments, calls=[("edit_file", expected)], tool_format=FMT)


def test_empty_arguments() -> None:
    assert_parses(CALLS + "list_files" + ARGS + "{}", calls=[("list_files", {})], tool_format=FMT)


def test_the_v3_json_list_still_decodes() -> None:
    text = CALLS + '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    assert_parses(text, calls=[("get_weather", {"city": "Paris"})], tool_format=FMT)


def test_magistral_reasoning_then_call() -> None:
    text = "[THINK]The user wants Paris weather.[/THINK]" + CALLS + "get_weather" + ARGS + '{"city": "Paris"}'
    assert_parses(
        text,
        reasoning="The user wants Paris weather.",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=FMT,
        reasoning_format=REASONING_PARSERS["mistral"],
    )


def test_truncated_call_is_content() -> None:
    text = "Sure." + CALLS + "get_weather" + ARGS + '{"city": "Par'
    assert_parses(text, content=text, tool_format=FMT)


def test_call_without_args_marker_is_content() -> None:
    text = CALLS + 'get_weather{"city": "Paris"}'
    assert_parses(text, content=text, tool_format=FMT)


def test_arguments_that_are_not_an_object_are_content() -> None:
    text = CALLS + "get_weather" + ARGS + '"Paris"'
    assert_parses(text, content=text, tool_format=FMT)


def test_control_tokens_are_kept_when_the_server_strips_other_special_tokens() -> None:
    # The server removes special tokens that are not the format's markers before parsing; if
    # [CALL_ID] were removed, the id would be glued to the tool name.
    tokenizer_specials = frozenset({"<s>", "</s>", "[INST]", "[/INST]", CALLS, ARGS, CALL_ID, "[THINK]", "[/THINK]"})
    text = CALLS + "get_weather" + CALL_ID + "a1b2c3d4e" + ARGS + '{"city": "Paris"}</s>'
    parsed = parse_text(
        text, tool_format=FMT, reasoning_format=None, strip_tokens=tokenizer_specials - set(FMT.special_tokens)
    )
    assert [call["function"]["name"] for call in parsed["tool_calls"]] == ["get_weather"]  # type: ignore[attr-defined]


def test_forced_call_is_written_in_the_v11_form() -> None:
    text = CALLS + "get_weather" + ARGS + '{"city":"Paris","days":2}'
    pattern = call_pattern(FMT, "get_weather")
    assert pattern.fullmatch(text)
    assert not pattern.fullmatch(CALLS + '[{"name":"get_weather","arguments":{"city":"Paris"}}]')
    assert_parses(text, calls=[("get_weather", {"city": "Paris", "days": 2})], tool_format=FMT)
