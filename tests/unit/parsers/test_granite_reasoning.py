"""Granite 3.2 thinking: "Here is my thought process:" ... "Here is my response:" ..., and the
"Here's" spellings vLLM also accepts."""

from __future__ import annotations

import pytest

from ovserve.parsers import REASONING_PARSERS
from tests.unit.parsers.conformance import assert_parses

FMT = REASONING_PARSERS["granite"]


@pytest.mark.parametrize("thought", ["Here is my thought process:", "Here's my thought process:"])
@pytest.mark.parametrize("response", ["Here is my response:", "Here's my response:"])
def test_every_spelling_splits(thought: str, response: str) -> None:
    text = f"{thought}\nThe user says hi. Here is a plan.\n\n{response}\nHi! How can I help?"
    assert_parses(
        text,
        reasoning="\nThe user says hi. Here is a plan.\n\n",
        content="Hi! How can I help?",
        reasoning_format=FMT,
    )


def test_output_without_the_thought_phrase_is_content() -> None:
    text = "Here is the answer: 4. Here is my response: done"
    assert_parses(text, content=text, reasoning_format=FMT)


def test_thought_phrase_later_in_the_output_is_content() -> None:
    text = "Sure. Here is my thought process: none."
    assert_parses(text, content=text, reasoning_format=FMT)


def test_output_that_never_responds_is_all_reasoning() -> None:
    assert_parses("Here is my thought process: hmm, Here is", reasoning=" hmm, Here is", reasoning_format=FMT)


def test_truncated_opening_phrase_is_content() -> None:
    assert_parses("Here is my thou", content="Here is my thou", reasoning_format=FMT)
