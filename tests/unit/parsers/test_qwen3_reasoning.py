from __future__ import annotations

import pytest

from ovserve.parsers import REASONING_PARSERS
from ovserve.parsers.base import ReasoningSplitter

FMT = REASONING_PARSERS["qwen3"]


def split(pieces: list[str], *, in_reasoning: bool = False) -> tuple[str, str]:
    splitter = ReasoningSplitter(FMT, in_reasoning=in_reasoning)
    outs = [splitter.push(piece) for piece in pieces] + [splitter.finish()]
    return "".join(o.reasoning for o in outs), "".join(o.content for o in outs)


TEXT = "<think>\nThe user greets me.\n</think>\n\nHello!"


@pytest.mark.parametrize("cut", range(len(TEXT) + 1))
def test_reasoning_never_leaks_into_content(cut: int) -> None:
    assert split([TEXT[:cut], TEXT[cut:]]) == ("\nThe user greets me.\n", "Hello!")


def test_char_by_char() -> None:
    assert split(list(TEXT)) == ("\nThe user greets me.\n", "Hello!")


def test_no_thinking_is_all_content() -> None:
    assert split(["Hello ", "there"]) == ("", "Hello there")


def test_template_opened_the_block() -> None:
    assert split(["pondering", "</think>answer"], in_reasoning=True) == ("pondering", "answer")


def test_unclosed_thinking_stays_reasoning() -> None:
    assert split(["<think>still thinking"]) == ("still thinking", "")


@pytest.mark.parametrize("cut", range(len("  <think>pondering</think>answer") + 1))
def test_template_opened_the_block_and_the_model_opens_it_again(cut: int) -> None:
    # The marker is dropped, as DeepSeek-R1's parser drops it: no marker reaches the reasoning.
    text = "  <think>pondering</think>answer"
    assert split([text[:cut], text[cut:]], in_reasoning=True) == ("pondering", "answer")
