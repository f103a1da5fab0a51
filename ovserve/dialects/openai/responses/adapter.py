"""The Responses API onto the core.

A Responses request becomes a :class:`~ovserve.core.conversation.Conversation` directly
(:func:`conversation_of`): the stored conversation of ``previous_response_id``, ``instructions``
and the ``input`` items become messages whose parts carry their Responses JSON path
(``input.2.content.1.image_url``); function tools, ``tool_choice``, ``text.format`` and the
sampling fields map one to one. The core prepares the job as for every chat-shaped dialect, and
its errors already name Responses fields. On the way out, :class:`~.events.OutputBuilder` turns
the core's steps into output items and, for a stream, OpenAI's events.

Conversation state: a stored response keeps its whole conversation as input items (the previous
conversation, this input, this output; ``instructions`` are not carried over, as OpenAI
specifies). Continuing it renders the same messages as a client resending that history itself, so
the prompt, and with prefix caching the reused KV blocks, are the same.

Ownership: every store call carries the caller's ``owner`` (from the HTTP layer: a digest of the
API key presented, or :data:`~ovserve.dialects.openai.responses.store.OPEN_OWNER` without keys). ``GET``,
``DELETE`` and ``previous_response_id`` on another owner's response answer exactly as for an
unknown id (the same 404, message and param), so a response id tells one key nothing about
another key's responses.

Store faults (a full or read-only disk, a deleted database file: see
:mod:`~ovserve.dialects.openai.responses.store`) never cost a generation: a response that could not be
stored is returned as usual with ``store: false`` (:meth:`ResponsesEndpoint._keep`). What needs a
stored response now -- ``previous_response_id``, ``GET``, ``DELETE`` -- is a 503 with
``Retry-After`` (:func:`_store_unavailable`): the server cannot serve that conversation at the
moment, which is neither the client's fault (400) nor an unknown id (404).

Replicas: with a store of each replica's own, an id this replica does not have, made by another
replica (:mod:`~ovserve.dialects.openai.responses.ids`), is a 404 naming that replica's hint and
the two fixes (sticky routing, a shared store): the same answer whether the response exists there
or not, so it tells a caller nothing the id did not. The store is asked first, so a replica that
restarted under another name (or port) still serves what its store holds.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic import TypeAdapter

from ovserve.core.chat import ChatGeneration, ChatJob
from ovserve.core.conversation import (
    Conversation,
    ForcedTool,
    Image,
    Message,
    Part,
    Reasoning,
    Text,
    ToolCall,
    ToolChoice,
)
from ovserve.dialects.body import Burst, EncodedBody
from ovserve.dialects.openai.responses.backends import Store
from ovserve.dialects.openai.responses.events import OutputBuilder, new_id
from ovserve.dialects.openai.responses.ids import ResponseIds
from ovserve.dialects.openai.responses.request import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    FunctionToolChoice,
    InputImage,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
    part_text,
)
from ovserve.dialects.openai.responses.request import InputItem as InputItemUnion
from ovserve.dialects.openai.responses.response import (
    FailureCode,
    IncompleteDetails,
    ItemStatus,
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseDeleted,
    ResponseError,
    ResponseFailedEvent,
    ResponseFunctionTool,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseReasoning,
    ResponseStatus,
    ResponseStreamEvent,
    ResponseText,
    ResponseToolChoice,
    ResponseUsage,
    TextFormat,
    TextFormatText,
)
from ovserve.dialects.openai.responses.store import StoreFault
from ovserve.errors import BadRequestError, NotFoundError, OvserveError, ServiceUnavailableError

# Seconds a client is asked to wait after a store fault: a disk that filled up or went away is
# not back in a second, and a retry sooner only adds load.
STORE_RETRY_AFTER_S = 5
# OpenAI's error codes a response.failed event may carry; anything else reads server_error.
_FAILURE_CODES: dict[str | None, FailureCode] = {code: code for code in get_args(FailureCode)}

InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem
# Stored items are read back through the request's own item models.
_STORED_ITEM: TypeAdapter[InputItem] = TypeAdapter(InputItemUnion)
_TEXT_FORMAT: TypeAdapter[TextFormat] = TypeAdapter(TextFormat)


# -- request: Responses -> Conversation ---------------------------------------------------------


class _Messages:
    """The conversation's messages as items arrive. Reasoning, assistant text and function calls
    that follow each other merge into one assistant turn (one assistant turn of the template)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._assistant: Message | None = None

    def add(self, message: Message) -> None:
        self.messages.append(message)
        self._assistant = message if message.role == "assistant" else None

    def assistant(self, origin: str) -> Message:
        if self._assistant is None:
            self.add(Message("assistant", origin))
        assert self._assistant is not None
        return self._assistant

    def add_item(self, item: InputItem, origin: str, *, whole: bool) -> None:
        """``whole``: the item's inner fields have no path of their own (stored history)."""

        def inner(path: str) -> str:
            return origin if whole else f"{origin}.{path}"

        match item:
            case MessageItem(role="assistant"):
                turn = self.assistant(origin)
                text = item.content if isinstance(item.content, str) else "".join(_texts(item.content))
                # Assistant text joins as one piece (the chat rendering of Responses history).
                previous = next((part for part in turn.parts if isinstance(part, Text)), None)
                if previous is None:
                    turn.parts.insert(0, Text(text, inner("content")))
                else:
                    turn.parts[turn.parts.index(previous)] = Text(previous.text + text, previous.origin)
            case MessageItem():
                role = "system" if item.role == "developer" else item.role
                self.add(Message(role, inner("content"), _parts(item, inner)))
            case ReasoningItem():
                self.assistant(origin).parts.append(Reasoning(item.text(), origin))
            case FunctionCallItem():
                self.assistant(origin).parts.append(ToolCall.from_text(item.call_id, item.name, item.arguments, origin))
            case FunctionCallOutputItem():
                output = Text(item.output_text(), inner("output"))
                self.add(Message("tool", inner("output"), [output], tool_call_id=item.call_id))


