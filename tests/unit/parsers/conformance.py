"""The parser conformance oracle: a model output parsed the way the server parses a choice
(``ovserve.core.output.parse_text``), whole and in stream deltas of 1, 3 and 7 characters, must
give the same assistant message every time, and the expected one."""

from __future__ import annotations

import json
from typing import Any

from ovserve.core.output import parse_text
from ovserve.parsers.base import ReasoningFormat, ToolCallFormat
from ovserve.parsers.schemas import NO_TOOLS, ToolSchemas

CHUNK_SIZES = (None, 1, 3, 7)


def message(
    text: str,
    *,
    tool_format: ToolCallFormat | None = None,
    reasoning_format: ReasoningFormat | None = None,
    tools: ToolSchemas = NO_TOOLS,
    chunk: int | None = None,
    starts_in_reasoning: bool = False,
) -> dict[str, Any]:
    """The parsed message with call ids dropped and arguments decoded (ids are random)."""
    parsed = parse_text(
        text,
        tool_format=tool_format,
        reasoning_format=reasoning_format,
        tools=tools,
        chunk=chunk,
        starts_in_reasoning=starts_in_reasoning,
    )
    calls = []
    for call in parsed["tool_calls"]:  # type: ignore[attr-defined]
        arguments = json.loads(call["function"]["arguments"])
        assert isinstance(arguments, dict), call
        calls.append((call["function"]["name"], arguments))
    return {"content": parsed["content"], "reasoning_content": parsed["reasoning_content"], "tool_calls": calls}


def assert_parses(
    text: str,
    *,
    content: str | None = None,
    reasoning: str | None = None,
    calls: list[tuple[str, dict[str, Any]]] | None = None,
    tool_format: ToolCallFormat | None = None,
    reasoning_format: ReasoningFormat | None = None,
    tools: ToolSchemas = NO_TOOLS,
    starts_in_reasoning: bool = False,
) -> None:
    """``text`` parses to exactly ``content``/``reasoning``/``calls``, whole and at every chunk size."""
    expected = {"content": content, "reasoning_content": reasoning, "tool_calls": calls or []}
    for chunk in CHUNK_SIZES:
        got = message(
            text,
            tool_format=tool_format,
            reasoning_format=reasoning_format,
            tools=tools,
            chunk=chunk,
            starts_in_reasoning=starts_in_reasoning,
        )
        assert got == expected, f"chunk {chunk}: {got!r} != {expected!r}"
