"""Chat completions onto the core: a validated :class:`ChatCompletionRequest` becomes a
:class:`~ovserve.core.conversation.Conversation`; the core's steps become ``chat.completion``
objects and ``chat.completion.chunk`` streams (:mod:`.response`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Iterator

from ovserve.core.chat import ChatGeneration, ChatJob
from ovserve.core.conversation import (
    Conversation,
    ForcedTool,
    Image,
    Message,
    Part,
    Text,
    ToolCall,
    ToolChoice,
)
from ovserve.core.job import Delta, Logprob
from ovserve.dialects.body import EncodedBody
from ovserve.dialects.endpoint import WorkCall
from ovserve.dialects.openai.chat import response as body
from ovserve.dialects.openai.chat.request import (
    ChatCompletionRequest,
    ChatMessage,
    ImagePart,
    NamedToolChoice,
    TextPart,
)
from ovserve.dialects.openai.common import ErrorBody, Usage
from ovserve.errors import OvserveError
from ovserve.parsers.calls import ToolCall as ParsedToolCall
from ovserve.parsers.calls import arguments_json


def conversation_of(request: ChatCompletionRequest) -> Conversation:
    return Conversation(
        model=request.model,
        messages=messages_of(request.messages),
        sampling=request.sampling(),
        prompt_origin="messages",
        tools=[
            tool.function.tool(f"tools.{position}", f"tools.{position}.function.parameters")
            for position, tool in enumerate(request.tools or [])
        ],
        tool_choice=_tool_choice(request),
        parallel_tool_calls=request.parallel_tool_calls,
        output_format=request.output_format(),
        template_kwargs=request.chat_template_kwargs,
        reasoning_effort=request.reasoning_effort,
    )


def messages_of(messages: list[ChatMessage]) -> list[Message]:
    """Chat messages as the core's, each part's origin its path under ``messages``."""
    return [_message(message, f"messages.{position}") for position, message in enumerate(messages)]


def _message(message: ChatMessage, origin: str) -> Message:
    parts: list[Part] = []
    content = message.content
    if isinstance(content, str):
        parts.append(Text(content, f"{origin}.content"))
    elif content is not None:
        for position, part in enumerate(content):
            where = f"{origin}.content.{position}"
            if isinstance(part, TextPart):
                parts.append(Text(part.text, where))
            elif isinstance(part, ImagePart):
                url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
                parts.append(Image(url, f"{where}.image_url"))
    for position, call in enumerate(message.tool_calls or []):
        where = f"{origin}.tool_calls.{position}"
        parts.append(ToolCall.from_text(call.id, call.function.name, call.function.arguments, where))
    return Message(
        role="system" if message.role == "developer" else message.role,
        content_origin=f"{origin}.content",
        parts=parts,
        name=message.name,
        tool_call_id=message.tool_call_id,
    )


def _tool_choice(request: ChatCompletionRequest) -> ToolChoice:
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        return ForcedTool(choice.function.name)
    return choice or "auto"


# One chat request on its way: its core job and the client's request.
ChatCall = WorkCall[ChatJob, ChatCompletionRequest]


class ChatEndpoint:
    """The chat completions dialect, as the HTTP layer drives it (``ovserve.api.envelope``)."""

    def __init__(self, generation: ChatGeneration) -> None:
        self.generation = generation

    async def prepare(self, request: ChatCompletionRequest, caller: str) -> ChatCall:
        job = await self.generation.prepare(conversation_of(request))
        job.include_usage = request.include_usage
        return WorkCall(job, request, streaming=request.stream)

    async def complete(self, call: ChatCall) -> body.ChatCompletion:
        job = call.job
        choices = [
            body.Choice(
                index=choice.index,
                message=_message_body(choice.parsed.content, choice.parsed.reasoning, choice.tool_calls),
                logprobs=_logprobs(choice.logprobs) if job.params.logprobs else None,
                finish_reason=choice.finish_reason,
            )
            for choice in await job.choices()
        ]
        return body.ChatCompletion(
            id=job.id,
            object="chat.completion",
            created=job.created,
            model=job.model.name,
            choices=choices,
            usage=Usage.of(job.usage),
        )

    async def stream(self, call: ChatCall) -> AsyncGenerator[body.ChatCompletionChunk | EncodedBody, None]:
        job = call.job
        text_chunks = None if job.params.logprobs else TextChunks(job)
        # aclosing: a disconnect (this generator closed) cancels the engine request at once.
        async with contextlib.aclosing(job.steps()) as steps:
            async for delta in steps:
                if text_chunks is not None and (chunk := text_chunks.of(delta)) is not None:
                    yield chunk
                    continue
                for choice in _chunk_choices(delta, logprobs=job.params.logprobs):
                    yield _chunk(job, [choice])
        if job.include_usage:
            yield _chunk(job, [], usage=Usage.of(job.usage))

    def failure_event(self, call: ChatCall, error: OvserveError) -> ErrorBody:
        return ErrorBody.of(error)


def _chunk(job: ChatJob, choices: list[body.ChunkChoice], usage: Usage | None = None) -> body.ChatCompletionChunk:
    chunk = body.ChatCompletionChunk(
        id=job.id, object="chat.completion.chunk", created=job.created, model=job.model.name, choices=choices
    )
    if job.include_usage:
        chunk.usage = usage  # OpenAI: null in every chunk but the last
    return chunk


class TextChunks:
    """A stream's commonest chunk, a step that only adds text to one choice, encoded without
    building its models: the chunk's envelope (id, object, created, model, and ``usage: null`` with
    include_usage) is encoded by :class:`~body.ChatCompletionChunk` once per stream, and each step
    adds its text as JSON. Byte for byte the model's encoding (tests/unit/test_chat_text_chunks.py);
    a token's chunk then costs a string format instead of three models built and serialized (at 1
    stream on the 0.5B model, about a sixth of the server's CPU per token: docs/performance.md)."""

    _CHOICES = '"choices":[]'

    def __init__(self, job: ChatJob) -> None:
        envelope = _chunk(job, [])
        self._head, self._tail = envelope.encode().split(self._CHOICES)

    def of(self, delta: Delta) -> EncodedBody | None:
        """The chunk of ``delta`` if it only adds content or only reasoning (not a choice's first
        or last step, no tool calls); None otherwise."""
        if delta.first or delta.finish_reason is not None or delta.tool_calls:
            return None
        if delta.content and not delta.reasoning:
            key, text = "content", delta.content
        elif delta.reasoning and not delta.content:
            key, text = "reasoning_content", delta.reasoning
        else:
            return None
        piece = json.dumps(text, ensure_ascii=False)
        choice = f'{{"index":{delta.choice},"delta":{{"{key}":{piece}}},"logprobs":null,"finish_reason":null}}'
        return EncodedBody(f'{self._head}"choices":[{choice}]{self._tail}')


