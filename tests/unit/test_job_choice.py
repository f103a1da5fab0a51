"""One Choice per choice holds what a response says about it: stop strings, parsed reasoning and
tool calls, logprobs, and its finish_reason, decided once."""

from __future__ import annotations

import pytest

from ovserve.core.conversation import Sampling
from ovserve.core.generation_config import resolve_generation_params
from ovserve.core.job import Choice, finish_reason
from ovserve.core.output import ChoiceOutput
from ovserve.engine.messages import GenerationParams, SequenceOutput
from ovserve.models.defaults import ModelDefaults
from ovserve.parsers import reasoning_parser, tool_parser

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


def params(*stop: str) -> GenerationParams:
    return resolve_generation_params(Sampling(stop=stop), ModelDefaults(), max_new_tokens=100, best_of_limit=1)


def output(text: str, finish: str | None = None, *, logprob: bool = False) -> SequenceOutput:
    return SequenceOutput(1, 0, text, 1, [(1, text, -0.5)] if logprob else None, finish)


def test_choice_splits_reasoning_content_and_tool_calls_across_deltas() -> None:
    parsers = ChoiceOutput(tool_format=tool_parser("hermes3"), reasoning_format=reasoning_parser("qwen3"))
    choice = Choice(0, parsers, params())
    text = "<think>hm</think>Let me look." + CALL
    deltas = [choice.add(output(piece, logprob=True)) for piece in (text[:5], text[5:30], text[30:])]
    deltas.append(choice.add(output("", "stop")))
    assert all(delta is not None for delta in deltas)
    steps = [delta for delta in deltas if delta is not None]
    assert (choice.parsed.reasoning, choice.parsed.content) == ("hm", "Let me look.")
    assert [(call.name, call.arguments) for call in choice.tool_calls] == [("get_time", {"tz": "UTC"})]
    # The stream's steps add up to the unary result; only the first is marked first.
    assert "".join(step.content for step in steps) == choice.parsed.content
    assert sum(len(step.tool_calls) for step in steps) == 1
    assert [step.first for step in steps] == [True, False, False, False]
    assert [step.finish_reason for step in steps] == [None, None, None, "tool_calls"]
    assert len(choice.logprobs) == 3
    assert choice.finished and choice.finish_reason == "tool_calls"


def test_a_stop_string_ends_the_choice_exactly_even_across_outputs_and_at_the_length_limit() -> None:
    choice = Choice(0, ChoiceOutput(tool_format=None, reasoning_format=None), params("END"))
    first = choice.add(output("Hello E"))
    assert first is not None and first.content == "Hello"  # "E" may start the stop string: held back
    last = choice.add(output("ND and more", "length"))
    assert last is not None and last.finish_reason == "stop"
    assert (choice.parsed.content, choice.finish_reason) == ("Hello ", "stop")
    assert choice.add(output("ignored")) is None  # the server stopped it; later outputs are dropped


def test_choice_without_parsers_keeps_the_text_verbatim() -> None:
    choice = Choice(3, ChoiceOutput(tool_format=None, reasoning_format=None), params())
    for piece in ("<think>x</think>", CALL):
        choice.add(output(piece))
    choice.add(output("", "length"))
    assert choice.parsed.content == "<think>x</think>" + CALL
    assert not choice.tool_calls and choice.finish_reason == "length"
