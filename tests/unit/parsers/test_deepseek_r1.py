"""DeepSeek-R1 reasoning: the output starts inside <think> (the template opened it), with or
without the model repeating the tag; no </think> means all of it is reasoning (vLLM's rule)."""

from __future__ import annotations

import pytest

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from tests.unit.parsers.conformance import assert_parses

FMT = REASONING_PARSERS["deepseek_r1"]


@pytest.mark.parametrize("starts_in_reasoning", [True, False])
def test_output_starts_inside_the_reasoning(starts_in_reasoning: bool) -> None:
    text = "Okay, the user says hello.\n</think>\n\nHello! How can I help?"
    assert_parses(
        text,
        reasoning="Okay, the user says hello.\n",
        content="Hello! How can I help?",
        reasoning_format=FMT,
        starts_in_reasoning=starts_in_reasoning,
    )


def test_an_opening_tag_the_model_writes_anyway_is_dropped() -> None:
    text = "<think>\nLet me think.\n</think>\n\nThe answer is 4."
    assert_parses(text, reasoning="\nLet me think.\n", content="The answer is 4.", reasoning_format=FMT)


def test_output_without_a_closing_tag_is_all_reasoning() -> None:
    text = "Hmm, this is hard. Let me consider 2 + 2"
    assert_parses(text, reasoning=text, reasoning_format=FMT)


def test_truncated_inside_the_closing_tag_stays_reasoning() -> None:
    assert_parses("thinking...</thi", reasoning="thinking...</thi", reasoning_format=FMT)


def test_empty_reasoning() -> None:
    assert_parses("</think>Just the answer.", content="Just the answer.", reasoning_format=FMT)


def test_think_like_text_is_reasoning_not_a_tag() -> None:
    text = "<thinking> is not the tag</think>ok"
    assert_parses(text, reasoning="<thinking> is not the tag", content="ok", reasoning_format=FMT)


def test_reasoning_then_deepseek_tool_call() -> None:
    text = (
        "Need weather.</think>"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    )
    assert_parses(
        text,
        reasoning="Need weather.",
        calls=[("get_weather", {})],
        reasoning_format=FMT,
        tool_format=TOOL_PARSERS["deepseek_v31"],
    )


def test_tags_are_declared_special() -> None:
    assert set(FMT.special_tokens) == {"<think>", "</think>"}