def _chunk_choices(delta: Delta, *, logprobs: bool) -> Iterator[body.ChunkChoice]:
    """The stream choices of one step: the role (on the choice's first step: OVMS marks the first
    token with it, clients measure TTFT on it), reasoning, content, each tool call, the finish."""
    index = delta.choice
    if delta.first:
        yield body.ChunkChoice(
            index=index, delta=body.Delta(role="assistant", content=None), logprobs=None, finish_reason=None
        )
    entries = _logprobs(delta.logprobs or []) if logprobs else None
    for piece in _pieces(delta):
        yield body.ChunkChoice(index=index, delta=piece, logprobs=entries, finish_reason=None)
        entries = None  # attached once, to the first piece of this step
    if delta.finish_reason is not None:
        yield body.ChunkChoice(index=index, delta=body.Delta(), logprobs=entries, finish_reason=delta.finish_reason)
    elif entries is not None and entries.content:
        yield body.ChunkChoice(index=index, delta=body.Delta(), logprobs=entries, finish_reason=None)


def _pieces(delta: Delta) -> Iterator[body.Delta]:
    if delta.reasoning:
        yield body.Delta(reasoning_content=delta.reasoning)
    if delta.content:
        yield body.Delta(content=delta.content)
    for offset, call in enumerate(delta.tool_calls):
        index = delta.calls_before + offset
        # OpenAI's order: id, type and name first, then the arguments (concatenated, the final JSON).
        function = body.FunctionCallDelta(name=call.name, arguments="")
        yield body.Delta(tool_calls=[body.ToolCallDelta(index=index, id=call.id, type="function", function=function)])
        arguments = body.FunctionCallDelta(arguments=arguments_json(call.arguments))
        yield body.Delta(tool_calls=[body.ToolCallDelta(index=index, function=arguments)])


def _message_body(content: str, reasoning: str, calls: list[ParsedToolCall]) -> body.AssistantMessage:
    message = body.AssistantMessage(role="assistant", content=content, refusal=None)
    if reasoning:
        message.reasoning_content = reasoning
    if calls:
        # OpenAI: content is null when the answer is only tool calls.
        message.content = content if content.strip() else None
        message.tool_calls = [
            body.MessageToolCall(
                id=call.id,
                type="function",
                function=body.CalledFunction(name=call.name, arguments=arguments_json(call.arguments)),
            )
            for call in calls
        ]
    return message


def _logprobs(entries: list[Logprob]) -> body.ChoiceLogprobs:
    return body.ChoiceLogprobs(
        refusal=None,
        content=[
            body.TokenLogprob(token=token, logprob=logprob, bytes=list(token.encode("utf-8")), top_logprobs=[])
            for _, token, logprob in entries
        ],
    )
