"""Streaming extraction of tool calls and reasoning from model text.

A tool-call format is data (:class:`ToolCallFormat`: where calls start, where they end, how to
decode the payload); one state machine (:class:`ToolCallExtractor`) runs every format, so each
parser module only says what its model writes. Text arrives in arbitrary pieces (stream deltas);
the extractor holds back text that could be the start of a marker, never emits a marker as
content, and falls back to plain content when a payload does not decode.

A format that the marker machine cannot describe (gpt-oss's harmony channels carry reasoning,
content and calls in one syntax) gives a ``stream_parser`` instead: a factory of
:class:`OutputParser` objects that turn the whole output into :class:`Parsed` pieces.

Contract of every parser, unary or streamed: the text is fed in arbitrary pieces and the
concatenation of what comes out is the same whatever the pieces; a call is emitted whole, once
(its arguments a JSON object: :mod:`ovserve.parsers.calls`); markers never reach ``content``;
output that is not a valid call of the format comes back as ``content`` (a malformed call is the
model's text, not an error).

Beside this module: :mod:`ovserve.parsers.calls` (the call, its arguments as JSON, the one reader
of arguments sent as text), :mod:`ovserve.parsers.schemas` (argument values typed by the tools'
schemas, the regexes a grammar forces a call with).

``special_tokens`` of a format: its markers that tokenizers declare special (``[TOOL_CALLS]``,
``<|channel|>``...). Decoding normally drops special tokens, so when a model's tokenizer has one of
them the request is decoded with special tokens kept and every *other* special token is removed
from the text before the parsers see it (``ovserve.core.chat``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import NO_TOOLS, CallRegex, ToolSchemas

log = logging.getLogger(__name__)


@dataclass
class Parsed:
    """What a piece of model output turned into: reasoning, answer text, whole tool calls."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)

    def extend(self, other: Parsed) -> Parsed:
        self.reasoning += other.reasoning
        self.content += other.content
        self.tool_calls += other.tool_calls
        return self


class OutputParser(Protocol):
    """A whole-output parser (reasoning, content and calls at once); see the module docstring."""

    def push(self, text: str) -> Parsed: ...

    def finish(self) -> Parsed: ...


@dataclass(frozen=True)
class ParserContext:
    """What a stream parser is built with. ``tools``: None when tool calls are not parsed for
    this request (no tools offered); ``starts_in_reasoning``: the prompt opened the reasoning."""

    tools: ToolSchemas | None = None
    starts_in_reasoning: bool = False


@dataclass(frozen=True)
class ToolCallFormat:
    """How one model family writes tool calls.

    ``starts``: markers that open a call block. ``end``: the marker that closes it, or None when
    the block runs to the end of the output. ``start_of_output_only``: markers that only count
    as the very first non-space text (Llama 3 writes bare JSON). ``decode`` turns a block's
    payload into calls (given the offered tools' schemas) and raises :class:`PayloadError` when
    it is not a call.
    """

    name: str
    starts: tuple[str, ...]
    end: str | None
    decode: Callable[[str, ToolSchemas], list[ToolCall]]
    start_of_output_only: tuple[str, ...] = ()
    # Keep the start marker in the payload (Llama 3's "{" is part of the JSON).
    marker_in_payload: tuple[str, ...] = ()
    # The text before and after one ``{"name", "arguments"}`` call, for formats whose calls a
    # grammar can guide once the model opens a call (enable_tool_guided_generation).
    json_call_wrap: tuple[str, str] | None = None
    # One whole call as a regex, for formats whose calls a grammar can force (tool_choice
    # required / named); None: it cannot.
    call_regex: CallRegex | None = None
    # Markers of this format that tokenizers may declare special tokens (module docstring).
    special_tokens: tuple[str, ...] = ()
    # Formats the marker machine cannot describe: a whole-output parser (module docstring).
    stream_parser: Callable[[ParserContext], OutputParser] | None = None
    # The ids this family's chat template accepts back in the next turn, when it is picky
    # (Mistral's templates refuse any tool-call id that is not 9 alphanumerics); None: call_<hex>.
    call_id: Callable[[], str] | None = None
    # (start, end) pairs for start markers whose block does not close with ``end`` (None: it runs
    # to the end of the output): a format with several spellings of its block (Kimi's singular
    # and plural sections, LFM2's tagged list next to a bare pythonic list).
    block_ends: tuple[tuple[str, str | None], ...] = ()

    def end_of(self, start: str) -> str | None:
        """The marker that closes a block opened by ``start``."""
        for marker, end in self.block_ends:
            if marker == start:
                return end
        return self.end

    # Formats whose argument values are free text (XML-style): given the payload before an ``end``,
    # whether it stops inside a value. Then that ``end`` is the value's text (code that mentions
    # ``</tool_call>``) and the block reads on to the next one.
    open_payload: Callable[[str], bool] | None = None


