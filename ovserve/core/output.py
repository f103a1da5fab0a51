"""Per-choice post-processing of generated text: reasoning, then tool calls, then content.

One :class:`ChoiceOutput` per choice turns text deltas (already stop-trimmed) into
:class:`ParsedDelta` objects: ``reasoning_content`` never leaks into ``content``, and tool calls
come out whole (a call is emitted once its closing marker arrived and its payload decoded).
A format with its own whole-output parser (``stream_parser``, e.g. gpt-oss's harmony) does
both steps itself. ``strip_tokens``: special-token texts removed before any parser sees the
text (the request was decoded with special tokens kept because its format's markers are some).
"""

from __future__ import annotations

from ovserve.parsers.base import (
    OutputParser,
    Parsed,
    ParserContext,
    ReasoningFormat,
    ReasoningSplitter,
    ToolCallExtractor,
    ToolCallFormat,
)
from ovserve.parsers.calls import ToolCall, arguments_json
from ovserve.parsers.schemas import NO_TOOLS, ToolSchemas

ParsedDelta = Parsed


class ChoiceOutput:
    def __init__(
        self,
        *,
        tool_format: ToolCallFormat | None,
        reasoning_format: ReasoningFormat | None,
        starts_in_reasoning: bool = False,
        single_call: bool = False,
        tools: ToolSchemas = NO_TOOLS,
        strip_tokens: frozenset[str] = frozenset(),
    ) -> None:
        self._whole: OutputParser | None = None  # a format that parses reasoning and calls itself
        self._reasoning: OutputParser | None = None
        self._tools: ToolCallExtractor | None = None
        if tool_format is not None and tool_format.stream_parser is not None:
            self._whole = tool_format.stream_parser(ParserContext(tools, starts_in_reasoning))
        else:
            if reasoning_format is not None:
                if reasoning_format.stream_parser is not None:
                    self._reasoning = reasoning_format.stream_parser(ParserContext(None, starts_in_reasoning))
                else:
                    self._reasoning = ReasoningSplitter(reasoning_format, in_reasoning=starts_in_reasoning)
            if tool_format is not None:
                self._tools = ToolCallExtractor(tool_format, tools)
        # Longest first: a special token that contains another is removed whole.
        self._strip = sorted(strip_tokens, key=len, reverse=True)
        self._single_call = single_call
        self.calls: list[ToolCall] = []

    def push(self, text: str) -> ParsedDelta:
        return self._parse(text, final=False)

    def finish(self) -> ParsedDelta:
        return self._parse("", final=True)

    def _parse(self, text: str, *, final: bool) -> ParsedDelta:
        for token in self._strip:
            text = text.replace(token, "")
        if self._whole is not None:
            out = self._whole.push(text) if text else Parsed()
            if final:
                out.extend(self._whole.finish())
            return self._keep_calls(out)
        out = ParsedDelta()
        content = text
        if self._reasoning is not None:
            split = self._reasoning.push(text) if text else Parsed()
            if final:
                split.extend(self._reasoning.finish())
            out.reasoning, content = split.reasoning, split.content
        if self._tools is None:
            out.content = content
            return out
        extracted = self._tools.push(content)
        if final:
            tail = self._tools.finish()
            extracted.content += tail.content
            extracted.tool_calls += tail.tool_calls
        out.content = extracted.content
        out.tool_calls = extracted.tool_calls
        return self._keep_calls(out)

    def _keep_calls(self, out: ParsedDelta) -> ParsedDelta:
        kept = []
        for call in out.tool_calls:
            # parallel_tool_calls=false: the first call only (a forced call is one call anyway).
            if self._single_call and self.calls:
                continue
            self.calls.append(call)
            kept.append(call)
        out.tool_calls = kept
        return out


def parse_text(
    text: str,
    *,
    tool_format: ToolCallFormat | None,
    reasoning_format: ReasoningFormat | None,
    tools: ToolSchemas = NO_TOOLS,
    chunk: int | None = None,
    starts_in_reasoning: bool = False,
    strip_tokens: frozenset[str] = frozenset(),
) -> dict[str, object]:
    """A model's whole output text -> the assistant message the server would return, in OpenAI's
    chat shape (``content`` and ``reasoning_content`` null when empty, ``tool_calls`` a list).
    ``chunk``: feed the text in deltas of that many characters, as a stream would (the result
    must not depend on it). What ``ovserve parse`` prints; the parser conformance tests' oracle."""
    output = ChoiceOutput(
        tool_format=tool_format,
        reasoning_format=reasoning_format,
        starts_in_reasoning=starts_in_reasoning,
        tools=tools,
        strip_tokens=strip_tokens,
    )
    step = chunk if chunk and chunk > 0 else max(len(text), 1)
    parsed = Parsed()
    for start in range(0, len(text), step):
        parsed.extend(output.push(text[start : start + step]))
    parsed.extend(output.finish())
    return {
        "content": parsed.content or None,
        "reasoning_content": parsed.reasoning or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments_json(call.arguments)},
            }
            for call in parsed.tool_calls
        ],
    }
