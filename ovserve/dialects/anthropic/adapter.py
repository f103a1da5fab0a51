"""Anthropic's Messages API onto the core.

Request: a validated :class:`~.request.MessagesRequest` becomes a
:class:`~ovserve.core.conversation.Conversation` (:func:`conversation_of`), each part with its
path in the client's JSON (``messages.3.content.1.source``):

- ``system`` (a string or text blocks) is the leading system message; a ``role: "system"``
  message inside ``messages`` (Claude Code sends one) stays where it is if the model's template
  renders it there, else joins the system prompt (``Conversation.join_late_system``).
- A user message's text and image blocks are a user message; each ``tool_result`` block is a
  ``tool`` message answering its ``tool_use_id`` (which must be a ``tool_use`` of the previous
  assistant message), in block order; ``is_error`` results read ``Error: ...``.
- An assistant message's ``thinking`` blocks are reasoning, its text is content, its ``tool_use``
  blocks are calls (``input`` as JSON arguments); ``redacted_thinking`` is dropped (it is opaque).
  Consecutive messages of one role are one turn, as Anthropic combines them. A final assistant
  message is the start of the answer (``Conversation.continuation``).
- ``tool_choice``: ``auto``, ``any`` (a call is forced: the core's grammar), ``tool`` (that one),
  ``none``; ``disable_parallel_tool_use`` allows one call. ``thinking`` ``enabled``/``adaptive``/
  ``disabled`` is the template's ``enable_thinking`` switch; ``output_config.effort`` is the core's
  reasoning effort (the template's ``reasoning_effort``), ``output_config.format`` a JSON schema
  the engine's grammar holds the answer to.
- ``max_tokens`` over what the context leaves is clamped to it (``stop_reason`` says
  ``max_tokens`` when it is hit); ``stop_sequences`` end the text without appearing in it.

Response: the core's steps become content blocks through :class:`~.events.BlockBuilder`, for the
unary message and the stream alike. The stream's ``message_start`` is sent with the first engine
output, when the usage it carries is known (``cache_read_input_tokens``: the prompt tokens the
prefix cache served), and a ``ping`` follows it, as in Anthropic's streams; they go out in one write
with the first step's events (a :class:`~ovserve.dialects.body.Burst`), and the closing events in
another. A step that only adds
text to the open block is one event encoded without building its model
(:meth:`~.events.BlockBuilder.text_event`), and the endpoint's stream iterates the job's steps
itself: a streamed token crosses three async generators (the engine client's, ``Job.steps``, this
stream) and starts no task. While nothing is sent (a long prompt's prefill), the stream writer
keeps the connection busy (``ovserve.api.sse``: a keep-alive every 10 s of silence).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass, field

from ovserve.core.chat import ChatGeneration, ChatJob
from ovserve.core.conversation import (
    Conversation,
    ForcedTool,
    Image,
    JsonSchemaFormat,
    Message,
    Part,
    Reasoning,
    Sampling,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
)
from ovserve.core.job import Choice, FinishReason
from ovserve.dialects.anthropic import response as body
from ovserve.dialects.anthropic.events import BlockBuilder, new_id
from ovserve.dialects.anthropic.request import (
    ImageBlockParam,
    MessageParam,
    MessagesRequest,
    PromptRequest,
    RedactedThinkingBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ThinkingConfigDisabled,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from ovserve.dialects.body import Burst, EncodedBody
from ovserve.errors import BadRequestError, OvserveError
from ovserve.json_types import JsonObject

log = logging.getLogger(__name__)


# -- request: Messages -> Conversation ---------------------------------------------------------


class _Turns:
    """The conversation's messages as Anthropic's arrive (one turn per run of one role)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.role: str | None = None  # the role of the previous Anthropic message
        self.tool_use_ids: set[str] = set()  # the previous assistant turn's calls
        self.continuation = ""

    def _current(self, role: str, origin: str) -> Message:
        last = self.messages[-1] if self.messages else None
        if last is None or last.role != role:
            last = Message("user" if role == "user" else "assistant", origin)
            self.messages.append(last)
        return last

    def add(self, message: MessageParam, position: int, *, final: bool) -> None:
        origin = f"messages.{position}"
        if message.role == "system":
            self._system(message, origin)
            return
        if self.role is None and message.role != "user":
            raise BadRequestError("the first message must use the 'user' role", param=f"{origin}.role")
        if isinstance(message.content, list) and not message.content:
            raise BadRequestError(
                "all messages must have non-empty content except for the optional final assistant message",
                param=f"{origin}.content",
            )
        if message.role == "user":
            self._user(message, origin)
        elif final:
            self._prefill(message, origin)
        else:
            self._assistant(message, origin)
        self.role = message.role

    def _system(self, message: MessageParam, origin: str) -> None:
        parts: list[Part] = []
        for position, block in enumerate(message.blocks):
            if not isinstance(block, TextBlockParam):
                raise BadRequestError(
                    f"a system message takes text blocks only, not '{block.type}'", param=f"{origin}.content.{position}"
                )
            where = f"{origin}.content" if isinstance(message.content, str) else f"{origin}.content.{position}"
            parts.append(Text(block.text, where))
        self.messages.append(Message("system", f"{origin}.content", parts))

    def _user(self, message: MessageParam, origin: str) -> None:
        answered = self.tool_use_ids if self.role == "assistant" else set()
        user: Message | None = self.messages[-1] if self.role == "user" and self.messages[-1].role == "user" else None
        for position, block in enumerate(message.blocks):
            where = f"{origin}.content" if isinstance(message.content, str) else f"{origin}.content.{position}"
            if isinstance(block, ToolResultBlockParam):
                if block.tool_use_id not in answered:
                    raise BadRequestError(
                        f"unexpected tool_use_id '{block.tool_use_id}' in a tool_result block: each tool_result "
                        "must answer a tool_use block of the previous (assistant) message",
                        param=f"{where}.tool_use_id",
                    )
                self.messages.append(_tool_message(block, where))
                user = None
            elif isinstance(block, TextBlockParam | ImageBlockParam):
                if user is None:
                    user = Message("user", f"{origin}.content")
                    self.messages.append(user)
                user.parts.append(
                    Text(block.text, where) if isinstance(block, TextBlockParam) else _image(block, where)
                )
            else:
                raise BadRequestError(f"a user message cannot carry a '{block.type}' block", param=f"{where}.type")
        self.tool_use_ids = set()

    def _assistant(self, message: MessageParam, origin: str) -> None:
        turn = self._current("assistant", f"{origin}.content")
        if self.role != "assistant":
            self.tool_use_ids = set()
        for position, block in enumerate(message.blocks):
            where = f"{origin}.content" if isinstance(message.content, str) else f"{origin}.content.{position}"
            if isinstance(block, TextBlockParam):
                turn.parts.append(Text(block.text, where))
            elif isinstance(block, ThinkingBlockParam):
                turn.parts.append(Reasoning(block.thinking, where))
            elif isinstance(block, ToolUseBlockParam):
                turn.parts.append(ToolCall(block.id, block.name, block.input, where))
                self.tool_use_ids.add(block.id)
            elif not isinstance(block, RedactedThinkingBlockParam):
                raise BadRequestError(
                    f"an assistant message cannot carry a '{block.type}' block", param=f"{where}.type"
                )

    def _prefill(self, message: MessageParam, origin: str) -> None:
        """The final assistant message: the answer starts with its text."""
        texts = []
        for position, block in enumerate(message.blocks):
            if isinstance(block, TextBlockParam):
                texts.append(block.text)
            elif not isinstance(block, ThinkingBlockParam | RedactedThinkingBlockParam):
                raise BadRequestError(
                    f"a final assistant message (the start of the answer) takes text only, not '{block.type}'",
                    param=f"{origin}.content.{position}.type",
                )
        self.continuation = "".join(texts)