@dataclass
class Extracted:
    """What a piece of model text turned into."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


class ToolCallExtractor:
    def __init__(self, fmt: ToolCallFormat, tools: ToolSchemas = NO_TOOLS) -> None:
        self._fmt = fmt
        self._tools = tools
        self._pending = ""  # content that may be the beginning of a start marker
        self._block: str | None = None  # inside a call block: its text so far (marker included)
        self._marker = ""
        self._end: str | None = None  # what closes the open block (fmt.end_of its marker)
        self._seen_text = False  # start_of_output_only markers are over once text was emitted
        # Trailing whitespace waits for the text after it: before, between or after tool calls it
        # is the model's layout, not an answer, so it is content only when text follows or when the
        # output has no call at all (whole or in deltas, the same content either way).
        self._whitespace = ""
        self._called = False

    def push(self, text: str) -> Extracted:
        out = Extracted()
        self._pending += text
        while self._pending:
            if self._block is not None:
                if not self._consume_block(out):
                    break
                continue
            if not self._consume_content(out):
                break
        return out

    def finish(self) -> Extracted:
        """End of output: close an open block (or give it back as content)."""
        out = Extracted()
        if self._block is not None:
            block, self._block = self._block + self._pending, None
            self._pending = ""
            if self._end is None:
                self._decode_into(block, out)
            else:
                self._emit_content(out, block)  # unterminated: not a call after all
        self._emit_content(out, self._pending)
        self._pending = ""
        if not self._called:
            out.content += self._whitespace
        self._whitespace = ""
        return out

    # -- states ---------------------------------------------------------------------------------

    def _markers(self) -> tuple[str, ...]:
        if self._seen_text:
            return self._fmt.starts
        return self._fmt.starts + self._fmt.start_of_output_only

    def _consume_content(self, out: Extracted) -> bool:
        text = self._pending
        best: tuple[int, str] | None = None
        for marker in self._markers():
            if marker in self._fmt.start_of_output_only:
                stripped = text.lstrip()
                position = len(text) - len(stripped) if stripped.startswith(marker) else -1
            else:
                position = text.find(marker)
            if position != -1 and (best is None or position < best[0]):
                best = (position, marker)
        if best is not None:
            position, marker = best
            self._emit_content(out, text[:position])
            self._block, self._marker, self._end = marker, marker, self._fmt.end_of(marker)
            self._pending = text[position + len(marker) :]
            return True
        # No marker yet: keep back whatever could still become one.
        keep = self._holdback(text)
        self._emit_content(out, text[: len(text) - keep])
        self._pending = text[len(text) - keep :]
        return False

    def _holdback(self, text: str) -> int:
        only_first = self._fmt.start_of_output_only
        for marker in self._markers():
            # Before any text, all of it may still be leading space or the opening of a marker.
            if marker in only_first and (not text.strip() or marker.startswith(text.lstrip())):
                return len(text)
        return partial_marker(text, (marker for marker in self._markers() if marker not in only_first))

    def _emit_content(self, out: Extracted, text: str) -> None:
        body = text.rstrip()
        if not body:
            self._whitespace += text
            return
        out.content += self._whitespace + body
        self._whitespace = text[len(body) :]
        self._seen_text = True

    def _consume_block(self, out: Extracted) -> bool:
        assert self._block is not None
        end = self._end
        if end is None:
            self._block += self._pending
            self._pending = ""
            return False
        position = self._pending.find(end)
        if position == -1:
            return False  # wait for the end marker (finish() handles a block that never closes)
        block = self._block + self._pending[: position + len(end)]
        if self._fmt.open_payload is not None and self._fmt.open_payload(block[len(self._marker) : -len(end)]):
            self._block, self._pending = block, self._pending[position + len(end) :]
            return True
        self._pending = self._pending[position + len(end) :]
        self._block = None
        self._decode_into(block, out)
        return True

    def _decode_into(self, block: str, out: Extracted) -> None:
        payload = block[len(self._marker) :]
        if self._end is not None and payload.endswith(self._end):
            payload = payload[: -len(self._end)]
        if self._marker in self._fmt.marker_in_payload:
            payload = self._marker + payload
        try:
            calls = self._fmt.decode(payload.strip(), self._tools)
        except PayloadError as exc:
            # Malformed: the client sees what the model wrote; the log says why it is no call.
            log.warning("%s tool call not parsed, returned as content: %s", self._fmt.name, exc)
            self._emit_content(out, block)
            return
        if self._fmt.call_id is not None:
            calls = [dataclasses.replace(call, id=self._fmt.call_id()) for call in calls]
        out.tool_calls.extend(calls)
        self._seen_text = self._called = True


@dataclass(frozen=True)
class ReasoningFormat:
    """``start``...``end`` around the reasoning at the beginning of the output. ``stream_parser``:
    formats that need more (several spellings, harmony channels) parse the whole output themselves."""

    name: str
    start: str
    end: str
    special_tokens: tuple[str, ...] = ()  # as ToolCallFormat.special_tokens
    stream_parser: Callable[[ParserContext], OutputParser] | None = None

    @property
    def starts(self) -> tuple[str, ...]:
        return (self.start,)

    @property
    def ends(self) -> tuple[str, ...]:
        return (self.end,)


class ReasoningMarkers(Protocol):
    """The spellings that open (``starts``) and close (``ends``) the reasoning."""

    @property
    def starts(self) -> tuple[str, ...]: ...
    @property
    def ends(self) -> tuple[str, ...]: ...


class ReasoningSplitter:
    """Separates the reasoning at the beginning of the output (``<think>...</think>``, or any of
    ``markers``' spellings) from the answer: an :class:`OutputParser` without calls.

    Reasoning never leaks into content and no marker reaches either; whitespace before the
    opening marker and newlines after the closing one belong to neither; output that never closes
    its reasoning is all reasoning. ``in_reasoning``: the output starts inside the reasoning (the
    prompt opened it, templates that end with ``<think>``; or the family always does), and an
    opening marker the model writes anyway is dropped.
    """

    def __init__(self, markers: ReasoningMarkers, *, in_reasoning: bool = False) -> None:
        self._starts, self._ends = markers.starts, markers.ends
        self._opened = in_reasoning
        self._state = "start"  # start -> reasoning -> after -> content, or start -> content
        self._pending = ""  # text that may still be (part of) a marker

    def push(self, text: str) -> Parsed:
        out = Parsed()
        self._pending += text
        while self._pending:
            if self._state == "start":
                stripped = self._pending.lstrip()
                start = next((marker for marker in self._starts if stripped.startswith(marker)), None)
                if start is not None:
                    self._pending = stripped[len(start) :]
                    self._state = "reasoning"
                elif any(marker.startswith(stripped) for marker in self._starts):
                    return out  # maybe an opening marker, still arriving
                else:
                    self._state = "reasoning" if self._opened else "content"
            elif self._state == "reasoning":
                found = first_marker(self._pending, self._ends)
                if found is None:
                    keep = partial_marker(self._pending, self._ends)
                    out.reasoning += self._pending[: len(self._pending) - keep]
                    self._pending = self._pending[len(self._pending) - keep :]
                    return out
                position, end = found
                out.reasoning += self._pending[:position]
                self._pending = self._pending[position + len(end) :]
                self._state = "after"
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


def inside_json_string(text: str) -> bool:
    """An ``open_payload`` for JSON payloads: whether ``text`` ends inside a JSON string (an odd
    count of unescaped quotes), where the block's end marker is argument text."""
    inside = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = inside
        elif char == '"':
            inside = not inside
    return inside


def first_marker(text: str, markers: Iterable[str]) -> tuple[int, str] | None:
    """The earliest of ``markers`` in ``text`` and its position (at a tie, the first listed)."""
    best: tuple[int, str] | None = None
    for marker in markers:
        position = text.find(marker)
        if position != -1 and (best is None or position < best[0]):
            best = (position, marker)
    return best


def split_at_marker(text: str, markers: Sequence[str]) -> tuple[str, str | None, str]:
    """``text`` cut at its first marker: (the text before it, the marker, the text after it); or,
    without a whole marker, (the text that is surely text, None, the end held back as a marker may
    be arriving: :func:`partial_marker`)."""
    found = first_marker(text, markers)
    if found is None:
        cut = len(text) - partial_marker(text, markers)
        return text[:cut], None, text[cut:]
    position, marker = found
    return text[:position], marker, text[position + len(marker) :]


def partial_marker(text: str, markers: Iterable[str]) -> int:
    """The length of the longest end of ``text`` that begins one of ``markers`` without being all
    of it: text a stream parser holds back, as a marker may still be arriving."""
    keep = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), keep, -1):
            if marker.startswith(text[-size:]):
                keep = size
                break
    return keep
