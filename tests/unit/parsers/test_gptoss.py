"""gpt-oss (harmony) conformance: outputs as the model writes them after ``<|start|>assistant``."""

from __future__ import annotations

from typing import Any

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS, gptoss
from ovserve.parsers.detect import detect_tool_parser
from tests.unit.parsers.conformance import assert_parses

TOOLS = gptoss.FORMAT
REASONING = gptoss.REASONING_FORMAT

THOUGHT = "Need to use function get_weather."
ANALYSIS = f"<|channel|>analysis<|message|>{THOUGHT}<|end|>"


def call(name: str, arguments: str, *, end: str = "<|call|>") -> str:
    """One call message as gpt-oss writes it after an earlier message."""
    return f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{arguments}{end}"


CALL = call("get_weather", '{"location":"Tokyo"}')


def parses(text: str, **expected: Any) -> None:
    """With tools offered: the gptoss tool parser and reasoning parser, as a graph sets them."""
    assert_parses(text, tool_format=TOOLS, reasoning_format=REASONING, **expected)


def test_reasoning_then_call() -> None:
    parses(
        ANALYSIS + CALL,
        reasoning=THOUGHT,
        calls=[("get_weather", {"location": "Tokyo"})],
    )


def test_reasoning_then_final_answer() -> None:
    text = (
        '<|channel|>analysis<|message|>User asks: "What is 2 + 2?" Simple.<|end|>'
        "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>"
    )
    parses(text, reasoning='User asks: "What is 2 + 2?" Simple.', content="2 + 2 = 4.")


def test_recipient_in_the_role_part_of_the_header() -> None:
    header = "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
    text = ANALYSIS + header + '{"location":"Oslo"}'
    parses(text, reasoning=THOUGHT, calls=[("get_weather", {"location": "Oslo"})])


def test_call_as_the_first_message_with_the_recipient_first() -> None:
    text = ' to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"location":"Rome"}<|call|>'
    parses(text, calls=[("get_weather", {"location": "Rome"})])


def test_constrain_right_after_the_recipient() -> None:
    text = '<|channel|>commentary to=functions.generate_file<|constrain|>json<|message|>{"path": "index.html"}<|call|>'
    parses(text, calls=[("generate_file", {"path": "index.html"})])


def test_parallel_calls_keep_their_order() -> None:
    text = ANALYSIS + CALL + call("get_time", '{"tz":"JST"}')
    parses(
        text,
        reasoning=THOUGHT,
        calls=[("get_weather", {"location": "Tokyo"}), ("get_time", {"tz": "JST"})],
    )


def test_preamble_then_call() -> None:
    text = (
        "<|channel|>analysis<|message|>Plan first.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>I will look up the weather.<|end|>" + CALL
    )
    parses(
        text,
        reasoning="Plan first.",
        content="I will look up the weather.",
        calls=[("get_weather", {"location": "Tokyo"})],
    )


def test_text_after_a_call() -> None:
    text = CALL + "<|start|>assistant<|channel|>final<|message|>Checking now.<|return|>"
    parses(text, content="Checking now.", calls=[("get_weather", {"location": "Tokyo"})])


def test_nested_json_unicode_and_escaped_quotes_in_arguments() -> None:
    arguments = '{"query": {"city": "Zürich", "tags": ["a", {"b": [1, 2.5, null, true]}]}, "note": "say \\"hi\\" 東京"}'
    text = f"<|channel|>commentary to=functions.search <|constrain|>json<|message|>{arguments}<|call|>"
    expected = {"query": {"city": "Zürich", "tags": ["a", {"b": [1, 2.5, None, True]}]}, "note": 'say "hi" 東京'}
    parses(text, calls=[("search", expected)])


def test_empty_arguments() -> None:
    parses(call("get_time", "{}"), calls=[("get_time", {})])


def test_messages_of_one_kind_are_joined_with_a_newline_in_order() -> None:
    text = (
        "<|channel|>analysis<|message|>First thought.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Preamble.<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Second thought.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Answer.<|return|>"
    )
    parses(text, reasoning="First thought.\nSecond thought.", content="Preamble.\nAnswer.")


