"""Chat completions: request -> engine job -> OpenAI response objects.

``prepare`` does everything that can fail with a 4xx (model lookup, template, tokenization,
context length, generation config) before any byte is sent, so streaming responses only start
for requests the engine will run.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from typing import Any

from ovserve.engine.messages import EnginePrompt, VisionPrompt
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.media import ImageRequest, MediaResolver
from ovserve.protocol import ChatCompletionRequest, ChatMessage, ToolDefinition
from ovserve.service.generation import ChoiceDelta
from ovserve.service.guided import (
    GrammarSpec,
    forced_tool_call_grammar,
    guided_tool_calls_grammar,
    response_format_grammar,
)
from ovserve.service.models import ModelRegistry, ServedModel
from ovserve.service.output import ChoiceOutput, ParsedDelta, tool_call_deltas, tool_call_object
from ovserve.service.response import Choice, Job, ready_model, sampling_params
from ovserve.vision import insert_image_tags


@dataclass(kw_only=True)
class ChatJob(Job[ChatCompletionRequest]):
    response_object = "chat.completion"
    chunk_object = "chat.completion.chunk"
    id_prefix = "chatcmpl"

    prompt_ids: list[int]  # for a VLM: the ids of the prompt with image tokens expanded (counting only)
    vision_prompt: VisionPrompt | None = None  # what a VLM's engine gets instead of prompt_ids
    starts_in_reasoning: bool = False  # the template opened the reasoning block in the prompt
    # The tools the template saw (none for tool_choice none, only the named one if named).
    tools: list[ToolDefinition] = field(default_factory=list)

    def engine_prompts(self) -> list[EnginePrompt]:
        return [self.vision_prompt or self.prompt_ids]

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    def choice_output(self) -> ChoiceOutput:
        # OVMS: skip_special_tokens=false returns the raw text, parsers off.
        raw = not self.request.skip_special_tokens
        return ChoiceOutput(
            tool_format=self.model.tool_format if self.tools and not raw else None,
            reasoning_format=None if raw else self.model.reasoning_format,
            starts_in_reasoning=self.starts_in_reasoning,
            single_call=not self.request.parallel_tool_calls,
        )


def _template_message(message: ChatMessage) -> dict[str, Any]:
    rendered: dict[str, Any] = {
        "role": "system" if message.role == "developer" else message.role,
        "content": "\n".join(message.text_parts()) if message.content is not None else None,
    }
    if message.name is not None:
        rendered["name"] = message.name
    if message.tool_call_id is not None:
        rendered["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        # HF templates expect arguments as a mapping (they apply tojson themselves).
        calls = []
        for call in message.tool_calls:
            try:
                arguments: Any = json.loads(call.function.arguments)
            except ValueError:
                arguments = call.function.arguments
            calls.append(
                {
                    "id": call.id,
                    "type": call.type,
                    "function": {"name": call.function.name, "arguments": arguments},
                }
            )
        rendered["tool_calls"] = calls
    return rendered


def _grammar(request: ChatCompletionRequest, model: ServedModel, tools: list[ToolDefinition]) -> GrammarSpec | None:
    """The engine grammar for response_format or a forced tool call (they exclude each other)."""
    from_format = response_format_grammar(request.response_format)
    if not request.forces_tool_call:
        guide = model.settings.enable_tool_guided_generation and tools and from_format is None
        if guide and request.skip_special_tokens:
            return guided_tool_calls_grammar(model.tool_format, tools)
        return from_format
    if from_format is not None:
        raise BadRequestError(
            "response_format cannot constrain a forced tool call; send one of them", param="response_format"
        )
    return forced_tool_call_grammar(model.tool_format, tools)


class ChatService:
    def __init__(self, models: ModelRegistry, media: MediaResolver) -> None:
        self.models = models
        self.media = media

    async def prepare(self, request: ChatCompletionRequest, job_type: type[ChatJob] | None = None) -> ChatJob:
        """The job for ``request``; ``job_type`` is a ChatJob subclass another protocol builds on
        (the Responses API), its own fields left at their defaults."""
        model = ready_model(self.models, request.model)
        templated = [_template_message(message) for message in request.messages]
        planned_images: list[ImageRequest] = []
        if model.vision is None:
            for position, message in enumerate(request.messages):
                if message.image_parts():
                    raise UnsupportedParameterError(
                        f"model '{model.name}' does not accept images (messages[{position}] has an image_url part)",
                        param=f"messages.{position}.content",
                    )
        else:
            # Policy checks of every image_url first: no I/O yet, nothing contacted if one fails.
            planned_images = self.media.plan(request.messages)
            insert_image_tags(templated, request.messages)
        tools = request.offered_tools()
        template_tools = [tool.model_dump(exclude_none=True) for tool in tools] or None
        prompt = await model.render_prompt(templated, template_tools, request.chat_template_kwargs)
        counted = prompt
        if model.vision is not None:
            model.vision.check_prompt(prompt, len(planned_images))
            counted = model.vision.expand_prompt(prompt)
        prompt_ids = await model.encode_prompt(counted, add_special_tokens=False, param="messages")
        params = sampling_params(request, model, prompt_tokens=len(prompt_ids), param="messages")
        grammar = _grammar(request, model, tools)
        if grammar is not None:
            params = dataclasses.replace(params, structured_output=grammar)
        vision_prompt = None
        if model.vision is not None:
            # Downloads and decoding come last, for requests that passed every other check.
            vision_prompt = VisionPrompt(prompt, await self.media.load(planned_images, model.vision.image_target))
        return (job_type or ChatJob)(
            request=request,
            model=model,
            prompt_ids=prompt_ids,
            params=params,
            vision_prompt=vision_prompt,
            starts_in_reasoning=bool(model.reasoning_format and prompt.rstrip().endswith(model.reasoning_format.start)),
            tools=tools,
        )

    async def complete(self, job: ChatJob) -> dict[str, Any]:
        return job.response([_choice_object(job, choice) for choice in await job.choices()])

    def stream(self, job: ChatJob) -> AsyncGenerator[dict[str, Any], None]:
        def write(choice: Choice, delta: ChoiceDelta, step: ParsedDelta, first: bool) -> Iterator[dict[str, Any]]:
            if first:
                # OVMS: the role chunk marks the first generated token (clients measure TTFT on it).
                yield _stream_choice(choice, {"role": "assistant", "content": None}, None)
            logprobs = _logprobs_object(delta.logprobs) if job.params.logprobs else None
            for piece in _delta_pieces(step, first_call_index=len(choice.tool_calls) - len(step.tool_calls)):
                yield _stream_choice(choice, piece, logprobs)
                logprobs = None  # attached once, to the first piece of this step
            if delta.finished:
                yield _stream_choice(choice, {}, logprobs, choice.finish_reason)
            elif logprobs is not None and logprobs["content"]:
                yield _stream_choice(choice, {}, logprobs)

        return job.chunks(write)


def _choice_object(job: ChatJob, choice: Choice) -> dict[str, Any]:
    parsed = choice.parsed
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content, "refusal": None}
    if parsed.reasoning:
        message["reasoning_content"] = parsed.reasoning
    if parsed.tool_calls:
        # OpenAI: content is null when the answer is only tool calls.
        message["content"] = parsed.content if parsed.content.strip() else None
        message["tool_calls"] = [
            {key: value for key, value in tool_call_object(call, position).items() if key != "index"}
            for position, call in enumerate(parsed.tool_calls)
        ]
    return {
        "index": choice.index,
        "message": message,
        "logprobs": _logprobs_object(choice.logprobs) if job.params.logprobs else None,
        "finish_reason": choice.finish_reason,
    }


def _stream_choice(
    choice: Choice, delta: dict[str, Any], logprobs: dict[str, Any] | None, finish_reason: str | None = None
) -> dict[str, Any]:
    return {"index": choice.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def _delta_pieces(parsed: ParsedDelta, *, first_call_index: int) -> list[dict[str, Any]]:
    """The stream deltas of one parsed step: reasoning, then content, then each tool call."""
    pieces: list[dict[str, Any]] = []
    if parsed.reasoning:
        pieces.append({"reasoning_content": parsed.reasoning})
    if parsed.content:
        pieces.append({"content": parsed.content})
    for offset, call in enumerate(parsed.tool_calls):
        pieces.extend({"tool_calls": [piece]} for piece in tool_call_deltas(call, first_call_index + offset))
    return pieces


def _logprobs_object(entries: list[tuple[int, str, float]] | None) -> dict[str, Any]:
    return {
        "refusal": None,
        "content": [
            {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8")), "top_logprobs": []}
            for _, token, logprob in entries or []
        ],
    }
