"""Legacy text completions onto the core: a :class:`CompletionRequest` becomes
:class:`~ovserve.core.completion.Prompts`; the core's steps become ``text_completion`` objects.

A stream's commonest step, text added to one choice (not its last step, no logprobs), is encoded
without building its models (:class:`TextChunks`, byte for byte the models' encoding:
tests/unit/test_stream_templates.py); every other step goes through the models."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from ovserve.core.completion import CompletionGeneration, CompletionJob, Prompts
from ovserve.core.job import Logprob
from ovserve.dialects.body import NUMBER_HOLE, EncodedBody, Template, json_string, text_hole
from ovserve.dialects.endpoint import WorkCall
from ovserve.dialects.openai.common import ErrorBody, Usage
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.completions.response import Completion, CompletionChoice, CompletionLogprobs
from ovserve.errors import OvserveError, UnsupportedParameterError


@dataclass(frozen=True, slots=True)
class CompletionCall(WorkCall[CompletionJob, CompletionRequest]):
    """One completions request on its way: its core job and the client's request."""

    def prefix(self, choice: int) -> str:
        """What the choice's text starts with: its prompt with ``echo``."""
        return self.job.prompts[choice // self.job.params.n] if self.request.echo else ""


class CompletionEndpoint:
    """The text completions dialect, as the HTTP layer drives it (``ovserve.api.envelope``)."""

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
        return CompletionCall(job, request, streaming=request.stream)

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

    async def stream(self, call: CompletionCall) -> AsyncGenerator[Completion | EncodedBody, None]:
        job = call.job
        sent: dict[int, int] = {}  # characters of each choice sent so far (text_offset)
        text_chunks = None if job.params.logprobs else TextChunks.of(job)
        async with contextlib.aclosing(job.steps()) as steps:
            async for delta in steps:
                text = (call.prefix(delta.choice) if delta.first else "") + delta.content
                if not text and delta.finish_reason is None:
                    continue
                if text_chunks is not None and delta.finish_reason is None:
                    yield text_chunks.chunk(delta.choice, text)
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


class TextChunks:
    """A streamed step that adds text to a choice (not its last step, no logprobs), encoded
    without its models: :class:`Completion` encodes the chunk once per stream, with holes for the
    choice's index and text."""

    def __init__(self, template: Template) -> None:
        self._template = template

    @classmethod
    def of(cls, job: CompletionJob) -> TextChunks | None:
        """The stream's text chunks; None if the envelope cannot take holes (a model name
        holding a hole's marker)."""
        choice = CompletionChoice(index=NUMBER_HOLE, text=text_hole(0), logprobs=None, finish_reason=None)
        template = Template.of(_completion(job, [choice], None), NUMBER_HOLE, text_hole(0))
        return None if template is None else cls(template)

    def chunk(self, choice: int, text: str) -> EncodedBody:
        return self._template.fill(str(choice), json_string(text))


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
