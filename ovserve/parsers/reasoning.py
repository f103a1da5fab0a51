"""Reasoning that opens and closes with one of several spellings, or that opens before the
output does: what :class:`~ovserve.parsers.base.ReasoningSplitter` (one start, one end, opened
only when the prompt ends with the start) cannot describe.

A :class:`ReasoningSpan` describes the family (Granite writes "Here is my thought process:" or
"Here's my thought process:"; DeepSeek-R1's output is reasoning from its first character) and
gives a ``ReasoningFormat.stream_parser``. Its parsers keep the splitter's contract: reasoning
never leaks into content and no marker reaches either; whitespace before the opening marker and
newlines after the closing one belong to neither; output that never closes its reasoning is all
reasoning; the result does not depend on how the text is cut into pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

from ovserve.parsers.base import OutputParser, Parsed, ParserContext


@dataclass(frozen=True)
class ReasoningSpan:
    """``starts``/``ends``: the spellings that open and close the reasoning at the beginning of
    the output. ``opened``: the output starts inside the reasoning whatever the prompt says
    (a leading start marker is then dropped); otherwise only when the prompt opened it."""

    starts: tuple[str, ...]
    ends: tuple[str, ...]
    opened: bool = False

    def parser(self, context: ParserContext) -> OutputParser:
        return ReasoningSpanParser(self, opened=self.opened or context.starts_in_reasoning)


class ReasoningSpanParser:
    def __init__(self, span: ReasoningSpan, *, opened: bool) -> None:
        self._span = span
        self._opened = opened
        self._state = "start"  # start -> reasoning -> after -> content, or start -> content
        self._pending = ""  # text that may still be (part of) a marker

    def push(self, text: str) -> Parsed:
        out = Parsed()
        self._pending += text
        while self._pending:
            if self._state == "start":
                stripped = self._pending.lstrip()
                start = next((marker for marker in self._span.starts if stripped.startswith(marker)), None)
                if start is not None:
                    self._pending = stripped[len(start) :]
                    self._state = "reasoning"
                elif any(marker.startswith(stripped) for marker in self._span.starts):
                    return out  # maybe an opening marker, still arriving
                else:
                    self._state = "reasoning" if self._opened else "content"
            elif self._state == "reasoning":
                if not self._take_reasoning(out):
                    return out
            elif self._state == "after":
                # Templates put blank lines between the closing marker and the answer.
                self._pending = self._pending.lstrip("\n")
                if self._pending:
                    self._state = "content"
            else:
                out.content += self._pending
                self._pending = ""
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        if self._state == "reasoning" or (self._state == "start" and self._opened):
            out.reasoning = self._pending  # the model never closed its reasoning
        else:
            out.content = self._pending
        self._pending = ""
        return out

    def _take_reasoning(self, out: Parsed) -> bool:
        """Reasoning up to the first closing marker (True), or up to what may begin one (False)."""
        found = [(self._pending.find(end), end) for end in self._span.ends]
        hits = [(position, end) for position, end in found if position != -1]
        if hits:
            position, end = min(hits)
            out.reasoning += self._pending[:position]
            self._pending = self._pending[position + len(end) :]
            self._state = "after"
            return True
        keep = max(_partial_suffix(self._pending, end) for end in self._span.ends)
        out.reasoning += self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return False


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (a marker still arriving)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
