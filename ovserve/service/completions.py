"""Legacy text completions: prompt(s) -> engine jobs -> OpenAI ``text_completion`` objects.

No chat template: each prompt is encoded as is, with the tokenizer's special tokens (BOS), as
OVMS and vLLM do. A list of prompts runs as one engine request per prompt, concurrently; choice
``i * n + j`` is the j-th completion of prompt i, as OpenAI numbers them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from typing import Any

from ovserve.engine.messages import EnginePrompt, VisionPrompt
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.protocol import CompletionRequest
from ovserve.service.generation import ChoiceDelta
from ovserve.service.models import ModelRegistry
from ovserve.service.output import ParsedDelta
from ovserve.service.response import Choice, Job, Logprob, ready_model, sampling_params


@dataclass(kw_only=True)
class CompletionJob(Job[CompletionRequest]):
    response_object = "text_completion"
    chunk_object = "text_completion"
    id_prefix = "cmpl"

    prompts: list[str]
    prompt_ids: list[list[int]]

    def engine_prompts(self) -> list[EnginePrompt]:
        if self.model.vision is not None:
            # A VLM pipeline takes prompt text, never token ids (ids fail its step() and, with
            # other requests in the step, have killed the engine process).
            return [VisionPrompt(prompt, []) for prompt in self.prompts]
        return list(self.prompt_ids)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(ids) for ids in self.prompt_ids)

    def prefix(self, choice: Choice) -> str:
        """What the choice's text starts with: its prompt with ``echo``."""
        return self.prompts[choice.index // self.params.n] if self.request.echo else ""


class CompletionService:
    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

    async def prepare(self, request: CompletionRequest) -> CompletionJob:
        model = ready_model(self.models, request.model)
        if request.echo and request.wants_logprobs:
            raise UnsupportedParameterError(
                "'echo' with 'logprobs' needs the prompt tokens' logprobs, which the engine does not give",
                param="echo",
            )
        prompts = request.prompts
        if model.vision is not None:
            for prompt in prompts:  # a VLM reads image placeholders in the text as image slots
                model.vision.check_prompt(prompt, 0, param="prompt")
        prompt_ids = [await model.encode_prompt(prompt, add_special_tokens=True, param="prompt") for prompt in prompts]
        for position, ids in enumerate(prompt_ids):
            if not ids:  # the engine cannot start from nothing
                raise BadRequestError(f"prompt {position} encodes to no tokens", param="prompt")
        # One sampling configuration serves every prompt: the longest one bounds the output.
        params = sampling_params(request, model, prompt_tokens=max(len(ids) for ids in prompt_ids), param="prompt")
        return CompletionJob(request=request, model=model, prompts=prompts, prompt_ids=prompt_ids, params=params)

    async def complete(self, job: CompletionJob) -> dict[str, Any]:
        return job.response(
            [
                {
                    "index": choice.index,
                    "text": job.prefix(choice) + choice.parsed.content,
                    "logprobs": _logprobs_object(choice.logprobs, 0) if job.params.logprobs else None,
                    "finish_reason": choice.finish_reason,
                }
                for choice in await job.choices()
            ]
        )

    def stream(self, job: CompletionJob) -> AsyncGenerator[dict[str, Any], None]:
        def write(choice: Choice, delta: ChoiceDelta, step: ParsedDelta, first: bool) -> Iterator[dict[str, Any]]:
            prefix = job.prefix(choice) if first else ""
            text = prefix + step.content
            if not text and not delta.finished:
                return
            logprobs = None
            if job.params.logprobs:
                # text_offset: the characters sent before this step.
                sent = len(job.prefix(choice)) + len(choice.parsed.content) - len(step.content)
                logprobs = _logprobs_object(delta.logprobs or [], sent)
            finish_reason = choice.finish_reason if delta.finished else None
            yield {"index": choice.index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}

        return job.chunks(write)


def _logprobs_object(entries: list[Logprob], start: int) -> dict[str, Any]:
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