def _texts(parts: list[Any]) -> list[str]:
    return [text for part in parts if (text := part_text(part)) is not None]


def _parts(item: MessageItem, inner: Callable[[str], str]) -> list[Part]:
    if isinstance(item.content, str):
        return [Text(item.content, inner("content"))]
    parts: list[Part] = []
    for position, part in enumerate(item.content):
        if isinstance(part, InputImage):
            parts.append(Image(part.image_url, inner(f"content.{position}.image_url")))
        else:
            parts.append(Text(part_text(part) or "", inner(f"content.{position}")))
    return parts


def conversation_of(request: ResponsesRequest, history: list[InputItem]) -> Conversation:
    """The conversation of ``request`` after ``history`` (stored items)."""
    messages = _Messages()
    if request.instructions is not None:
        messages.add(Message("system", "instructions", [Text(request.instructions, "instructions")]))
    for stored in history:
        messages.add_item(stored, "previous_response_id", whole=True)
    if isinstance(request.input, str):
        messages.add(Message("user", "input", [Text(request.input, "input")]))
    else:
        for position, item in enumerate(request.items):
            messages.add_item(item, f"input.{position}", whole=False)
    return Conversation(
        model=request.model,
        messages=messages.messages,
        sampling=request.sampling(),
        prompt_origin="input",
        tools=[
            tool.tool(f"tools.{position}", f"tools.{position}.parameters")
            for position, tool in enumerate(request.tools or [])
        ],
        tool_choice=_tool_choice(request),
        parallel_tool_calls=request.parallel_tool_calls,
        output_format=request.output_format(),
        template_kwargs=request.chat_template_kwargs,
        reasoning_effort=request.reasoning.effort if request.reasoning is not None else None,
    )


def _tool_choice(request: ResponsesRequest) -> ToolChoice:
    if isinstance(request.tool_choice, FunctionToolChoice):
        return ForcedTool(request.tool_choice.name)
    return request.tool_choice or "auto"


# -- one request on its way ------------------------------------------------------------------


@dataclass(kw_only=True)
class ResponsesCall:
    """A Responses request being served: its core job and what the response object and its
    stored row need."""

    request: ResponsesRequest
    job: ChatJob
    conversation: list[InputItem]  # history + this input, as items
    store: bool  # the response is kept once it completes
    owner: str  # whose stored response it becomes
    id: str = field(default_factory=lambda: new_id("resp"))
    numbers: Iterator[int] = field(default_factory=itertools.count)  # the stream's event numbers
    builder: OutputBuilder = field(init=False)  # the output items so far, and their events

    def __post_init__(self) -> None:
        self.builder = OutputBuilder([], self.numbers)

    @property
    def streaming(self) -> bool:
        return self.request.stream


