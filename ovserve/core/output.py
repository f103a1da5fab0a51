"""Per-choice post-processing of generated text: reasoning, then tool calls, then content.

One :class:`ChoiceOutput` per choice turns text deltas (already stop-trimmed) into
:class:`ParsedDelta` objects: ``reasoning_content`` never leaks into ``content``, and tool calls
come out whole (a call is emitted once its closing marker arrived and its JSON decoded).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ovserve.parsers.base import (
    ReasoningFormat,
    ReasoningSplitter,
    ToolCall,
    ToolCallExtractor,
    ToolCallFormat,
)


@dataclass
class ParsedDelta:
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)

    def extend(self, other: ParsedDelta) -> ParsedDelta:
        self.reasoning += other.reasoning
        self.content += other.content
        self.tool_calls += other.tool_calls
        return self


class ChoiceOutput:
    def __init__(
        self,
        *,
        tool_format: ToolCallFormat | None,
        reasoning_format: ReasoningFormat | None,
        starts_in_reasoning: bool = False,
        single_call: bool = False,
    ) -> None:
        self._reasoning = (
            ReasoningSplitter(reasoning_format, in_reasoning=starts_in_reasoning) if reasoning_format else None
        )
        self._tools = ToolCallExtractor(tool_format) if tool_format else None
        self._single_call = single_call
        self.calls: list[ToolCall] = []

    def push(self, text: str) -> ParsedDelta:
        return self._parse(text, final=False)

    def finish(self) -> ParsedDelta:
        return self._parse("", final=True)

    def _parse(self, text: str, *, final: bool) -> ParsedDelta:
        out = ParsedDelta()
        content = text
        if self._reasoning is not None:
            split = self._reasoning.finish() if final else self._reasoning.push(text)
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
        for call in extracted.tool_calls:
            # parallel_tool_calls=false: the first call only (a forced call is one call anyway).
            if self._single_call and self.calls:
                continue
            self.calls.append(call)
            out.tool_calls.append(call)
        return out
