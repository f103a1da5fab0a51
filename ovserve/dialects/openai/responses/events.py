"""Output items from the core's parsed steps, and the Responses stream events that build them.

One :class:`OutputBuilder` per response: the unary answer and the stream use the same builder,
so a stream and a unary response of the same generation have the same items. A stream's
commonest step, text added to the open item, is encoded without building its event
(:meth:`OutputBuilder.text_event`, byte for byte the model's encoding:
tests/unit/test_stream_templates.py).

The open item's text is kept as its pieces and joined into the item when the item closes, or when
someone reads the items (:meth:`OutputBuilder.output`): appending to a model's text field at every
token would copy the whole text each time (quadratic in a long answer) through pydantic's
``__setattr__``. Read the items through :meth:`~OutputBuilder.output`, not the list given.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from ovserve.core.job import Delta
from ovserve.dialects.body import NUMBER_HOLE, EncodedBody, Template, json_string, text_hole
from ovserve.dialects.openai.responses.response import (
    ItemStatus,
    OutputFunctionCall,
    OutputItem,
    OutputMessage,
    OutputReasoning,
    OutputTextContent,
    ReasoningTextContent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from ovserve.parsers.calls import ToolCall, arguments_json

TextItem = OutputMessage | OutputReasoning


def new_id(prefix: str) -> str:
    """OpenAI's id shape: ``<prefix>_<hex>`` (resp_, msg_, rs_, fc_)."""
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputBuilder:
    """Output items from parsed steps, and the stream events that build them.

    At most one item receives text at a time (a reasoning or a message item), and it is always the
    last item; a function call closes it and is emitted whole. Whitespace between reasoning and a
    function call does not open a message (chat reports such content as null).

    ``numbers`` numbers the events (their ``sequence_number``), shared with the events the endpoint
    writes around these. An event about an open item carries a copy of it (it is written after the
    builder has gone on filling the item); a closed item no longer changes.
    """

    def __init__(self, items: list[OutputItem], numbers: Iterator[int]) -> None:
        self.items = items
        self._numbers = numbers
        self._open: TextItem | None = None
        self._pieces: list[str] = []  # the open item's text, not yet joined into it
        self._held = ""  # whitespace not yet known to start a message
        self._deltas: Template | None = None  # the open item's delta event, with holes (text_event)

    def output(self) -> list[OutputItem]:
        """The items so far, the open one's text up to date."""
        if self._open is not None:
            self._open.content[0].text = "".join(self._pieces)
        return self.items

    def text_event(self, step: Delta) -> EncodedBody | None:
        """The event of a step that only adds text to the open item, encoded without building it
        (the item's delta event was encoded once, with holes for its number and text); None for
        every other step, which :meth:`push` takes."""
        item = self._open
        if self._deltas is None or step.tool_calls:
            return None
        if step.content and not step.reasoning and isinstance(item, OutputMessage):
            text = step.content
        elif step.reasoning and not step.content and isinstance(item, OutputReasoning):
            text = step.reasoning
        else:
            return None
        self._pieces.append(text)
        return self._deltas.fill(str(self._number()), json_string(text))

    def push(self, step: Delta) -> list[ResponseStreamEvent]:
        events: list[ResponseStreamEvent] = []
        if step.reasoning:
            events += self._text(OutputReasoning, step.reasoning)
        if step.content:
            if not isinstance(self._open, OutputMessage):
                if not (self._held + step.content).strip():
                    self._held += step.content
                else:
                    events += self._text(OutputMessage, self._held + step.content)
                    self._held = ""
            else:
                events += self._text(OutputMessage, step.content)
        for call in step.tool_calls:
            self._held = ""
            events += self._close("completed")
            events += self._call(call)
        return events

    def finish(self, status: ItemStatus) -> list[ResponseStreamEvent]:
        """Close the open item; a response without any output gets its (empty) message."""
        events: list[ResponseStreamEvent] = []
        if self._held or not any(isinstance(item, OutputMessage | OutputFunctionCall) for item in self.items):
            if not isinstance(self._open, OutputMessage):
                events += self._text(OutputMessage, self._held)
            self._held = ""
        return events + self._close(status)

    def _number(self) -> int:
        return next(self._numbers)

    def _text(self, kind: type[TextItem], text: str) -> list[ResponseStreamEvent]:
        events: list[ResponseStreamEvent] = []
        if not isinstance(self._open, kind):
            events += self._close("completed")
            events += self._start(kind)
        item = self._open
        assert item is not None
        if not text:  # an empty message (the model said nothing): no delta to send
            return events
        self._pieces.append(text)
        events.append(_delta_event(item, len(self.items) - 1, self._number(), text))
        return events

    def _start(self, kind: type[TextItem]) -> list[ResponseStreamEvent]:
        item: TextItem
        if kind is OutputMessage:
            text = OutputTextContent(type="output_text", text="", annotations=(), logprobs=())
            item = OutputMessage(
                id=new_id("msg"), type="message", status="in_progress", role="assistant", content=[text]
            )
        else:
            thought = ReasoningTextContent(type="reasoning_text", text="")
            item = OutputReasoning(
                id=new_id("rs"), type="reasoning", status="in_progress", summary=(), content=[thought]
            )
        self.items.append(item)
        self._open = item
        self._pieces = []
        index = len(self.items) - 1
        self._deltas = Template.of(_delta_event(item, index, NUMBER_HOLE, text_hole(0)), NUMBER_HOLE, text_hole(0))
        return [
            ResponseOutputItemAddedEvent(
                type="response.output_item.added", sequence_number=self._number(),
                output_index=index, item=item.model_copy(update={"content": []}),
            ),
            ResponseContentPartAddedEvent(
                type="response.content_part.added", sequence_number=self._number(),
                item_id=item.id, output_index=index, content_index=0, part=item.content[0].model_copy(),
            ),
        ]  # fmt: skip

    def _close(self, status: ItemStatus) -> list[ResponseStreamEvent]:
        item = self._open
        if item is None:
            return []
        item.content[0].text = "".join(self._pieces)
        self._open = self._deltas = None
        self._pieces = []
        item.status = status
        index = len(self.items) - 1
        part = item.content[0]
        done: ResponseStreamEvent
        if isinstance(item, OutputMessage):
            done = ResponseTextDoneEvent(
                type="response.output_text.done", sequence_number=self._number(),
                text=part.text, logprobs=(), item_id=item.id, output_index=index, content_index=0,
            )  # fmt: skip
        else:
            done = ResponseReasoningTextDoneEvent(
                type="response.reasoning_text.done", sequence_number=self._number(),
                text=part.text, item_id=item.id, output_index=index, content_index=0,
            )  # fmt: skip
        return [
            done,
            ResponseContentPartDoneEvent(
                type="response.content_part.done", sequence_number=self._number(),
                item_id=item.id, output_index=index, content_index=0, part=part,
            ),
            ResponseOutputItemDoneEvent(
                type="response.output_item.done", sequence_number=self._number(), output_index=index, item=item
            ),
        ]  # fmt: skip

    def _call(self, call: ToolCall) -> list[ResponseStreamEvent]:
        arguments = arguments_json(call.arguments)  # OpenAI's string, written once for the item and its events
        item = OutputFunctionCall(
            id=new_id("fc"),
            type="function_call",
            status="completed",
            call_id=call.id,
            name=call.name,
            arguments=arguments,
        )
        self.items.append(item)
        index = len(self.items) - 1
        return [
            ResponseOutputItemAddedEvent(
                type="response.output_item.added", sequence_number=self._number(),
                output_index=index, item=item.model_copy(update={"status": "in_progress", "arguments": ""}),
            ),
            ResponseFunctionCallArgumentsDeltaEvent(
                type="response.function_call_arguments.delta", sequence_number=self._number(),
                item_id=item.id, output_index=index, delta=arguments,
            ),
            ResponseFunctionCallArgumentsDoneEvent(
                type="response.function_call_arguments.done", sequence_number=self._number(),
                item_id=item.id, output_index=index, name=call.name, arguments=arguments,
            ),
            ResponseOutputItemDoneEvent(
                type="response.output_item.done", sequence_number=self._number(), output_index=index, item=item
            ),
        ]  # fmt: skip


def _delta_event(item: TextItem, index: int, number: int, text: str) -> ResponseStreamEvent:
    """The event adding ``text`` to the open item at ``index``."""
    if isinstance(item, OutputMessage):
        return ResponseTextDeltaEvent(
            type="response.output_text.delta", sequence_number=number,
            item_id=item.id, output_index=index, content_index=0, delta=text, logprobs=(),
        )  # fmt: skip
    return ResponseReasoningTextDeltaEvent(
        type="response.reasoning_text.delta", sequence_number=number,
        item_id=item.id, output_index=index, content_index=0, delta=text,
    )  # fmt: skip
