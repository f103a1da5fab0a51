"""Reasoning that opens and closes with one of several spellings, or that opens before the
output does: what a :class:`~ovserve.parsers.base.ReasoningFormat` (one start, one end, opened
only when the prompt ends with the start) cannot describe.

A :class:`ReasoningSpan` describes the family (Granite writes "Here is my thought process:" or
"Here's my thought process:"; DeepSeek-R1's output is reasoning from its first character) and
gives a ``ReasoningFormat.stream_parser``: the splitter itself, given the span's spellings, so its
contract holds (reasoning never leaks into content and no marker reaches either; whitespace before
the opening marker and newlines after the closing one belong to neither; output that never closes
its reasoning is all reasoning; the result does not depend on how the text is cut into pieces).
"""

from __future__ import annotations

from dataclasses import dataclass

from ovserve.parsers.base import OutputParser, ParserContext, ReasoningSplitter


@dataclass(frozen=True)
class ReasoningSpan:
    """``starts``/``ends``: the spellings that open and close the reasoning at the beginning of
    the output. ``opened``: the output starts inside the reasoning whatever the prompt says
    (a leading start marker is then dropped); otherwise only when the prompt opened it."""

    starts: tuple[str, ...]
    ends: tuple[str, ...]
    opened: bool = False

    def parser(self, context: ParserContext) -> OutputParser:
        return ReasoningSplitter(self, in_reasoning=self.opened or context.starts_in_reasoning)
