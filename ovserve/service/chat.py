"""Chat completions: request -> engine job -> OpenAI response objects.

``prepare`` does everything that can fail with a 4xx (model lookup, template, tokenization,
context length, generation config) before any byte is sent, so streaming responses only start
for requests the engine will run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ovserve.api.protocol import ChatCompletionRequest, ChatMessage, NamedToolChoice
from ovserve.engine.messages import VisionPrompt
from ovserve.errors import BadRequestError, ServiceUnavailableError, UnsupportedParameterError
from ovserve.generation_config import GenerationParams, resolve_generation_params, resolve_max_new_tokens
from ovserve.media import ImageRequest, MediaResolver
from ovserve.service.generation import ChoiceDelta, TokenCount, follow_choices, usage
from ovserve.service.guided import (
    GrammarSpec,
    forced_tool_call_grammar,
    guided_tool_calls_grammar,
    response_format_grammar,
)
from ovserve.service.models import ModelRegistry, ServedModel
from ovserve.service.output import ChoiceOutput, ParsedDelta, tool_call_deltas, tool_call_object
from ovserve.vision import insert_image_tags

log = logging.getLogger(__name__)


@dataclass
class ChatJob:
    """A validated request, ready for the engine."""

    request: ChatCompletionRequest
    model: ServedModel
    prompt_ids: list[int]  # for a VLM: the ids of the prompt with image tokens expanded (counting only)
    params: GenerationParams
    count: TokenCount = field(default_factory=TokenCount)
    vision_prompt: VisionPrompt | None = None  # what a VLM's engine gets instead of prompt_ids
    starts_in_reasoning: bool = False  # the template opened the reasoning block in the prompt
    # The tools the template saw (none for tool_choice none, only the named one if named).
    tools: list[dict[str, Any]] | None = None
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))


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


def _grammar(
    request: ChatCompletionRequest, model: ServedModel, tools: list[dict[str, Any]] | None
) -> GrammarSpec | None:
    """The engine grammar for response_format or a forced tool call (they exclude each other)."""
    response_format = request.response_format.model_dump() if request.response_format else None
    from_format = response_format_grammar(response_format)
    choice = request.tool_choice
    if choice != "required" and not isinstance(choice, NamedToolChoice):
        guide = model.settings.enable_tool_guided_generation and tools and from_format is None
        if guide and request.skip_special_tokens:
            return guided_tool_calls_grammar(model.tool_format, tools or [])
        return from_format
    if from_format is not None:
        raise BadRequestError(
            "response_format cannot constrain a forced tool call; send one of them", param="response_format"
        )
    return forced_tool_call_grammar(model.tool_format, tools or [])


def _choice_output(job: ChatJob) -> ChoiceOutput:
    # OVMS: skip_special_tokens=false returns the raw text, parsers off.
    raw = not job.request.skip_special_tokens
    parse_tools = bool(job.tools) and not raw
    return ChoiceOutput(
        tool_format=job.model.tool_format if parse_tools else None,
        reasoning_format=None if raw else job.model.reasoning_format,
        starts_in_reasoning=job.starts_in_reasoning,
        single_call=not job.request.parallel_tool_calls,
    )


class ChatService:
    def __init__(self, models: ModelRegistry, media: MediaResolver) -> None:
        self.models = models
        self.media = media

    async def prepare(self, request: ChatCompletionRequest) -> ChatJob:
        model = self.models.get(request.model)
        if not model.engine.ready:
            raise ServiceUnavailableError(f"model '{model.name}' is {model.engine.state.value}; retry shortly")
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
        tools = request.template_tools()
        prompt = model.render_chat(templated, tools, request.chat_template_kwargs)
        counted = prompt
        if model.vision is not None:
            model.vision.check_prompt(prompt, len(planned_images))
            counted = model.vision.expand_prompt(prompt)
        prompt_ids = await model.encode_prompt(counted, add_special_tokens=False, param="messages")
        model.check_prompt_length(len(prompt_ids), param="messages")
        max_new_tokens = resolve_max_new_tokens(
            request.output_limit,
            model.defaults,
            prompt_tokens=len(prompt_ids),
            context_length=model.context_length,
            max_tokens_limit=model.max_tokens_limit,
            no_default=request.output_limit_removed,
        )
        params = resolve_generation_params(
            request, model.defaults, max_new_tokens=max_new_tokens, best_of_limit=model.best_of_limit, kind=model.kind
        )
        grammar = _grammar(request, model, tools)
        if grammar is not None:
            params = dataclasses.replace(params, structured_output=grammar)
        vision_prompt = None
        if model.vision is not None:
            # Downloads and decoding come last, for requests that passed every other check.
            vision_prompt = VisionPrompt(prompt, await self.media.load(planned_images, model.vision.image_target))
        return ChatJob(
            request=request,
            model=model,
            prompt_ids=prompt_ids,
            params=params,
            vision_prompt=vision_prompt,
            starts_in_reasoning=bool(model.reasoning_format and prompt.rstrip().endswith(model.reasoning_format.start)),
            tools=tools,
        )

    def run(self, job: ChatJob) -> AsyncIterator[ChoiceDelta]:
        """Engine outputs with stop sequences applied; ends when every choice has finished."""
        outputs = job.model.generate(job.vision_prompt or job.prompt_ids, job.params)
        return follow_choices(outputs, job.params, job.count)

    # -- response objects -------------------------------------------------------------------

    def usage(self, job: ChatJob) -> dict[str, Any]:
        return usage(len(job.prompt_ids), job.count, cached_tokens_known=not job.model.prefix_caching)

    async def complete(self, job: ChatJob) -> dict[str, Any]:
        outputs = [_choice_output(job) for _ in range(job.params.n)]
        parsed = [ParsedDelta() for _ in range(job.params.n)]
        finish: dict[int, str | None] = {}
        logprobs: dict[int, list[tuple[int, str, float]]] = {}

        async for delta in self.run(job):
            parsed[delta.index].extend(outputs[delta.index].push(delta.text))
            if delta.logprobs:
                logprobs.setdefault(delta.index, []).extend(delta.logprobs)
            if delta.finish_reason is not None:
                finish[delta.index] = delta.finish_reason
                parsed[delta.index].extend(outputs[delta.index].finish())
        choices = []
        for index, result in enumerate(parsed):
            message: dict[str, Any] = {"role": "assistant", "content": result.content, "refusal": None}
            if result.reasoning:
                message["reasoning_content"] = result.reasoning
            finish_reason = finish.get(index) or "stop"
            if result.tool_calls:
                # OpenAI: content is null when the answer is only tool calls.
                message["content"] = result.content if result.content.strip() else None
                message["tool_calls"] = [
                    {key: value for key, value in tool_call_object(call, position).items() if key != "index"}
                    for position, call in enumerate(result.tool_calls)
                ]
                finish_reason = "tool_calls"
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "logprobs": _logprobs_object(logprobs.get(index)) if job.params.logprobs else None,
                    "finish_reason": finish_reason,
                }
            )
        return {
            "id": job.id,
            "object": "chat.completion",
            "created": job.created,
            "model": job.model.name,
            "choices": choices,
            "usage": self.usage(job),
        }

    async def stream(self, job: ChatJob) -> AsyncGenerator[dict[str, Any], None]:
        include_usage = job.request.include_usage
        usage_field: dict[str, Any] = {"usage": None} if include_usage else {}

        def chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
            return {
                "id": job.id,
                "object": "chat.completion.chunk",
                "created": job.created,
                "model": job.model.name,
                "choices": choices,
                **usage_field,
            }

        started: set[int] = set()
        outputs: dict[int, ChoiceOutput] = {}
        async for delta in self.run(job):
            if delta.index not in started:
                # OVMS: the role chunk marks the first generated token (clients measure TTFT on it).
                started.add(delta.index)
                yield chunk(
                    [
                        {
                            "index": delta.index,
                            "delta": {"role": "assistant", "content": None},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            output = outputs.setdefault(delta.index, _choice_output(job))
            parsed = output.push(delta.text)
            if delta.finish_reason is not None:
                parsed.extend(output.finish())
            logprobs = _logprobs_object(delta.logprobs) if job.params.logprobs else None
            for piece in _delta_pieces(parsed, first_call_index=len(output.calls) - len(parsed.tool_calls)):
                yield chunk([{"index": delta.index, "delta": piece, "logprobs": logprobs, "finish_reason": None}])
                logprobs = None  # attached once, to the first piece of this step
            if delta.finish_reason is not None:
                finish_reason = "tool_calls" if output.calls else delta.finish_reason
                yield chunk([{"index": delta.index, "delta": {}, "logprobs": logprobs, "finish_reason": finish_reason}])
            elif logprobs is not None and logprobs["content"]:
                yield chunk([{"index": delta.index, "delta": {}, "logprobs": logprobs, "finish_reason": None}])
        if include_usage:
            yield {**chunk([]), "usage": self.usage(job)}


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
