"""Magistral reasoning: [THINK]...[/THINK] at the start of the output."""

from __future__ import annotations

from ovserve.parsers import REASONING_PARSERS
from tests.unit.parsers.conformance import assert_parses

FMT = REASONING_PARSERS["mistral"]


def test_reasoning_then_answer() -> None:
    text = "[THINK]The user greets me; greet back.[/THINK]Hello! How can I help?"
    assert_parses(
        text, reasoning="The user greets me; greet back.", content="Hello! How can I help?", reasoning_format=FMT
    )


def test_blank_lines_after_the_reasoning_belong_to_neither() -> None:
    assert_parses("[THINK]x[/THINK]\n\nAnswer", reasoning="x", content="Answer", reasoning_format=FMT)


def test_no_think_block_is_all_content() -> None:
    assert_parses("Hello there.", content="Hello there.", reasoning_format=FMT)


def test_unclosed_reasoning_stays_reasoning() -> None:
    assert_parses("[THINK]still thinking", reasoning="still thinking", reasoning_format=FMT)


def test_markers_are_declared_special() -> None:
    assert set(FMT.special_tokens) == {"[THINK]", "[/THINK]"}
