"""Legacy text completions onto the core: a :class:`CompletionRequest` becomes
:class:`~ovserve.core.completion.Prompts`; the core's steps become ``text_completion`` objects."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from ovserve.core.completion import CompletionGeneration, CompletionJob, Prompts
from ovserve.core.job import Logprob
from ovserve.dialects.openai.common import ErrorBody, Usage
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.completions.response import Completion, CompletionChoice, CompletionLogprobs
from ovserve.errors import OvserveError, UnsupportedParameterError


@dataclass(slots=True)
class CompletionCall:
    request: CompletionRequest
    job: CompletionJob

    @property
    def streaming(self) -> bool:
        return self.request.stream

    def prefix(self, choice: int) -> str:
        """What the choice's text starts with: its prompt with ``echo``."""
        return self.job.prompts[choice // self.job.params.n] if self.request.echo else ""


class CompletionEndpoint:
    """The text completions dialect, as the HTTP layer drives it (``ovserve.api.routes.generate``)."""

    def __init__(self, generation: CompletionGeneration) -> None:
        self.generation = generation

    async def prepare(self, request: CompletionRequest, caller: str) -> CompletionCall:
        if request.echo and request.wants_logprobs:
            raise UnsupportedParameterError(
                "'echo' with 'logprobs' needs the prompt tokens' logprobs, which the engine does not give",
                param="echo",
            )
        prompts = Prompts(model=request.model, prompts=request.prompts, sampling=request.sampling())
        job = await self.generation.prepare(prompts)
        job.include_usage = request.include_usage
        return CompletionCall(request, job)

    async def complete(self, call: CompletionCall) -> Completion:
        job = call.job
        choices = [
            CompletionChoice(
                index=choice.index,
                text=call.prefix(choice.index) + choice.parsed.content,
                logprobs=_logprobs(choice.logprobs, 0) if job.params.logprobs else None,
                finish_reason=choice.finish_reason,
            )
            for choice in await job.choices()
        ]
        return _completion(job, choices, Usage.of(job.usage))

    async def stream(self, call: CompletionCall) -> AsyncGenerator[Completion, None]:
        job = call.job
        sent: dict[int, int] = {}  # characters of each choice sent so far (text_offset)
        async with contextlib.aclosing(job.steps()) as steps:
            async for delta in steps:
                text = (call.prefix(delta.choice) if delta.first else "") + delta.content
                if not text and delta.finish_reason is None:
                    continue
                logprobs = None
                if job.params.logprobs:
                    logprobs = _logprobs(delta.logprobs or [], sent.get(delta.choice, 0))
                sent[delta.choice] = sent.get(delta.choice, 0) + len(text)
                choice = CompletionChoice(
                    index=delta.choice, text=text, logprobs=logprobs, finish_reason=delta.finish_reason
                )
                yield _completion(job, [choice], None)
        if job.include_usage:
            yield _completion(job, [], Usage.of(job.usage))

    def failure_event(self, call: CompletionCall, error: OvserveError) -> ErrorBody:
        return ErrorBody.of(error)


def _completion(job: CompletionJob, choices: list[CompletionChoice], usage: Usage | None) -> Completion:
    completion = Completion(
        id=job.id, object="text_completion", created=job.created, model=job.model.name, choices=choices
    )
    if usage is not None or job.include_usage:
        completion.usage = usage  # a stream with include_usage: null in every chunk but the last
    return completion


def _logprobs(entries: list[Logprob], start: int) -> CompletionLogprobs:
    """``text_offset``: where each token starts in the choice's text; ``logprobs: 0`` asks for no
    alternatives, so each position's ``top_logprobs`` holds only the chosen token."""
    offsets = []
    position = start
    for _, token, _ in entries:
        offsets.append(position)
        position += len(token)
    return CompletionLogprobs(
        tokens=[token for _, token, _ in entries],
        token_logprobs=[logprob for _, _, logprob in entries],
        top_logprobs=[{token: logprob} for _, token, logprob in entries],
        text_offset=offsets,
    )
