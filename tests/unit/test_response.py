"""One Choice per choice holds what a response says about it; finish_reason is decided once."""

from __future__ import annotations

import pytest

from ovserve.parsers import reasoning_parser, tool_parser
from ovserve.service.generation import ChoiceDelta
from ovserve.service.output import ChoiceOutput
from ovserve.service.response import Choice, finish_reason

CALL = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'


@pytest.mark.parametrize(
    ("engine", "stop_string", "tool_calls", "expected"),
    [
        ("stop", False, False, "stop"),
        ("length", False, False, "length"),
        ("length", True, False, "stop"),  # the server's stop string ended it first
        (None, True, False, "stop"),
        ("length", False, True, "tool_calls"),
        ("stop", True, True, "tool_calls"),
        (None, False, False, "stop"),  # never finished by the engine (unary only)
    ],
)
def test_finish_reason_names_what_ended_the_choice(
    engine: str | None, stop_string: bool, tool_calls: bool, expected: str
) -> None:
    assert finish_reason(engine, stop_string=stop_string, tool_calls=tool_calls) == expected


def _chat_choice() -> Choice:
    output = ChoiceOutput(tool_format=tool_parser("hermes3"), reasoning_format=reasoning_parser("qwen3"))
    return Choice(0, output)


def test_choice_splits_reasoning_content_and_tool_calls_across_deltas() -> None:
    choice = _chat_choice()
    text = "<think>hm</think>Let me look." + CALL
    steps = [choice.add(ChoiceDelta(0, piece, [(1, piece, -0.5)])) for piece in (text[:5], text[5:30], text[30:])]
    steps.append(choice.add(ChoiceDelta(0, "", None, engine_finish="stop")))
    assert (choice.parsed.reasoning, choice.parsed.content) == ("hm", "Let me look.")
    assert [(call.name, call.arguments) for call in choice.tool_calls] == [("get_time", '{"tz": "UTC"}')]
    # The stream's steps add up to the unary result.
    assert "".join(step.content for step in steps) == choice.parsed.content
    assert sum(len(step.tool_calls) for step in steps) == 1
    assert len(choice.logprobs) == 3
    assert choice.finished and choice.finish_reason == "tool_calls"


def test_choice_stopped_by_a_stop_string_reads_stop_even_at_the_length_limit() -> None:
    choice = Choice(0, ChoiceOutput(tool_format=None, reasoning_format=None))
    choice.add(ChoiceDelta(0, "Hello "))
    assert not choice.finished
    choice.add(ChoiceDelta(0, "", engine_finish="length", stop_string=True))
    assert (choice.parsed.content, choice.finish_reason) == ("Hello ", "stop")


def test_choice_without_parsers_keeps_the_text_verbatim() -> None:
    choice = Choice(3, ChoiceOutput(tool_format=None, reasoning_format=None))
    for piece in ("<think>x</think>", CALL):
        choice.add(ChoiceDelta(3, piece))
    choice.add(ChoiceDelta(3, "", engine_finish="length"))
    assert choice.parsed.content == "<think>x</think>" + CALL
    assert not choice.tool_calls and choice.finish_reason == "length"
