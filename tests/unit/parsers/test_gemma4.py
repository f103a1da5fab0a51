"""Gemma 4 conformance: outputs as the model writes them after ``<|turn>model\\n``."""

from __future__ import annotations

from typing import Any

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS, gemma4
from ovserve.parsers.detect import detect_tool_parser
from tests.unit.parsers.conformance import assert_parses

TOOLS = gemma4.FORMAT
REASONING = gemma4.REASONING_FORMAT
Q = '<|"|>'  # Gemma 4's string delimiter
CALL = f"<|tool_call>call:get_weather{{location:{Q}Tokyo{Q}}}<tool_call|>"


def parses(text: str, **expected: Any) -> None:
    """With tools offered and thinking parsed, as a Gemma 4 graph sets both parsers."""
    assert_parses(text, tool_format=TOOLS, reasoning_format=REASONING, **expected)


def test_single_call() -> None:
    parses(CALL, calls=[("get_weather", {"location": "Tokyo"})])


def test_parallel_calls_keep_their_order() -> None:
    text = CALL + f"<|tool_call>call:get_time{{tz:{Q}JST{Q}}}<tool_call|>"
    parses(text, calls=[("get_weather", {"location": "Tokyo"}), ("get_time", {"tz": "JST"})])


def test_several_calls_in_one_block() -> None:
    text = f"<|tool_call>call:a{{x:1}},call:b{{y:{Q}z{Q}}}<tool_call|>"
    parses(text, calls=[("a", {"x": 1}), ("b", {"y": "z"})])


def test_call_after_text() -> None:
    parses("Let me check." + CALL, content="Let me check.", calls=[("get_weather", {"location": "Tokyo"})])


def test_text_after_call() -> None:
    parses(CALL + "Checking now.", content="Checking now.", calls=[("get_weather", {"location": "Tokyo"})])


def test_typed_values_nested_objects_arrays_unicode_and_quotes() -> None:
    arguments = (
        f"query:{{city:{Q}Zürich, CH{Q},tags:[{Q}a{Q},{{b:[1,-2.5,1e-05,true,false,null]}}]}},"
        f'note:{Q}say "hi" {{not: json}} 東京{Q},limit:10,exact:false,cursor:None'
    )
    expected = {
        "query": {"city": "Zürich, CH", "tags": ["a", {"b": [1, -2.5, 1e-05, True, False, None]}]},
        "note": 'say "hi" {not: json} 東京',
        "limit": 10,
        "exact": False,
        "cursor": None,
    }
    parses(f"<|tool_call>call:search{{{arguments}}}<tool_call|>", calls=[("search", expected)])


def test_quoted_keys_spaces_and_a_trailing_comma() -> None:
    text = f"<|tool_call>call:f{{ {Q}a key{Q}: 1 , b : [ {Q}x{Q} , 2 ], }}<tool_call|>"
    parses(text, calls=[("f", {"a key": 1, "b": ["x", 2]})])


def test_bare_words_are_strings_as_vllm_reads_them() -> None:
    parses("<|tool_call>call:f{city:Paris}<tool_call|>", calls=[("f", {"city": "Paris"})])


def test_empty_arguments() -> None:
    parses("<|tool_call>call:get_time{}<tool_call|>", calls=[("get_time", {})])


def test_reasoning_then_call() -> None:
    text = "<|channel>thought\nThe user wants the weather in Tokyo.<channel|>" + CALL
    parses(text, reasoning="The user wants the weather in Tokyo.", calls=[("get_weather", {"location": "Tokyo"})])


def test_reasoning_then_answer() -> None:
    text = "<|channel>thought\nSimple arithmetic.\n<channel|>\n2 + 2 = 4."
    parses(text, reasoning="Simple arithmetic.\n", content="2 + 2 = 4.")


def test_no_thinking_is_content() -> None:
    # Thinking off: the template prefilled <|channel>thought\n<channel|>, the output is the answer.
    parses("Hello! How can I help?", content="Hello! How can I help?")


def test_empty_thought_and_a_stray_channel_end_never_show() -> None:
    # llama.cpp: Gemma 4 may emit an extra empty thought at the end, or a single <channel|>.
    parses("Answer.<|channel>thought\n<channel|>", content="Answer.")
    parses("Answer.<channel|>", content="Answer.")
    parses("<|channel><channel|>Answer.", content="Answer.")


def test_several_thoughts_are_joined_with_a_newline() -> None:
    text = "<|channel>thought\nFirst.<channel|>Partial answer. <|channel>thought\nSecond.<channel|>Rest."
    parses(text, reasoning="First.\nSecond.", content="Partial answer. Rest.")


def test_channel_without_the_thought_label_is_reasoning() -> None:
    parses("<|channel>thoughtful words<channel|>Hi.", reasoning="thoughtful words", content="Hi.")


def test_truncated_thought_stays_reasoning() -> None:
    parses("<|channel>thought\nThe user wants", reasoning="The user wants")
    parses("<|channel>thou", reasoning=None)


def test_prompt_opened_the_thought() -> None:
    parses("\nStill thinking.<channel|>Done.", starts_in_reasoning=True, reasoning="Still thinking.", content="Done.")


def test_truncated_call_is_content() -> None:
    text = f"Sure.<|tool_call>call:get_weather{{location:{Q}Tok"
    parses(text, content=text)


def test_malformed_calls_are_content() -> None:
    for block in (
        f"<|tool_call>get_weather{{location:{Q}Tokyo{Q}}}<tool_call|>",  # no call:
        f"<|tool_call>call:get_weather{{location:{Q}Tokyo}}<tool_call|>",  # unterminated string
        f"<|tool_call>call:get_weather{{location:{Q}Tokyo{Q}<tool_call|>",  # unbalanced
        "<|tool_call>call:get_weather{:1}<tool_call|>",  # a value without a key
        "<|tool_call>call:get weather{}<tool_call|>",  # no tool name
        "<|tool_call>call:f{} extra<tool_call|>",  # text after the call
    ):
        parses(block, content=block)


def test_reasoning_parser_alone_splits_thoughts() -> None:
    text = "<|channel>thought\nPlan.<channel|>Answer."
    assert_parses(text, reasoning_format=REASONING, reasoning="Plan.", content="Answer.")


def test_markers_are_special_tokens_without_a_forcing_regex() -> None:
    assert set(TOOLS.special_tokens) == {"<|tool_call>", "<tool_call|>", Q}
    assert set(REASONING.special_tokens) == {"<|channel>", "<channel|>"}
    assert TOOLS.call_regex is None


def test_registered_and_detected() -> None:
    assert TOOL_PARSERS["gemma4"] is TOOLS
    assert REASONING_PARSERS["gemma4"] is REASONING
    assert detect_tool_parser("{{- '<|tool_call>call:' + function['name'] + '{' -}}").name == TOOLS.name


def test_arguments_nested_past_the_parser_are_content() -> None:
    block = "<|tool_call>call:f{x:" + "[" * 5000 + "]" * 5000 + "}<tool_call|>"
    parses(block, content=block)


def test_number_json_cannot_write_stays_text() -> None:
    parses("<|tool_call>call:f{x:1e400}<tool_call|>", calls=[("f", {"x": "1e400"})])