class ResponsesEndpoint:
    """The Responses dialect, as the HTTP layer drives it (``ovserve.api.envelope``), plus
    ``GET`` and ``DELETE`` of stored responses."""

    def __init__(self, generation: ChatGeneration, store: Store, ids: ResponseIds | None = None) -> None:
        self.generation = generation
        self.store = store
        self.ids = ids or ResponseIds()

    async def prepare(self, request: ResponsesRequest, caller: str) -> ResponsesCall:
        """The job of ``request`` from ``caller``, who may continue only their own responses."""
        history: list[InputItem] = []
        if request.previous_response_id is not None:
            history = await self._history(request.previous_response_id, caller)
        job = await self.generation.prepare(conversation_of(request, history))
        return ResponsesCall(
            id=self.ids.new(),
            request=request,
            job=job,
            conversation=[*history, *request.items],
            store=request.store and self.store.enabled,
            owner=caller,
        )

    async def _history(self, response_id: str, owner: str) -> list[InputItem]:
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
            raise self._missing(
                response_id,
                NotFoundError(
                    f"no stored response '{response_id}' (never stored, deleted, expired, or evicted from the store)",
                    param="previous_response_id",
                ),
            )
        return [_STORED_ITEM.validate_python(item) for item in stored.conversation]

    # -- unary ----------------------------------------------------------------------------

    async def complete(self, call: ResponsesCall) -> Response:
        builder = call.builder
        async with contextlib.aclosing(call.job.steps()) as steps:
            async for step in steps:
                builder.push(step)
        status = _status(call)
        builder.finish(_item_status(status))
        response = self.response_object(call, status, usage=ResponseUsage.of(call.job.usage))
        await self._keep(call, response)
        return response

    # -- stream ---------------------------------------------------------------------------

    async def stream(self, call: ResponsesCall) -> AsyncGenerator[ResponseStreamEvent | EncodedBody | Burst, None]:
        """The events, those of one moment as one :class:`Burst` (one write): the response's
        opening events, each step's (the first text opens its item), and the closing ones with the
        response's last event, sent once the response is stored."""
        started = self.response_object(call, "in_progress")
        yield Burst((
            ResponseCreatedEvent(type="response.created", sequence_number=next(call.numbers), response=started),
            ResponseInProgressEvent(type="response.in_progress", sequence_number=next(call.numbers), response=started),
        ))  # fmt: skip
        builder = call.builder
        async with contextlib.aclosing(call.job.steps()) as steps:
            async for step in steps:
                # A step that only adds text (nearly every token) is one event encoded without its model.
                if (encoded := builder.text_event(step)) is not None:
                    yield encoded
                elif events := builder.push(step):
                    yield Burst(tuple(events))
        status = _status(call)
        closing = builder.finish(_item_status(status))
        response = self.response_object(call, status, usage=ResponseUsage.of(call.job.usage))
        await self._keep(call, response)
        number = next(call.numbers)
        last: ResponseStreamEvent
        if status == "completed":
            last = ResponseCompletedEvent(type="response.completed", sequence_number=number, response=response)
        else:
            last = ResponseIncompleteEvent(type="response.incomplete", sequence_number=number, response=response)
        yield Burst((*closing, last))

    def failure_event(self, call: ResponsesCall, error: OvserveError) -> ResponseFailedEvent:
        """The last event of a stream that failed after it started (the engine died, the deadline)."""
        failure = ResponseError(code=_FAILURE_CODES.get(error.code, "server_error"), message=error.message)
        response = self.response_object(call, "failed", error=failure)
        return ResponseFailedEvent(type="response.failed", sequence_number=next(call.numbers), response=response)

    # -- the response object ----------------------------------------------------------------

    def response_object(
        self,
        call: ResponsesCall,
        status: ResponseStatus,
        *,
        usage: ResponseUsage | None = None,
        error: ResponseError | None = None,
    ) -> Response:
        """The response with the output items so far (none while ``in_progress``)."""
        request, job = call.request, call.job
        response = Response(
            id=call.id,
            object="response",
            created_at=job.created,
            status=status,
            completed_at=int(time.time()) if status == "completed" else None,
            error=error,
            incomplete_details=IncompleteDetails(reason="max_output_tokens") if status == "incomplete" else None,
            instructions=request.instructions,
            max_output_tokens=request.max_output_tokens,
            model=job.model.name,
            output=[] if status == "in_progress" else call.builder.output(),
            parallel_tool_calls=request.parallel_tool_calls,
            previous_response_id=request.previous_response_id,
            reasoning=_reasoning_echo(request),
            store=call.store,
            temperature=job.params.temperature,
            text=ResponseText(format=_response_format_echo(request)),
            tool_choice=_tool_choice_echo(request),
            tools=[_tool_echo(tool) for tool in request.tools or []],
            top_p=job.params.top_p,
            truncation="disabled",
            metadata=request.metadata or {},
        )
        if usage is not None:  # the schema has no null usage: left out until it is known
            response.usage = usage
        return response

    async def _keep(self, call: ResponsesCall, response: Response) -> None:
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
        if not call.store:
            return
        # The store keeps JSON: the conversation as the request's input items, then the output.
        conversation = [*(_dump_item(item) for item in call.conversation), *(item.dump() for item in response.output)]
        try:
            kept = await self.store.put(response.dump(), conversation, owner=call.owner)
        except StoreFault:
            kept = False
        if not kept:
            call.store = False
            response.store = False

    # -- GET / DELETE -------------------------------------------------------------------------

    def _missing(self, response_id: str, unknown: NotFoundError) -> NotFoundError:
        """The 404 of an id this store does not hold: ``unknown``, unless another replica made it."""
        if (hint := self.ids.elsewhere(response_id)) is None:
            return unknown
        return NotFoundError(
            f"response '{response_id}' is stored on replica {hint}, not on the one this request reached: "
            "send a conversation's requests to the replica that stored it (sticky routing), or give the "
            "replicas a shared store (--responses_store postgresql://...)",
            param=unknown.param,
            code="response_on_another_replica",
        )

    async def retrieve(self, response_id: str, *, owner: str) -> Response:
        if not self.store.enabled:
            raise _unknown(response_id)
        try:
            stored = await self.store.get(response_id, owner=owner, conversation=False)
        except StoreFault as exc:
            raise _store_unavailable("response_id") from exc
        if stored is None:
            raise self._missing(response_id, _unknown(response_id))
        return _stored_response(stored.response)

    async def delete(self, response_id: str, *, owner: str) -> ResponseDeleted:
        if not self.store.enabled:
            raise _unknown(response_id)
        try:
            deleted = await self.store.delete(response_id, owner=owner)
        except StoreFault as exc:
            raise _store_unavailable("response_id") from exc
        if not deleted:
            raise self._missing(response_id, _unknown(response_id))
        return ResponseDeleted(id=response_id, object="response.deleted", deleted=True)


