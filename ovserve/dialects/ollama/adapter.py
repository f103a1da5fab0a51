"""Ollama's ``/api/chat`` and ``/api/generate`` onto the generation core.

A :class:`ChatRequest` becomes a :class:`~ovserve.core.conversation.Conversation`; a
:class:`GenerateRequest` becomes one too (its ``system`` and ``prompt`` as two messages through the
model's chat template), or, with ``raw``, :class:`~ovserve.core.completion.Prompts` (the prompt as
it is). The core's steps become Ollama's NDJSON lines; the unary answer is those lines merged, so
a stream concatenates to it by construction.

Mapping (docs/ollama.md has the whole field table):

- ``options`` -> :class:`~ovserve.core.conversation.Sampling` (``num_predict`` -1/-2: up to the
  context; ``top_k`` 0: no filter; ``seed`` -1: random; ``repeat_penalty`` -> repetition penalty).
- ``think`` -> ``Conversation.reasoning_effort`` (true: medium, false: none, or the level sent),
  which reaches the chat template's switches; the parsed reasoning comes back as ``thinking``.
  ``think`` on a model without a reasoning format is a 400, as Ollama answers.
- ``format``: ``"json"`` -> any JSON object, a schema -> that schema (the grammar path).
- ``tools`` -> tools; parsed calls come back with ``arguments`` as an object. ``tool_choice`` (in
  the body or in ``options``, where the ollama client passes it through) is ovserve's extension
  (Ollama has none): ``"required"`` or a tool's name forces a call through the grammar.
- ``keep_alive`` -> ``Job.keep_alive``: how long the model stays loaded after the request
  (``ovserve.models.manager``). The model is given back as its last output is made, before the
  last line is written: a client that reads ``/api/ps`` once it has the answer finds a
  ``keep_alive: 0`` model unloading already, as Ollama has expired its runner by then.
- Durations (nanoseconds, measured): ``load_duration`` the wait for the model's engine (a load
  the request started or joined included; a few microseconds when it was loaded),
  ``prompt_eval_duration`` from the engine held to the first output, ``eval_duration`` from there
  to the last, ``total_duration`` the whole (the template and tokenization included).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from ovserve.core.chat import ChatGeneration
from ovserve.core.completion import CompletionGeneration, Prompts
from ovserve.core.conversation import (
    Conversation,
    ForcedTool,
    Image,
    JsonSchemaFormat,
    Message,
    OutputFormat,
    Part,
    Reasoning,
    ReasoningEffort,
    Sampling,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
)
from ovserve.core.job import Delta, Job
from ovserve.dialects.body import EncodedBody, Template, json_string, text_hole
from ovserve.dialects.ollama import request as req
from ovserve.dialects.ollama.response import (
    AssistantMessage,
    CalledFunction,
    CalledTool,
    ChatResponse,
    ErrorResponse,
    GenerateResponse,
    Stats,
    error_message,
    timestamp,
)
from ovserve.errors import OvserveError, UnsupportedParameterError
from ovserve.models.served import ModelRegistry, ServedModel

# Base64 starts of the image formats a client sends (Ollama's images carry no media type).
_IMAGE_MAGIC = {"iVBORw0KGgo": "image/png", "/9j/": "image/jpeg", "R0lGOD": "image/gif", "UklGR": "image/webp"}


def sampling(options: req.Options, *, stream: bool) -> Sampling:
    """Ollama's ``options`` as the core's sampling fields."""
    unlimited = options.num_predict is not None and options.num_predict < 0
    return Sampling(
        max_tokens=None if unlimited else options.num_predict,
        max_tokens_param="options.num_predict",
        max_tokens_removed=unlimited,
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k or None,
        top_k_removed=options.top_k == 0,
        min_p=options.min_p,
        repetition_penalty=options.repeat_penalty,
        presence_penalty=options.presence_penalty,
        frequency_penalty=options.frequency_penalty,
        seed=None if options.seed == -1 else options.seed,
        stop=tuple(options.stop or ()),
        stream=stream,
    )


def _effort(think: req.Think | None) -> ReasoningEffort | None:
    if think is None:
        return None
    if isinstance(think, bool):
        return "medium" if think else "none"
    return think


def _image(data: str, origin: str) -> Image:
    if data.startswith("data:"):
        return Image(data, origin)
    kind = next((mime for magic, mime in _IMAGE_MAGIC.items() if data.startswith(magic)), "image/png")
    return Image(f"data:{kind};base64,{data}", origin)


def _output_format(value: req.Format | None) -> OutputFormat | None:
    if value is None or value == "":
        return None
    if value == "json":
        return JsonSchemaFormat.any_object("format")
    assert isinstance(value, dict)
    return JsonSchemaFormat(value, "format", "format")


def _message(message: req.Message, origin: str) -> Message:
    parts: list[Part] = []
    if message.thinking:
        parts.append(Reasoning(message.thinking, f"{origin}.thinking"))
    if message.content or not (message.images or message.tool_calls):
        parts.append(Text(message.content, f"{origin}.content"))
    parts.extend(_image(data, f"{origin}.images.{index}") for index, data in enumerate(message.images or []))
    for index, call in enumerate(message.tool_calls or []):
        parts.append(ToolCall(call.id, call.function.name, call.function.arguments, f"{origin}.tool_calls.{index}"))
    return Message(
        role=message.role,
        content_origin=f"{origin}.content",
        parts=parts,
        name=message.tool_name,
        tool_call_id=message.tool_call_id,
    )


def _tool_choice(choice: str | None) -> ToolChoice:
    if choice is None or choice == "auto":
        return "auto"
    if choice in ("none", "required"):
        return "none" if choice == "none" else "required"
    return ForcedTool(choice)


def chat_conversation(request: req.ChatRequest) -> Conversation:
    return Conversation(
        model=request.model,
        messages=[_message(message, f"messages.{index}") for index, message in enumerate(request.messages)],
        sampling=sampling(request.options, stream=request.stream),
        prompt_origin="messages",
        tools=[
            Tool(
                name=tool.function.name,
                origin=f"tools.{index}",
                description=tool.function.description,
                parameters=tool.function.parameters,
                parameters_origin=f"tools.{index}.function.parameters",
            )
            for index, tool in enumerate(request.tools)
        ],
        tool_choice=_tool_choice(request.forced),
        output_format=_output_format(request.format),
        reasoning_effort=_effort(request.think),
    )


def generate_conversation(request: req.GenerateRequest) -> Conversation:
    messages = []
    if request.system:
        messages.append(Message("system", "system", [Text(request.system, "system")]))
    parts: list[Part] = [Text(request.prompt, "prompt")]
    parts.extend(_image(data, f"images.{index}") for index, data in enumerate(request.images or []))
    messages.append(Message("user", "prompt", parts))
    return Conversation(
        model=request.model,
        messages=messages,
        sampling=sampling(request.options, stream=request.stream),
        prompt_origin="prompt",
        output_format=_output_format(request.format),
        reasoning_effort=_effort(request.think),
    )


@dataclass(slots=True)
class Timing:
    """The request's moments (``time.perf_counter_ns``), for Ollama's durations."""

    started: int = field(default_factory=time.perf_counter_ns)
    load: int = 0  # nanoseconds waited for the model's engine (Lease.waited_ns)
    generating: int = 0  # the engine held, generation starts
    first_output: int = 0
    finished: int = 0

    def stats(self, job: Job, done_reason: str) -> Stats:
        usage = job.usage
        first = self.first_output or self.finished
        return Stats(
            done_reason="length" if done_reason == "length" else "stop",
            total_duration=self.finished - self.started,
            load_duration=self.load,
            prompt_eval_count=usage.prompt_tokens,
            prompt_eval_duration=first - self.generating,
            eval_count=usage.completion_tokens,
            eval_duration=self.finished - first,
        )


@dataclass(slots=True)
class OllamaCall:
    """One /api/chat or /api/generate request on its way."""

    request: req.ChatRequest | req.GenerateRequest
    job: Job
    timing: Timing

    @property
    def streaming(self) -> bool:
        return self.request.stream

    @property
    def chat(self) -> bool:
        return isinstance(self.request, req.ChatRequest)


OllamaLine = ChatResponse | GenerateResponse


class OllamaEndpoint:
    """Both generation routes, as ``ovserve.api.envelope`` drives them."""

    def __init__(self, models: ModelRegistry, chat: ChatGeneration, completion: CompletionGeneration) -> None:
        self.models = models
        self.chat = chat
        self.completion = completion

    def _model(self, request: req.GenerationRequest, tools: bool) -> ServedModel:
        model = self.models.get(request.model)
        if request.think not in (None, False) and model.reasoning_format is None:
            raise UnsupportedParameterError(
                f"model '{model.name}' does not support thinking (no reasoning format was chosen for it)",
                param="think",
            )
        if tools and model.tool_format is None:
            raise UnsupportedParameterError(
                f"model '{model.name}' does not support tools (no tool-call format was chosen for it)", param="tools"
            )
        return model

    async def prepare(self, request: req.ChatRequest | req.GenerateRequest, caller: str) -> OllamaCall:
        timing = Timing()
        job: Job
        if isinstance(request, req.ChatRequest):
            self._model(request, bool(request.tools) and request.forced != "none")
            job = await self.chat.prepare(chat_conversation(request))
        else:
            self._model(request, False)
            if request.raw:
                sampled = sampling(request.options, stream=request.stream)
                job = await self.completion.prepare(
                    Prompts(model=request.model, prompts=[request.prompt], sampling=sampled)
                )
            else:
                job = await self.chat.prepare(generate_conversation(request))
        job.keep_alive = req.keep_alive_seconds(request.keep_alive)
        return OllamaCall(request, job, timing)

    async def complete(self, call: OllamaCall) -> OllamaLine:
        """The stream's lines merged: its texts concatenated, its calls in order, its last line's stats."""
        content, thinking, calls = [], [], []
        last: OllamaLine | None = None
        async with contextlib.aclosing(self._lines(call, None)) as lines:
            async for line in lines:
                assert not isinstance(line, EncodedBody)  # no text lines: every line is its model
                last = line
                if isinstance(line, ChatResponse):
                    content.append(line.message.content)
                    thinking.append(line.message.thinking or "")
                    calls.extend(line.message.tool_calls or [])
                else:
                    content.append(line.response)
                    thinking.append(line.thinking or "")
        assert last is not None  # the stream always ends with its done line
        if isinstance(last, ChatResponse):
            message = AssistantMessage(role="assistant", content="".join(content))
            if any(thinking):
                message.thinking = "".join(thinking)
            if calls:
                message.tool_calls = calls
            last.message = message
        else:
            last.response = "".join(content)
            if any(thinking):
                last.thinking = "".join(thinking)
        return last

    def stream(self, call: OllamaCall) -> AsyncGenerator[OllamaLine | EncodedBody, None]:
        """The stream's lines, those that only add text encoded without their models (:class:`TextLines`)."""
        return self._lines(call, TextLines.of(call))

    async def _lines(
        self, call: OllamaCall, text_lines: TextLines | None
    ) -> AsyncGenerator[OllamaLine | EncodedBody, None]:
        """The lines of the stream (``text_lines``: how those that only add text are encoded;
        None: as models, for :meth:`complete`)."""
        job, timing = call.job, call.timing
        timing.generating = time.perf_counter_ns()
        timing.load = job.lease.waited_ns if job.lease is not None else 0
        finish = "stop"
        async with contextlib.aclosing(job.steps()) as steps:
            async for delta in steps:
                if delta.first and not timing.first_output:
                    timing.first_output = time.perf_counter_ns()
                finish = delta.finish_reason or finish
                if text_lines is not None and (encoded := text_lines.of_step(delta)) is not None:
                    yield encoded
                elif delta.content or delta.reasoning or delta.tool_calls:
                    yield _line(call, delta)
        timing.finished = time.perf_counter_ns()
        job.release()  # the engine's part is over: keep_alive counts from now (see the module doc)
        stats = timing.stats(job, finish)
        last = _line(call, None)
        for name in Stats.model_fields:
            setattr(last, name, getattr(stats, name))
        yield last

    def failure_event(self, call: OllamaCall, error: OvserveError) -> ErrorResponse:
        return ErrorResponse(error=error_message(error))