def _image(block: ImageBlockParam, where: str) -> Image:
    return Image(block.url, f"{where}.source")


def _tool_message(block: ToolResultBlockParam, where: str) -> Message:
    parts: list[Part] = []
    if isinstance(block.content, str):
        parts.append(Text(block.content, f"{where}.content"))
    else:
        for position, part in enumerate(block.content or []):
            inner = f"{where}.content.{position}"
            parts.append(Text(part.text, inner) if isinstance(part, TextBlockParam) else _image(part, inner))
    if block.is_error:
        first = next((part for part in parts if isinstance(part, Text)), None)
        if first is None:
            parts.insert(0, Text("Error", where))
        else:
            parts[parts.index(first)] = Text(f"Error: {first.text}", first.origin)
    return Message("tool", f"{where}.content", parts, tool_call_id=block.tool_use_id)


def _tool_choice(request: PromptRequest) -> tuple[ToolChoice, bool]:
    """The core's tool choice, and whether parallel calls are allowed."""
    choice = request.tool_choice
    parallel = not (choice is not None and not isinstance(choice, ToolChoiceNone) and choice.disable_parallel_tool_use)
    if isinstance(choice, ToolChoiceAny):
        return "required", parallel
    if isinstance(choice, ToolChoiceTool):
        return ForcedTool(choice.name), parallel
    if isinstance(choice, ToolChoiceNone):
        return "none", parallel
    return "auto", parallel


