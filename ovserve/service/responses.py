"""The Responses API as a second protocol over the chat service.

A Responses request is translated into a chat completion request (:func:`chat_request`): the
stored conversation of ``previous_response_id``, then ``instructions`` and the ``input`` items,
become chat messages; function tools, ``tool_choice``, ``text.format`` and the sampling fields
map one to one. :class:`~ovserve.service.chat.ChatService` then prepares the job exactly as for
``/v3/chat/completions`` (template, media, tokenization, grammar, sampling), so there is one
generation path. Errors it raises name chat fields; :func:`responses_param` renames them to the
Responses request's JSON path (``messages.3.content.1.image_url`` -> ``input.2.content.1.image_url``).

On the way out, :class:`OutputBuilder` turns the chat job's parsed steps (reasoning, content,
tool calls) into output items -- ``reasoning``, ``message`` with ``output_text``,
``function_call`` -- and, for a stream, into OpenAI's events. The unary answer is built by the
same builder, so a stream and a unary response of the same generation have the same items.

Conversation state: a stored response keeps its whole conversation as input items (the previous
conversation, this input, this output; ``instructions`` are not carried over, as OpenAI
specifies). Continuing it renders the same messages as a client resending that history itself, so
the prompt, and with prefix caching the reused KV blocks, are the same.

Ownership: every store call carries the caller's ``owner`` (from the HTTP layer: a digest of the
API key presented, or :data:`~ovserve.service.response_store.OPEN_OWNER` without keys). ``GET``,
``DELETE`` and ``previous_response_id`` on another owner's response answer exactly as for an
unknown id (the same 404, message and param), so a response id tells one key nothing about
another key's responses.

Store faults (a full or read-only disk, a deleted database file: see
:mod:`~ovserve.service.response_store`) never cost a generation: a response that could not be
stored is returned as usual with ``store: false`` (:meth:`ResponsesService._keep`). What needs a
stored response now -- ``previous_response_id``, ``GET``, ``DELETE`` -- is a 503 with
``Retry-After`` (:func:`_store_unavailable`): the server cannot serve that conversation at the
moment, which is neither the client's fault (400) nor an unknown id (404).
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ovserve.errors import BadRequestError, NotFoundError, OvserveError, ServiceUnavailableError
from ovserve.parsers.base import ToolCall
from ovserve.protocol import ChatCompletionRequest, SamplingRequest
from ovserve.protocol_responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    FunctionToolChoice,
    InputImage,
    JSONSchemaTextFormat,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
    part_text,
)
from ovserve.protocol_responses import InputItem as InputItemUnion
from ovserve.service.chat import ChatJob, ChatService
from ovserve.service.output import ParsedDelta
from ovserve.service.response_store import ResponseStore, StoreFault

# Seconds a client is asked to wait after a store fault: a disk that filled up or went away is
# not back in a second, and a retry sooner only adds load.
STORE_RETRY_AFTER_S = 5
# The sampling fields a Responses request shares with chat, passed through as sent.
_SHARED_FIELDS = set(SamplingRequest.model_fields) - {"model", "stream", "stream_options"}
# OpenAI's error codes a response.failed event may carry; anything else reads server_error.
_FAILURE_CODES = frozenset(
    {"server_error", "rate_limit_exceeded", "invalid_prompt", "invalid_image", "image_too_large"}
)

Item = dict[str, Any]
InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem
# Stored items are read back through the request's own item models.
_STORED_ITEM: TypeAdapter[InputItem] = TypeAdapter(InputItemUnion)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


# -- request: Responses -> chat ----------------------------------------------------------------


@dataclass
class Conversation:
    """Chat messages, and for each the JSON path of the Responses field it came from."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    # The assistant message that reasoning, assistant text and function calls are merged into,
    # while they follow each other (one assistant turn of the chat template).
    _assistant: dict[str, Any] | None = None

    def add(self, message: dict[str, Any], origin: str) -> dict[str, Any]:
        self.messages.append(message)
        self.origins.append(origin)
        self._assistant = message if message["role"] == "assistant" else None
        return message

    def assistant(self, origin: str) -> dict[str, Any]:
        if self._assistant is None:
            return self.add({"role": "assistant", "content": None}, origin)
        return self._assistant

    def add_item(self, item: InputItem, origin: str) -> None:
        match item:
            case MessageItem(role="assistant"):
                turn = self.assistant(origin)
                text = item.content if isinstance(item.content, str) else "".join(_texts(item.content))
                turn["content"] = (turn["content"] or "") + text
            case MessageItem():
                self.add({"role": item.role, "content": _chat_content(item.content)}, origin)
            case ReasoningItem():
                turn = self.assistant(origin)
                turn["reasoning_content"] = turn.get("reasoning_content", "") + item.text()
            case FunctionCallItem():
                turn = self.assistant(origin)
                function = {"name": item.name, "arguments": item.arguments}
                turn.setdefault("tool_calls", []).append({"id": item.call_id, "type": "function", "function": function})
            case FunctionCallOutputItem():
                self.add({"role": "tool", "tool_call_id": item.call_id, "content": item.output_text()}, origin)

    def finish(self) -> list[dict[str, Any]]:
        for message in self.messages:
            # An assistant turn of reasoning only still needs content for the template.
            if message["role"] == "assistant" and message["content"] is None and not message.get("tool_calls"):
                message["content"] = ""
        return self.messages