class TextLines:
    """A streamed step that only adds content or only thinking, as its line encoded without its
    models: the line is encoded once per stream and kind, with holes for ``created_at`` and the
    text. Byte for byte :func:`_line`'s encoding (tests/unit/test_stream_templates.py)."""

    def __init__(self, content: Template, thinking: Template) -> None:
        self._content = content
        self._thinking = thinking

    @classmethod
    def of(cls, call: OllamaCall) -> TextLines | None:
        """The stream's text lines; None if its model's name holds a hole's marker."""
        created, text = text_hole(0), text_hole(1)
        model = call.job.model.name
        content: OllamaLine
        thinking: OllamaLine
        if call.chat:
            message = AssistantMessage(role="assistant", content=text)
            content = ChatResponse(model=model, created_at=created, message=message, done=False)
            message = AssistantMessage(role="assistant", content="", thinking=text)
            thinking = ChatResponse(model=model, created_at=created, message=message, done=False)
        else:
            content = GenerateResponse(model=model, created_at=created, response=text, done=False)
            thinking = GenerateResponse(model=model, created_at=created, response="", thinking=text, done=False)
        with_content, with_thinking = Template.of(content, created, text), Template.of(thinking, created, text)
        return None if with_content is None or with_thinking is None else cls(with_content, with_thinking)

    def of_step(self, delta: Delta) -> EncodedBody | None:
        """The line of ``delta``; None unless it only adds content or only thinking."""
        if delta.tool_calls:
            return None
        if delta.content and not delta.reasoning:
            template, text = self._content, delta.content
        elif delta.reasoning and not delta.content:
            template, text = self._thinking, delta.reasoning
        else:
            return None
        # A timestamp is digits, '-', ':', '.', 'T' and 'Z': nothing JSON escapes.
        return template.fill(f'"{timestamp()}"', json_string(text))


def _line(call: OllamaCall, delta: Delta | None) -> OllamaLine:
    model, created = call.job.model.name, timestamp()
    content = delta.content if delta is not None else ""
    thinking = delta.reasoning if delta is not None else ""
    if not call.chat:
        line = GenerateResponse(model=model, created_at=created, response=content, done=delta is None)
        if thinking:
            line.thinking = thinking
        return line
    message = AssistantMessage(role="assistant", content=content)
    if thinking:
        message.thinking = thinking
    if delta is not None and delta.tool_calls:
        message.tool_calls = [
            CalledTool(
                id=parsed.id,
                function=CalledFunction(
                    index=delta.calls_before + offset, name=parsed.name, arguments=parsed.arguments
                ),
            )
            for offset, parsed in enumerate(delta.tool_calls)
        ]
    return ChatResponse(model=model, created_at=created, message=message, done=delta is None)