def _sampling(request: PromptRequest) -> Sampling:
    if not isinstance(request, MessagesRequest):
        return Sampling()
    return Sampling(
        max_tokens=request.max_tokens,
        clamp_max_tokens=True,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        stop=tuple(request.stop_sequences or ()),
        # Anthropic never returns the stop sequence in the text, streamed or not.
        include_stop_str_in_output=False,
        stream=request.stream,
    )


def conversation_of(request: PromptRequest) -> Conversation:
    turns = _Turns()
    system = request.system
    if isinstance(system, str):
        turns.messages.append(Message("system", "system", [Text(system, "system")]))
    elif system:
        turns.messages.append(Message("system", "system", [Text(b.text, f"system.{i}") for i, b in enumerate(system)]))
    speaking = [position for position, message in enumerate(request.messages) if message.role != "system"]
    last = speaking[-1] if speaking else -1
    for position, message in enumerate(request.messages):
        turns.add(message, position, final=position == last and message.role == "assistant")
    if turns.role is None:
        raise BadRequestError("messages needs at least one user message", param="messages")
    tool_choice, parallel = _tool_choice(request)
    template_kwargs: JsonObject | None = None
    if request.thinking is not None:
        # The template's own switch wins over what the effort would set it to (Conversation.template_variables).
        template_kwargs = {"enable_thinking": not isinstance(request.thinking, ThinkingConfigDisabled)}
    config = request.output_config
    output_format = None
    if config is not None and config.format is not None:
        output_format = JsonSchemaFormat(config.format.schema_, "output_config.format", "output_config.format.schema")
    return Conversation(
        model=request.model,
        messages=turns.messages,
        sampling=_sampling(request),
        prompt_origin="messages",
        tools=[
            Tool(
                name=tool.name,
                origin=f"tools.{position}",
                description=tool.description,
                parameters=tool.input_schema,
                parameters_origin=f"tools.{position}.input_schema",
            )
            for position, tool in enumerate(request.custom_tools)
        ],
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        output_format=output_format,
        template_kwargs=template_kwargs,
        reasoning_effort=config.effort if config is not None else None,
        join_late_system=True,
        continuation=turns.continuation,
    )


# -- one request on its way -------------------------------------------------------------------


@dataclass(slots=True)
class MessagesCall:
    """A messages request being served: its core job and the message it becomes."""

    request: MessagesRequest
    job: ChatJob
    id: str = field(default_factory=lambda: new_id("msg"))
    choices: list[Choice] = field(default_factory=list)  # filled by the job's steps

    @property
    def streaming(self) -> bool:
        return self.request.stream


def stop_reason(finish: FinishReason, stop_sequence: str | None) -> body.StopReason:
    if finish == "tool_calls":
        return "tool_use"
    if finish == "length":
        return "max_tokens"
    return "stop_sequence" if stop_sequence is not None else "end_turn"