def _texts(parts: list[Any]) -> list[str]:
    return [text for part in parts if (text := part_text(part)) is not None]


def _chat_content(content: str | list[Any]) -> str | list[dict[str, Any]]:
    """Parts in the same order, so a chat error's part index is the Responses part index."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, InputImage):
            image: dict[str, Any] = {"url": part.image_url}
            if part.detail is not None:
                image["detail"] = part.detail
            parts.append({"type": "image_url", "image_url": image})
        else:
            parts.append({"type": "text", "text": part_text(part)})
    return parts


def dump_item(item: InputItem) -> Item:
    return item.model_dump(mode="json", by_alias=True, exclude_none=True)


def conversation_of(request: ResponsesRequest, history: list[Item]) -> tuple[Conversation, list[Item]]:
    """The chat conversation of ``request`` after ``history`` (stored items), and this request's
    input as items (what a stored response adds to the conversation)."""
    conversation = Conversation()
    if request.instructions is not None:
        conversation.add({"role": "system", "content": request.instructions}, "instructions")
    for stored in history:
        conversation.add_item(_STORED_ITEM.validate_python(stored), "previous_response_id")
    items = request.items
    for position, item in enumerate(items):
        conversation.add_item(item, "input" if isinstance(request.input, str) else f"input.{position}")
    return conversation, [dump_item(item) for item in items]


def _tool_choice(request: ResponsesRequest) -> Any:
    if isinstance(request.tool_choice, FunctionToolChoice):
        return {"type": "function", "function": {"name": request.tool_choice.name}}
    return request.tool_choice


def _response_format(request: ResponsesRequest) -> dict[str, Any] | None:
    fmt = request.text_format
    if fmt is None:
        return None
    if isinstance(fmt, JSONSchemaTextFormat):
        spec = {"name": fmt.name, "description": fmt.description, "schema": fmt.schema_, "strict": fmt.strict}
        return {"type": "json_schema", "json_schema": {key: value for key, value in spec.items() if value is not None}}
    return fmt.model_dump(mode="json", by_alias=True, exclude_none=True)


def chat_request(request: ResponsesRequest, conversation: Conversation) -> dict[str, Any]:
    """The chat completion request body that generates this response."""
    body: dict[str, Any] = request.model_dump(include=_SHARED_FIELDS, exclude_unset=True, by_alias=True)
    body.update(model=request.model, stream=request.stream, messages=conversation.finish())
    if request.max_output_tokens is not None:
        body["max_completion_tokens"] = request.max_output_tokens
    if request.tools:
        body["tools"] = [
            {"type": "function", "function": tool.model_dump(exclude={"type"}, exclude_none=True)}
            for tool in request.tools
        ]
    if request.tool_choice is not None:
        body["tool_choice"] = _tool_choice(request)
    body["parallel_tool_calls"] = request.parallel_tool_calls
    response_format = _response_format(request)
    if response_format is not None:
        body["response_format"] = response_format
    if request.chat_template_kwargs is not None:
        body["chat_template_kwargs"] = request.chat_template_kwargs
    return body


def responses_param(param: str | None, request: ResponsesRequest, origins: list[str]) -> str | None:
    """A chat error's param as the Responses request's JSON path."""
    if param is None:
        return None
    head, _, rest = param.partition(".")
    if head == "messages":
        index, _, tail = rest.partition(".")
        if index.isdigit() and int(index) < len(origins):
            origin = origins[int(index)]
            # Only an input item has the message's shape below it; a string input, the
            # instructions or the stored history are the param as a whole.
            return origin + (f".{tail}" if tail and origin.startswith("input.") else "")
        return "input"
    if head in ("max_tokens", "max_completion_tokens"):
        return "max_output_tokens" if request.max_output_tokens is not None else "max_tokens"
    if head == "response_format":
        # response_format.json_schema.schema.x -> text.format.schema.x (the format is flat here)
        return ".".join(["text", "format", *rest.split(".")[1:]]) if rest else "text.format"
    if head == "tools":
        # tools.N.function.parameters -> tools.N.parameters
        return param.replace(".function.", ".", 1)
    return param


_CHAT_WORDS = re.compile(r"messages\[(\d+)\]|\bresponse_format\b|\bmax_tokens\b|\bthe messages\b")


def responses_message(message: str, request: ResponsesRequest, origins: list[str]) -> str:
    """A chat error's message in the Responses request's words (fields, item positions)."""

    def word(match: re.Match[str]) -> str:
        if match[1] is not None:
            index = int(match[1])
            return origins[index] if index < len(origins) else "input"
        if match[0] == "the messages":
            return "the input"
        name = responses_param(match[0], request, origins)
        return name or match[0]

    return _CHAT_WORDS.sub(word, message)


# -- the job -----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class ResponsesJob(ChatJob):
    """A chat job, plus what the response object echoes and what its stored row holds."""

    responses: ResponsesRequest | None = None
    conversation: list[Item] = field(default_factory=list)  # history + this input, as items
    store: bool = False  # the response is kept once it completes
    owner: str | None = None  # whose stored response it becomes (set by prepare)
    sequence_number: int = 0  # the stream's next event number
    output: list[Item] = field(default_factory=list)  # the output items so far (OutputBuilder's)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.id = _new_id("resp")  # OpenAI's shape, resp_<hex> (the job prefixes' is <prefix>-<hex>)

    @property
    def protocol_request(self) -> ResponsesRequest:
        assert self.responses is not None
        return self.responses


# -- output: parsed steps -> items and events --------------------------------------------------


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

    def push(self, step: ParsedDelta) -> list[Item]:
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
            item: Item = {"id": _new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant"}
        else:
            part = {"type": "reasoning_text", "text": ""}
            item = {"id": _new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": []}
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
            {"type": "response.output_item.done", "output_index": index, "item": _copy_item(item)},
        ]  # fmt: skip

    def _call(self, call: ToolCall) -> list[Item]:
        item: Item = {
            "id": _new_id("fc"),
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


def _copy_item(item: Item) -> Item:
    return {**item, "content": [dict(part) for part in item.get("content", [])]}


# -- the service --------------------------------------------------------------------------------


class ResponsesService:
    def __init__(self, chat: ChatService, store: ResponseStore) -> None:
        self.chat = chat
        self.store = store

    async def prepare(self, request: ResponsesRequest, *, owner: str) -> ResponsesJob:
        """The chat job of ``request`` from ``owner``, who may continue only their own responses."""
        history: list[Item] = []
        if request.previous_response_id is not None:
            history = await self._history(request.previous_response_id, owner)
        conversation, input_items = conversation_of(request, history)
        try:
            chat = ChatCompletionRequest.model_validate(chat_request(request, conversation))
        except ValidationError as exc:
            # The Responses model validated every field already: this names what chat still refused.
            error = exc.errors(include_url=False)[0]
            param = ".".join(str(part) for part in error["loc"] if not _is_union_member(part))
            raise BadRequestError(
                error["msg"].removeprefix("Value error, "),
                param=responses_param(param or None, request, conversation.origins),
            ) from None
        try:
            job = await self.chat.prepare(chat, ResponsesJob)
        except OvserveError as exc:
            exc.param = responses_param(exc.param, request, conversation.origins)
            exc.message = responses_message(exc.message, request, conversation.origins)
            exc.args = (exc.message,)
            raise
        assert isinstance(job, ResponsesJob)
        job.responses = request
        job.conversation = [*history, *input_items]
        job.store = request.store and self.store.enabled
        job.owner = owner
        return job

    async def _history(self, response_id: str, owner: str) -> list[Item]:
        if not self.store.enabled:
            raise BadRequestError(
                "previous_response_id needs the response store, which this server runs without "
                "(--responses_store none); send the whole conversation as input",
                param="previous_response_id",
            )
        try:
            stored = await self.store.get(response_id, owner=owner)
        except StoreFault as exc:
            raise _store_unavailable("previous_response_id") from exc
        if stored is None:
            raise NotFoundError(
                f"no stored response '{response_id}' (never stored, deleted, or evicted from the store)",
                param="previous_response_id",
            )
        return stored.conversation

    # -- unary ----------------------------------------------------------------------------

    async def complete(self, job: ResponsesJob) -> dict[str, Any]:
        builder = OutputBuilder(job.output)
        async with contextlib.aclosing(job.steps()) as steps:
            async for _choice, _delta, step, _first in steps:
                builder.push(step)
        status = _status(job)
        builder.finish(_item_status(status))
        response = self.response_object(job, status, builder.items, usage=self.usage(job))
        await self._keep(job, response)
        return response

    # -- stream ---------------------------------------------------------------------------

    def _event(self, job: ResponsesJob, event: Item) -> Item:
        numbered = {"type": event["type"], "sequence_number": job.sequence_number, **event}
        job.sequence_number += 1
        return numbered

    async def stream(self, job: ResponsesJob) -> AsyncGenerator[Item, None]:
        started = self.response_object(job, "in_progress", [])
        yield self._event(job, {"type": "response.created", "response": started})
        yield self._event(job, {"type": "response.in_progress", "response": started})
        builder = OutputBuilder(job.output)
        async with contextlib.aclosing(job.steps()) as steps:
            async for _choice, _delta, step, _first in steps:
                for event in builder.push(step):
                    yield self._event(job, event)
        status = _status(job)
        for event in builder.finish(_item_status(status)):
            yield self._event(job, event)
        response = self.response_object(job, status, builder.items, usage=self.usage(job))
        await self._keep(job, response)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        yield self._event(job, {"type": kind, "response": response})

    def failed_event(self, job: ResponsesJob, error: OvserveError) -> Item:
        """The last event of a stream that failed after it started (the engine died, the deadline)."""
        code = error.code if error.code in _FAILURE_CODES else "server_error"
        failure = {"code": code, "message": error.message}
        response = self.response_object(job, "failed", job.output, error=failure)
        return self._event(job, {"type": "response.failed", "response": response})

    # -- the response object ----------------------------------------------------------------

    def usage(self, job: ResponsesJob) -> dict[str, Any]:
        output_tokens = job.count.completion_tokens
        return {
            "input_tokens": job.prompt_tokens,
            # cached_tokens: what the engine's prefix-cache model counted (0 when unknown, as for a
            # VLM: the schema requires the field). The engine does not say how many generated tokens
            # were reasoning: 0 (see docs/responses-fields.md).
            "input_tokens_details": {"cached_tokens": job.count.cached_tokens or 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": job.prompt_tokens + output_tokens,
        }

    def response_object(
        self,
        job: ResponsesJob,
        status: str,
        output: list[Item],
        *,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        request = job.protocol_request
        text_format = _response_format_echo(request)
        response = {
            "id": job.id,
            "object": "response",
            "created_at": job.created,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "model": job.model.name,
            "output": [_copy_item(item) for item in output],
            "parallel_tool_calls": request.parallel_tool_calls,
            "previous_response_id": request.previous_response_id,
            "reasoning": request.reasoning.model_dump(mode="json") if request.reasoning else None,
            "store": job.store,
            "temperature": job.params.temperature,
            "text": {"format": text_format},
            "tool_choice": _tool_choice_echo(request),
            "tools": [_tool_echo(tool) for tool in request.tools or []],
            "top_p": job.params.top_p,
            "truncation": "disabled",
            "metadata": request.metadata or {},
        }
        if usage is not None:  # the schema has no null usage: left out until it is known
            response["usage"] = usage
        return response

    async def _keep(self, job: ResponsesJob, response: dict[str, Any]) -> None:
        """Store ``response`` if the request asked to; if it could not be kept, say so in it.

        A store fault (logged and counted by the store) does not fail the request: the generation
        succeeded and the client gets it, as unary body or ``response.completed`` event. Its
        ``store`` then reads false, the field that already tells a client whether the response was
        kept (as with ``--responses_store none``): the schema's own way to say "do not use this id
        for ``previous_response_id`` or ``GET``", which every OpenAI client accepts. A later ``GET``
        of the id is a 404, as for any response that was not stored. (The stream's
        ``response.created`` event said true: it was sent before the generation, when keeping it
        was still the plan.) A response larger than the store's bounds is likewise not kept.
        """
        if not job.store:
            return
        assert job.owner is not None
        try:
            kept = await self.store.put(response, [*job.conversation, *response["output"]], owner=job.owner)
        except StoreFault:
            kept = False
        if not kept:
            job.store = False
            response["store"] = False

    # -- GET / DELETE -------------------------------------------------------------------------

    async def retrieve(self, response_id: str, *, owner: str) -> dict[str, Any]:
        if not self.store.enabled:
            raise _unknown(response_id)
        try:
            stored = await self.store.get(response_id, owner=owner, conversation=False)
        except StoreFault as exc:
            raise _store_unavailable("response_id") from exc
        if stored is None:
            raise _unknown(response_id)
        return stored.response

    async def delete(self, response_id: str, *, owner: str) -> dict[str, Any]:
        if not self.store.enabled:
            raise _unknown(response_id)
        try:
            deleted = await self.store.delete(response_id, owner=owner)
        except StoreFault as exc:
            raise _store_unavailable("response_id") from exc
        if not deleted:
            raise _unknown(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}


def _unknown(response_id: str) -> NotFoundError:
    return NotFoundError(f"no stored response '{response_id}' (never stored, deleted, or evicted)", param="response_id")


def _store_unavailable(param: str) -> ServiceUnavailableError:
    return ServiceUnavailableError(
        "the response store cannot be used right now (a disk or database fault, logged on the server); "
        "retry later, or send the whole conversation as input",
        param=param,
        code="store_unavailable",
        retry_after=STORE_RETRY_AFTER_S,
    )


def _status(job: ResponsesJob) -> str:
    # "length" is max_output_tokens (or the context) running out: OpenAI's incomplete response.
    return "incomplete" if job.outcome == "length" else "completed"


def _item_status(status: str) -> str:
    return "incomplete" if status == "incomplete" else "completed"


def _response_format_echo(request: ResponsesRequest) -> dict[str, Any]:
    fmt = request.text_format
    if fmt is None:
        return {"type": "text"}
    return fmt.model_dump(mode="json", by_alias=True, exclude_none=True)


def _tool_echo(tool: FunctionTool) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": tool.strict,
    }


def _tool_choice_echo(request: ResponsesRequest) -> Any:
    if isinstance(request.tool_choice, FunctionToolChoice):
        return {"type": "function", "name": request.tool_choice.name}
    return request.tool_choice or "auto"


def _is_union_member(part: object) -> bool:
    return isinstance(part, str) and (part.startswith(("str", "list[", "function-")) or part[:1].isupper())
