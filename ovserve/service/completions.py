"""Legacy text completions: prompt(s) -> engine jobs -> OpenAI ``text_completion`` objects.

No chat template: each prompt is encoded as is, with the tokenizer's special tokens (BOS), as
OVMS and vLLM do. A list of prompts runs as one engine request per prompt, concurrently; choice
``i * n + j`` is the j-th completion of prompt i, as OpenAI numbers them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ovserve.api.protocol import CompletionRequest
from ovserve.errors import BadRequestError, ServiceUnavailableError, UnsupportedParameterError
from ovserve.generation_config import GenerationParams, resolve_generation_params, resolve_max_new_tokens
from ovserve.service.generation import ChoiceDelta, TokenCount, follow_choices, merge, usage
from ovserve.service.models import ModelRegistry, ServedModel


@dataclass
class CompletionJob:
    request: CompletionRequest
    model: ServedModel
    prompts: list[str]
    prompt_ids: list[list[int]]
    params: GenerationParams
    count: TokenCount = field(default_factory=TokenCount)
    id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def usage(self) -> dict[str, Any]:
        prompt_tokens = sum(len(ids) for ids in self.prompt_ids)
        return usage(prompt_tokens, self.count, cached_tokens_known=not self.model.prefix_caching)


@dataclass
class _Choice:
    """One choice of a unary text completion, built up from its deltas."""

    text: list[str] = field(default_factory=list)
    logprobs: list[tuple[int, str, float]] = field(default_factory=list)
    finish_reason: str | None = None


class CompletionService:
    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

    async def prepare(self, request: CompletionRequest) -> CompletionJob:
        model = self.models.get(request.model)
        if not model.engine.ready:
            raise ServiceUnavailableError(f"model '{model.name}' is {model.engine.state.value}; retry shortly")
        if request.echo and request.wants_logprobs:
            raise UnsupportedParameterError(
                "'echo' with 'logprobs' needs the prompt tokens' logprobs, which the engine does not give",
                param="echo",
            )
        prompts = request.prompts
        prompt_ids = [await model.encode_prompt(prompt, add_special_tokens=True, param="prompt") for prompt in prompts]
        for position, ids in enumerate(prompt_ids):
            if not ids:  # the engine cannot start from nothing
                raise BadRequestError(f"prompt {position} encodes to no tokens", param="prompt")
        model.check_prompt_length(max(len(ids) for ids in prompt_ids), param="prompt")
        # One sampling configuration serves every prompt: the longest one bounds the output.
        max_new_tokens = resolve_max_new_tokens(
            request.output_limit,
            model.defaults,
            prompt_tokens=max(len(ids) for ids in prompt_ids),
            context_length=model.context_length,
            max_tokens_limit=model.max_tokens_limit,
            no_default=request.output_limit_removed,
            prompt_param="prompt",
        )
        params = resolve_generation_params(
            request, model.defaults, max_new_tokens=max_new_tokens, best_of_limit=model.best_of_limit, kind=model.kind
        )
        return CompletionJob(request=request, model=model, prompts=prompts, prompt_ids=prompt_ids, params=params)

    async def run(self, job: CompletionJob) -> AsyncIterator[ChoiceDelta]:
        """Every prompt's choices, renumbered ``prompt * n + choice``."""
        n = job.params.n
        streams = [follow_choices(job.model.generate(ids, job.params), job.params, job.count) for ids in job.prompt_ids]
        async for position, delta in merge(streams):
            delta.index += position * n
            yield delta

    def _prefix(self, job: CompletionJob, index: int) -> str:
        return job.prompts[index // job.params.n] if job.request.echo else ""

    async def complete(self, job: CompletionJob) -> dict[str, Any]:
        choices = {index: _Choice() for index in range(len(job.prompts) * job.params.n)}
        async for delta in self.run(job):
            choice = choices[delta.index]
            choice.text.append(delta.text)
            choice.logprobs.extend(delta.logprobs or ())
            if delta.finish_reason is not None:
                choice.finish_reason = delta.finish_reason
        return {
            "id": job.id,
            "object": "text_completion",
            "created": job.created,
            "model": job.model.name,
            "choices": [
                {
                    "index": index,
                    "text": self._prefix(job, index) + "".join(choice.text),
                    "logprobs": _logprobs_object(choice.logprobs, 0) if job.params.logprobs else None,
                    "finish_reason": choice.finish_reason or "stop",
                }
                for index, choice in choices.items()
            ],
            "usage": job.usage(),
        }

    async def stream(self, job: CompletionJob) -> AsyncGenerator[dict[str, Any], None]:
        include_usage = job.request.include_usage
        usage_field: dict[str, Any] = {"usage": None} if include_usage else {}

        def chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
            return {
                "id": job.id,
                "object": "text_completion",
                "created": job.created,
                "model": job.model.name,
                "choices": choices,
                **usage_field,
            }

        # Characters sent so far per choice: text_offset of the next logprob entry.
        offsets: dict[int, int] = {}
        async for delta in self.run(job):
            text = delta.text
            if delta.index not in offsets:
                text = self._prefix(job, delta.index) + text
                offsets[delta.index] = len(text) - len(delta.text)
            if not text and delta.finish_reason is None:
                continue
            logprobs = None
            if job.params.logprobs:
                logprobs = _logprobs_object(delta.logprobs or [], offsets[delta.index])
            offsets[delta.index] += len(delta.text)
            yield chunk(
                [{"index": delta.index, "text": text, "logprobs": logprobs, "finish_reason": delta.finish_reason}]
            )
        if include_usage:
            yield {**chunk([]), "usage": job.usage()}


def _logprobs_object(entries: list[tuple[int, str, float]], start: int) -> dict[str, Any]:
    """The legacy completions logprobs shape. ``logprobs: 0`` asks for no alternatives, so each
    position's ``top_logprobs`` holds only the chosen token (all the engine gives)."""
    offsets = []
    position = start
    for _, token, _ in entries:
        offsets.append(position)
        position += len(token)
    return {
        "tokens": [token for _, token, _ in entries],
        "token_logprobs": [logprob for _, _, logprob in entries],
        "top_logprobs": [{token: logprob} for _, token, logprob in entries],
        "text_offset": offsets,
    }