def _unknown(response_id: str) -> NotFoundError:
    return NotFoundError(
        f"no stored response '{response_id}' (never stored, deleted, expired, or evicted)", param="response_id"
    )


def _store_unavailable(param: str) -> ServiceUnavailableError:
    return ServiceUnavailableError(
        "the response store cannot be used right now (a disk or database fault, logged on the server); "
        "retry later, or send the whole conversation as input",
        param=param,
        code="store_unavailable",
        retry_after=STORE_RETRY_AFTER_S,
    )


def _stored_response(stored: dict[str, Any]) -> Response:
    """A stored response object, read back through the response model.

    Rows written before the response models were typed (up to a589b3f) gave each function_call
    output item an empty ``content`` list, which the model does not have; dropped on reading.
    """
    for item in stored.get("output", []):
        if item.get("type") == "function_call" and item.get("content") == []:
            del item["content"]
    return Response.model_validate(stored)


def _dump_item(item: InputItem) -> dict[str, Any]:
    return item.model_dump(mode="json", by_alias=True, exclude_none=True)


def _status(call: ResponsesCall) -> ResponseStatus:
    # "length" is max_output_tokens (or the context) running out: OpenAI's incomplete response.
    return "incomplete" if call.job.outcome == "length" else "completed"


def _item_status(status: ResponseStatus) -> ItemStatus:
    return "incomplete" if status == "incomplete" else "completed"


# The echoes of reasoning and text.format keep what the client sent, unknown fields included.


def _reasoning_echo(request: ResponsesRequest) -> ResponseReasoning | None:
    if request.reasoning is None:
        return None
    return ResponseReasoning.model_validate(request.reasoning.model_dump(mode="json"))


def _response_format_echo(request: ResponsesRequest) -> TextFormat:
    fmt = request.text_format
    if fmt is None:
        return TextFormatText(type="text")
    return _TEXT_FORMAT.validate_python(fmt.model_dump(mode="json", by_alias=True, exclude_none=True))


def _tool_echo(tool: FunctionTool) -> ResponseFunctionTool:
    return ResponseFunctionTool(
        type="function", name=tool.name, description=tool.description, parameters=tool.parameters, strict=tool.strict
    )


def _tool_choice_echo(request: ResponsesRequest) -> Literal["none", "auto", "required"] | ResponseToolChoice:
    if isinstance(request.tool_choice, FunctionToolChoice):
        return ResponseToolChoice(type="function", name=request.tool_choice.name)
    return request.tool_choice or "auto"