class MessagesEndpoint:
    """The Messages dialect, as the HTTP layer drives it (``ovserve.api.envelope``)."""

    def __init__(self, generation: ChatGeneration) -> None:
        self.generation = generation
        self._ignored: set[str] = set()  # options and beta features logged as ignored

    def ignoring(self, what: str, names: Iterable[str]) -> None:
        """Log, once per name and server run, the options (or beta features) a client sent that
        this server accepts and ignores: an agent sends them on every turn."""
        new = sorted(set(names) - self._ignored)
        if new:
            self._ignored.update(new)
            log.info("Anthropic %s accepted and ignored (each logged once): %s", what, ", ".join(new))

    async def prepare(self, request: MessagesRequest, caller: str) -> MessagesCall:
        return MessagesCall(request, await self.generation.prepare(conversation_of(request)))

    async def count_tokens(self, request: PromptRequest) -> body.TokenCount:
        return body.TokenCount(input_tokens=await self.generation.count_tokens(conversation_of(request)))

    async def complete(self, call: MessagesCall) -> body.Message:
        builder = BlockBuilder()
        async with contextlib.aclosing(call.job.steps(call.choices)) as steps:
            async for step in steps:
                for _ in builder.push(step):
                    pass
        for _ in builder.finish():
            pass
        return self._message(call, builder.blocks, final=True)

    async def stream(self, call: MessagesCall) -> AsyncGenerator[body.StreamEvent | EncodedBody | Burst, None]:
        """The events, those of one moment as one :class:`Burst` (one write): the message's start
        with its first step's, each later step's, and the closing ones."""
        builder = BlockBuilder()
        started = False
        async with contextlib.aclosing(call.job.steps(call.choices)) as steps:
            async for step in steps:
                # A step that only adds text (nearly every token) is one event encoded without its model.
                if (encoded := builder.text_event(step)) is not None:
                    yield encoded
                    continue
                events: list[body.StreamEvent] = []
                if not started:
                    started = True
                    message = self._message(call, [], final=False)
                    events += [
                        body.MessageStartEvent(type="message_start", message=message),
                        body.PingEvent(type="ping"),
                    ]
                events += builder.push(step)
                if events:
                    yield Burst(tuple(events))
        closing: list[body.StreamEvent] = []
        if not started:  # the engine ended the request without an output
            closing.append(body.MessageStartEvent(type="message_start", message=self._message(call, [], final=False)))
        closing += builder.finish()
        final = self._message(call, builder.blocks, final=True)
        usage = final.usage
        closing.append(
            body.MessageDeltaEvent(
                type="message_delta",
                delta=body.MessageDelta(stop_reason=final.stop_reason, stop_sequence=final.stop_sequence),
                usage=body.MessageDeltaUsage(
                    output_tokens=usage.output_tokens,
                    input_tokens=usage.input_tokens,
                    cache_creation_input_tokens=usage.cache_creation_input_tokens,
                    cache_read_input_tokens=usage.cache_read_input_tokens,
                ),
            )
        )
        closing.append(body.MessageStopEvent(type="message_stop"))
        yield Burst(tuple(closing))

    def failure_event(self, call: MessagesCall, error: OvserveError) -> body.ErrorResponse:
        return body.ErrorResponse.of(error)

    def _message(self, call: MessagesCall, blocks: list[body.ContentBlock], *, final: bool) -> body.Message:
        job = call.job
        usage = job.usage
        reason: body.StopReason | None = None
        sequence = None
        if final:
            choice = call.choices[0] if call.choices else None
            sequence = choice.stop_sequence if choice is not None else None
            reason = stop_reason(choice.finish_reason if choice is not None else "stop", sequence)
        return body.Message(
            id=call.id,
            type="message",
            role="assistant",
            content=blocks,
            # The name the client asked for (an alias resolves to the served model; logs and
            # metrics name the served model).
            model=call.request.model,
            stop_reason=reason,
            stop_sequence=sequence,
            usage=body.MessageUsage(
                input_tokens=usage.prompt_tokens,
                # message_start: Anthropic counts the first token as generated already.
                output_tokens=usage.completion_tokens if final else max(usage.completion_tokens, 1),
                cache_creation_input_tokens=0,
                cache_read_input_tokens=usage.cached_tokens or 0,
            ),
        )
