"""Content blocks from the core's parsed steps, and the stream events that build them.

One :class:`BlockBuilder` per message: the unary answer and the stream use the same builder, so the
stream, accumulated as the ``anthropic`` SDK's stream helpers do, is the unary message.

Blocks: reasoning becomes a ``thinking`` block, text a ``text`` block, each parsed tool call a
``tool_use`` block, in the order the model wrote them; a block closes when another kind starts.
At most one thinking or text block is open at a time, and it is the last block. Whitespace before
a text block starts is held (whitespace between reasoning and a tool call opens no text block).

A thinking block's ``signature`` is a digest of its text: clients send thinking blocks back with
their signature, and the server has nothing to verify (it renders the text, or not, as the chat
template decides), so the digest only gives the field the value Anthropic's shape requires.

A stream's commonest step, text added to the open block, is encoded without building its event
(:meth:`BlockBuilder.text_event`, byte for byte the model's encoding:
tests/unit/test_stream_templates.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Literal

from ovserve.core.job import Delta
from ovserve.dialects.anthropic.response import (
    ContentBlock,
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    ContentBlockStopEvent,
    InputJsonDelta,
    SignatureDelta,
    StreamEvent,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
)
from ovserve.dialects.body import EncodedBody, Template, json_string, text_hole
from ovserve.parsers.calls import ToolCall

OpenKind = Literal["thinking", "text"]


def new_id(prefix: str) -> str:
    """Anthropic's id shape: ``msg_...``, ``toolu_...``."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def tool_use_id(call: ToolCall) -> str:
    """A parsed call's id as Anthropic writes it (``toolu_``); the parser's own id otherwise kept."""
    return call.id if call.id.startswith("toolu_") else "toolu_" + call.id.removeprefix("call_")


def signature(thinking: str) -> str:
    return base64.b64encode(hashlib.sha256(b"ovserve thinking\0" + thinking.encode()).digest()).decode()


class BlockBuilder:
    """The message's content blocks from parsed steps, and the stream events that build them."""

    def __init__(self) -> None:
        self.blocks: list[ContentBlock] = []
        self._open: OpenKind | None = None
        self._held = ""  # whitespace not yet known to start a text block
        self._deltas: Template | None = None  # the open block's delta event, with a hole for its text

    def text_event(self, delta: Delta) -> EncodedBody | None:
        """The event of a step that only adds text to the open block, encoded without building it
        (the block's delta event was encoded once, with a hole for the text); None for every
        other step, which :meth:`push` takes."""
        if self._deltas is None or delta.tool_calls:
            return None
        block = self.blocks[-1]
        if delta.content and not delta.reasoning and isinstance(block, TextBlock):
            block.text += delta.content
            return self._deltas.fill(json_string(delta.content))
        if delta.reasoning and not delta.content and isinstance(block, ThinkingBlock):
            block.thinking += delta.reasoning
            return self._deltas.fill(json_string(delta.reasoning))
        return None

    def push(self, delta: Delta) -> Iterator[StreamEvent]:
        if delta.reasoning:
            yield from self._append("thinking", delta.reasoning)
        if delta.content:
            yield from self._text(delta.content)
        for call in delta.tool_calls:
            yield from self._close()
            self._held = ""
            block = ToolUseBlock(type="tool_use", id=tool_use_id(call), name=call.name, input=call.arguments)
            index = len(self.blocks)
            self.blocks.append(block)
            # The input streams as JSON text (Anthropic's input_json_delta, the object's own encoding:
            # OpenAI's arguments string is not involved); the block starts empty, as Anthropic's does.
            yield ContentBlockStartEvent(
                type="content_block_start", index=index, content_block=block.model_copy(update={"input": {}})
            )
            yield ContentBlockDeltaEvent(
                type="content_block_delta",
                index=index,
                delta=InputJsonDelta(type="input_json_delta", partial_json=json.dumps(block.input, ensure_ascii=False)),
            )
            yield ContentBlockStopEvent(type="content_block_stop", index=index)

    def finish(self) -> Iterator[StreamEvent]:
        """Close the open block; whitespace still held is dropped."""
        self._held = ""
        yield from self._close()

    def _text(self, text: str) -> Iterator[StreamEvent]:
        if self._open != "text" and not text.strip():
            self._held += text
            return
        text, self._held = self._held + text, ""
        yield from self._append("text", text)

    def _append(self, kind: OpenKind, text: str) -> Iterator[StreamEvent]:
        index = len(self.blocks) - 1
        if self._open != kind:
            yield from self._close()
            index = len(self.blocks)
            opened: ContentBlock
            if kind == "thinking":
                opened = ThinkingBlock(type="thinking", thinking="", signature="")
            else:
                opened = TextBlock(type="text", text="")
            self.blocks.append(opened)
            self._open = kind
            self._deltas = Template.of(_delta_event(index, kind, text_hole(0)), text_hole(0))
            yield ContentBlockStartEvent(type="content_block_start", index=index, content_block=opened.model_copy())
        block = self.blocks[index]
        if isinstance(block, ThinkingBlock):
            block.thinking += text
        elif isinstance(block, TextBlock):
            block.text += text
        yield _delta_event(index, kind, text)

    def _close(self) -> Iterator[StreamEvent]:
        if self._open is None:
            return
        index = len(self.blocks) - 1
        block = self.blocks[index]
        self._open = self._deltas = None
        if isinstance(block, ThinkingBlock):
            block.signature = signature(block.thinking)
            yield ContentBlockDeltaEvent(
                type="content_block_delta",
                index=index,
                delta=SignatureDelta(type="signature_delta", signature=block.signature),
            )
        yield ContentBlockStopEvent(type="content_block_stop", index=index)


def _delta_event(index: int, kind: OpenKind, text: str) -> ContentBlockDeltaEvent:
    """The event adding ``text`` to the open block at ``index``."""
    delta: ThinkingDelta | TextDelta
    if kind == "thinking":
        delta = ThinkingDelta(type="thinking_delta", thinking=text)
    else:
        delta = TextDelta(type="text_delta", text=text)
    return ContentBlockDeltaEvent(type="content_block_delta", index=index, delta=delta)
