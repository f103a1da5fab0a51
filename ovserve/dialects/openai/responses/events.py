"""Output items from the core's parsed steps, and the Responses stream events that build them.

One :class:`OutputBuilder` per response: the unary answer and the stream use the same builder,
so a stream and a unary response of the same generation have the same items.
"""

from __future__ import annotations

import uuid
from typing import Any

from ovserve.core.job import Delta
from ovserve.parsers.base import ToolCall

Item = dict[str, Any]


def new_id(prefix: str) -> str:
    """OpenAI's id shape: ``<prefix>_<hex>`` (resp_, msg_, rs_, fc_)."""
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputBuilder:
    """Output items from parsed steps, and the stream events that build them.

    At most one item receives text at a time (a reasoning or a message item); a function call
    closes it and is emitted whole. Whitespace between reasoning and a function call does not
    open a message (chat reports such content as null).
    """

    def __init__(self, items: list[Item] | None = None) -> None:
        self.items: list[Item] = items if items is not None else []
        self._open: Item | None = None
        self._held = ""  # whitespace not yet known to start a message

    def push(self, step: Delta) -> list[Item]:
        events: list[Item] = []
        if step.reasoning:
            events += self._text("reasoning", step.reasoning)
        if step.content:
            if self._open is None or self._open["type"] != "message":
                if not (self._held + step.content).strip():
                    self._held += step.content
                else:
                    events += self._text("message", self._held + step.content)
                    self._held = ""
            else:
                events += self._text("message", step.content)
        for call in step.tool_calls:
            self._held = ""
            events += self._close("completed")
            events += self._call(call)
        return events

    def finish(self, status: str) -> list[Item]:
        """Close the open item; a response without any output gets its (empty) message."""
        events: list[Item] = []
        if self._held or not any(item["type"] in ("message", "function_call") for item in self.items):
            if self._open is None or self._open["type"] != "message":
                events += self._text("message", self._held)
            self._held = ""
        return events + self._close(status)

    def _text(self, kind: str, text: str) -> list[Item]:
        events: list[Item] = []
        if self._open is None or self._open["type"] != kind:
            events += self._close("completed")
            events += self._start(kind)
        item = self._open
        assert item is not None
        if not text:  # an empty message (the model said nothing): no delta to send
            return events
        item["content"][0]["text"] += text
        delta = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        extra: Item = {"logprobs": []} if kind == "message" else {}
        events.append(
            {"type": delta, "item_id": item["id"], "output_index": len(self.items) - 1, "content_index": 0,
             "delta": text, **extra}
        )  # fmt: skip
        return events

    def _start(self, kind: str) -> list[Item]:
        if kind == "message":
            part: Item = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item: Item = {"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant"}
        else:
            part = {"type": "reasoning_text", "text": ""}
            item = {"id": new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": []}
        self.items.append({**item, "content": [part]})
        self._open = self.items[-1]
        index = len(self.items) - 1
        return [
            {"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}},
            {"type": "response.content_part.added", "item_id": item["id"], "output_index": index,
             "content_index": 0, "part": dict(part)},
        ]  # fmt: skip

    def _close(self, status: str) -> list[Item]:
        item = self._open
        if item is None:
            return []
        self._open = None
        item["status"] = status
        index = self.items.index(item)
        part = item["content"][0]
        if item["type"] == "message":
            done: Item = {"type": "response.output_text.done", "text": part["text"], "logprobs": []}
        else:
            done = {"type": "response.reasoning_text.done", "text": part["text"]}
        return [
            {**done, "item_id": item["id"], "output_index": index, "content_index": 0},
            {"type": "response.content_part.done", "item_id": item["id"], "output_index": index,
             "content_index": 0, "part": dict(part)},
            {"type": "response.output_item.done", "output_index": index, "item": copy_item(item)},
        ]  # fmt: skip

    def _call(self, call: ToolCall) -> list[Item]:
        item: Item = {
            "id": new_id("fc"),
            "type": "function_call",
            "status": "completed",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        }
        self.items.append(item)
        index = len(self.items) - 1
        common = {"item_id": item["id"], "output_index": index}
        return [
            {"type": "response.output_item.added", "output_index": index,
             "item": {**item, "status": "in_progress", "arguments": ""}},
            {"type": "response.function_call_arguments.delta", **common, "delta": call.arguments},
            {"type": "response.function_call_arguments.done", **common, "name": call.name, "arguments": call.arguments},
            {"type": "response.output_item.done", "output_index": index, "item": dict(item)},
        ]  # fmt: skip


def copy_item(item: Item) -> Item:
    return {**item, "content": [dict(part) for part in item.get("content", [])]}