def test_stop_token_taken_off_the_end() -> None:
    # The engine drops <|return|> / <|call|> (stop tokens) from a unary response's text.
    parses(ANALYSIS + "<|start|>assistant<|channel|>final<|message|>Sunny.", reasoning=THOUGHT, content="Sunny.")
    parses(ANALYSIS + CALL.removesuffix("<|call|>"), reasoning=THOUGHT, calls=[("get_weather", {"location": "Tokyo"})])


def test_truncated_reasoning_stays_reasoning() -> None:
    parses("<|channel|>analysis<|message|>The user wants", reasoning="The user wants")


def test_truncated_call_is_content() -> None:
    text = ANALYSIS + call("get_weather", '{"loc', end="")
    parses(text, reasoning=THOUGHT, content='{"loc')


def test_truncated_header_is_dropped() -> None:
    parses(ANALYSIS + "<|start|>assistant<|channel|>comment", reasoning=THOUGHT)


def test_output_cut_inside_a_marker_keeps_the_text() -> None:
    parses("<|channel|>final<|message|>Hello<|ret", content="Hello<|ret")


def test_malformed_arguments_are_content() -> None:
    text = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{location: Tokyo}<|call|>"
    parses(text, content="{location: Tokyo}")


def test_arguments_that_are_no_object_are_content() -> None:
    parses('<|channel|>commentary to=functions.f <|constrain|>json<|message|>["a"]<|call|>', content='["a"]')


def test_no_tools_offered_splits_reasoning_and_content() -> None:
    text = ANALYSIS + "<|start|>assistant<|channel|>final<|message|>Hi there.<|return|>"
    assert_parses(text, reasoning_format=REASONING, reasoning=THOUGHT, content="Hi there.")


def test_no_tools_offered_drops_calls() -> None:
    # vLLM and OVMS surface no call (and no call text) when tool calls are not parsed.
    assert_parses(ANALYSIS + CALL, reasoning_format=REASONING, reasoning=THOUGHT)


def test_prompt_opened_the_analysis_body() -> None:
    text = "Thinking on.<|end|><|start|>assistant<|channel|>final<|message|>Done."
    parses(text, starts_in_reasoning=True, reasoning="Thinking on.", content="Done.")


def test_output_that_repeats_the_assistant_header() -> None:
    parses("<|start|>assistant<|channel|>final<|message|>Hello.<|return|>", content="Hello.")


def test_builtin_tools_in_the_chain_of_thought_are_reasoning() -> None:
    text = "<|channel|>analysis to=python code<|message|>print(1)<|call|>"
    parses(text, reasoning="print(1)")


def test_messages_to_other_recipients_are_dropped() -> None:
    text = '<|channel|>commentary to=browser.search <|constrain|>json<|message|>{"query": "x"}<|call|>'
    parses(text)


def test_text_without_harmony_markers_is_content() -> None:
    parses("Hello, plain text.", content="Hello, plain text.")
    parses("to be or not", content="to be or not")


def test_text_that_only_looks_like_a_marker_is_content() -> None:
    parses("<|channel|>final<|message|>Use <|foo|> and a <| b.", content="Use <|foo|> and a <| b.")


def test_every_marker_is_a_special_token() -> None:
    expected = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"}
    assert set(TOOLS.special_tokens) == expected
    assert set(REASONING.special_tokens) == expected
    assert TOOLS.call_regex is None


def test_registered_and_detected() -> None:
    assert TOOL_PARSERS["gptoss"] is TOOLS
    assert REASONING_PARSERS["gptoss"] is REASONING
    assert detect_tool_parser("{{- '<|start|>assistant<|channel|>final<|message|>' }}").name == TOOLS.name


def test_arguments_json_cannot_write_are_content() -> None:
    # Python's json reads NaN and 1e400 (inf); a client's JSON parser cannot.
    parses(call("f", '{"x": NaN}', end=""), content='{"x": NaN}')
    parses(call("f", '{"x": 1e400}', end=""), content='{"x": 1e400}')
