"""Streaming extraction of tool calls and reasoning from model text.

A tool-call format is data (:class:`ToolCallFormat`: where calls start, where they end, how to
decode the payload); one state machine (:class:`ToolCallExtractor`) runs every format, so each
parser module only says what its model writes. Text arrives in arbitrary pieces (stream deltas);
the extractor holds back text that could be the start of a marker, never emits a marker as
content, and falls back to plain content when a payload does not decode.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as OpenAI's function.arguments
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")


class PayloadError(ValueError):
    """The text between the markers is not a tool call of this format."""


def call_from_object(item: Any, *, arguments_keys: tuple[str, ...] = ("arguments", "parameters")) -> ToolCall:
    """``{"name": ..., "arguments": {...}}`` (arguments may also be a JSON string) -> ToolCall."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        raise PayloadError("a tool call needs a 'name'")
    arguments: Any = {}
    for key in arguments_keys:
        if key in item:
            arguments = item[key]
            break
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise PayloadError(f"arguments are not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise PayloadError("arguments must be a JSON object")
    return ToolCall(name=item["name"], arguments=json.dumps(arguments, ensure_ascii=False))


def decode_json(payload: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise PayloadError(f"not JSON: {exc}") from exc


@dataclass(frozen=True)
class ToolCallFormat:
    """How one model family writes tool calls.

    ``starts``: markers that open a call block. ``end``: the marker that closes it, or None when
    the block runs to the end of the output. ``start_of_output_only``: markers that only count
    as the very first non-space text (Llama 3 writes bare JSON). ``decode`` turns a block's
    payload into calls and raises :class:`PayloadError` when it is not a call.
    """

    name: str
    starts: tuple[str, ...]
    end: str | None
    decode: Callable[[str], list[ToolCall]]
    start_of_output_only: tuple[str, ...] = ()
    # Keep the start marker in the payload (Llama 3's "{" is part of the JSON).
    marker_in_payload: tuple[str, ...] = ()
    # The text before and after one ``{"name", "arguments"}`` call, for formats whose calls a
    # grammar can force (ovserve.core.guided); None: tool_choice cannot force a call.
    json_call_wrap: tuple[str, str] | None = None


@dataclass
class Extracted:
    """What a piece of model text turned into."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


class ToolCallExtractor:
    def __init__(self, fmt: ToolCallFormat) -> None:
        self._fmt = fmt
        self._pending = ""  # content that may be the beginning of a start marker
        self._block: str | None = None  # inside a call block: its text so far (marker included)
        self._marker = ""
        self._seen_text = False  # start_of_output_only markers are over once text was emitted

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
            if self._fmt.end is None:
                self._decode_into(block, out)
            else:
                out.content += block  # unterminated: not a call after all
        out.content += self._pending
        self._pending = ""
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
            self._block, self._marker = marker, marker
            self._pending = text[position + len(marker) :]
            return True
        # No marker yet: keep back whatever could still become one.
        keep = self._holdback(text)
        self._emit_content(out, text[: len(text) - keep])
        self._pending = text[len(text) - keep :]
        return False

    def _holdback(self, text: str) -> int:
        keep = 0
        for marker in self._markers():
            if marker in self._fmt.start_of_output_only:
                if not text.strip() or marker.startswith(text.lstrip()):
                    keep = max(keep, len(text))
                continue
            for size in range(min(len(marker) - 1, len(text)), 0, -1):
                if marker.startswith(text[-size:]):
                    keep = max(keep, size)
                    break
        return keep

    def _emit_content(self, out: Extracted, text: str) -> None:
        if text:
            out.content += text
            if text.strip():
                self._seen_text = True

    def _consume_block(self, out: Extracted) -> bool:
        assert self._block is not None
        end = self._fmt.end
        if end is None:
            self._block += self._pending
            self._pending = ""
            return False
        position = self._pending.find(end)
        if position == -1:
            return False  # wait for the end marker (finish() handles a block that never closes)
        block = self._block + self._pending[: position + len(end)]
        self._pending = self._pending[position + len(end) :]
        self._block = None
        self._decode_into(block, out)
        return True

    def _decode_into(self, block: str, out: Extracted) -> None:
        payload = block[len(self._marker) :]
        if self._fmt.end is not None and payload.endswith(self._fmt.end):
            payload = payload[: -len(self._fmt.end)]
        if self._marker in self._fmt.marker_in_payload:
            payload = self._marker + payload
        try:
            calls = self._fmt.decode(payload.strip())
        except PayloadError:
            self._emit_content(out, block)  # malformed: the client sees what the model wrote
            return
        out.tool_calls.extend(calls)
        self._seen_text = True


@dataclass(frozen=True)
class ReasoningFormat:
    name: str
    start: str
    end: str


@dataclass
class Split:
    reasoning: str = ""
    content: str = ""


class ReasoningSplitter:
    """Separates ``<think>...</think>`` from the answer; reasoning never leaks into content.

    ``in_reasoning``: the prompt already opened the block (templates that end with ``<think>``),
    so the output starts inside it.
    """

    def __init__(self, fmt: ReasoningFormat, *, in_reasoning: bool = False) -> None:
        self._fmt = fmt
        self._state = "reasoning" if in_reasoning else "start"
        self._pending = ""

    def push(self, text: str) -> Split:
        out = Split()
        self._pending += text
        while self._pending:
            if self._state == "start":
                stripped = self._pending.lstrip()
                if stripped.startswith(self._fmt.start):
                    self._pending = stripped[len(self._fmt.start) :]
                    self._state = "reasoning"
                elif self._fmt.start.startswith(stripped):
                    return out  # maybe the start tag, still arriving
                else:
                    self._state = "content"
            elif self._state == "reasoning":
                position = self._pending.find(self._fmt.end)
                if position != -1:
                    out.reasoning += self._pending[:position]
                    self._pending = self._pending[position + len(self._fmt.end) :]
                    self._state = "after_reasoning"
                    continue
                keep = _suffix_prefix(self._pending, self._fmt.end)
                out.reasoning += self._pending[: len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep :]
                return out
            elif self._state == "after_reasoning":
                # Templates put blank lines between </think> and the answer; they belong to neither.
                self._pending = self._pending.lstrip("\n")
                if self._pending:
                    self._state = "content"
            else:
                out.content += self._pending
                self._pending = ""
        return out

    def finish(self) -> Split:
        out = Split()
        if self._state == "reasoning":
            out.reasoning = self._pending  # the model never closed its thinking
        else:
            out.content = self._pending
        self._pending = ""
        return out


def _suffix_prefix(text: str, marker: str) -> int:
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
