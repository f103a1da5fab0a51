"""What chat and text completions share around one request: the job, its choices, the envelope.

Each service's ``prepare`` opens with :func:`ready_model` and ends with :func:`sampling_params`
(what can fail with a 4xx or a 503 fails before a byte is sent); :meth:`Job.run` streams every
choice's deltas from the engine; one :class:`Choice` per choice accumulates them (parsed text,
tool calls, logprobs, finish) for the unary response and the stream alike; :meth:`Job.response`
and :meth:`Job.chunk` wrap the endpoint's choice objects in OpenAI's envelope. The endpoints
differ only in how a :class:`Choice` is written out.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from ovserve.engine.messages import EnginePrompt
from ovserve.generation_config import GenerationParams, resolve_generation_params, resolve_max_new_tokens
from ovserve.metrics import RequestRecorder
from ovserve.parsers.base import ToolCall
from ovserve.protocol import SamplingRequest
from ovserve.service.admission import Ticket
from ovserve.service.generation import ChoiceDelta, TokenCount, follow_choices, merge, usage
from ovserve.service.models import ModelRegistry, ServedModel
from ovserve.service.output import ChoiceOutput, ParsedDelta

RequestT = TypeVar("RequestT", bound=SamplingRequest)
Logprob = tuple[int, str, float]


def ready_model(models: ModelRegistry, name: str) -> ServedModel:
    """The served model ``name``, or a 404 (unknown) / 400 (it does not generate text: an
    embeddings or rerank model) / 503 (loading, restarting)."""
    model = models.get(name)
    model.require_task("text_generation")
    if not model.engine.ready:
        raise model.engine.not_ready_error()
    return model


def sampling_params(
    request: SamplingRequest, model: ServedModel, *, prompt_tokens: int, param: str
) -> GenerationParams:
    """The prompt-length check, then every sampling value (request, generation_config.json, built-in).

    ``prompt_tokens`` is the longest prompt the parameters serve; ``param`` names the prompt field.
    """
    model.check_prompt_length(prompt_tokens, param=param)
    max_new_tokens = resolve_max_new_tokens(
        request.output_limit,
        model.defaults,
        prompt_tokens=prompt_tokens,
        context_length=model.context_length,
        max_tokens_limit=model.max_tokens_limit,
        no_default=request.output_limit_removed,
        prompt_param=param,
    )
    return resolve_generation_params(
        request, model.defaults, max_new_tokens=max_new_tokens, best_of_limit=model.best_of_limit, kind=model.kind
    )


def finish_reason(engine_finish: str | None, *, stop_string: bool, tool_calls: bool) -> str:
    """A choice's ``finish_reason``, decided here only.

    Parsed tool calls make it ``tool_calls`` (OpenAI), whatever ended the generation; a stop
    string the server found is ``stop``; otherwise the engine's reason (``stop``: EOS or a stop
    token, ``length``: max_tokens). A choice the engine never finished reads ``stop``.
    """
    if tool_calls:
        return "tool_calls"
    if stop_string:
        return "stop"
    return engine_finish or "stop"


class Choice:
    """One choice of a response, built up from its deltas: the unary response and the stream
    read the same state."""

    def __init__(self, index: int, output: ChoiceOutput) -> None:
        self.index = index
        self._output = output  # the reasoning / tool-call parsers' state
        self.parsed = ParsedDelta()  # everything parsed so far
        self.logprobs: list[Logprob] = []
        self.finished = False
        self._engine_finish: str | None = None
        self._stop_string = False

    def add(self, delta: ChoiceDelta) -> ParsedDelta:
        """Take one delta; returns what it parsed to (with the parsers' tail on the last one)."""
        step = self._output.push(delta.text)
        if delta.finished:
            step.extend(self._output.finish())
            self.finished = True
            self._engine_finish, self._stop_string = delta.engine_finish, delta.stop_string
        self.parsed.extend(step)
        self.logprobs.extend(delta.logprobs or ())
        return step

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self.parsed.tool_calls

    @property
    def finish_reason(self) -> str:
        return finish_reason(self._engine_finish, stop_string=self._stop_string, tool_calls=bool(self.tool_calls))


# Writes one engine step of a choice as stream choice objects: (choice, its delta, what the
# delta parsed to, whether it is the choice's first delta).
ChunkWriter = Callable[[Choice, ChoiceDelta, ParsedDelta, bool], Iterable[dict[str, Any]]]


@dataclass(kw_only=True)
class Job(ABC, Generic[RequestT]):
    """A validated request, ready for the engine; each endpoint's job says what its prompts are."""

    response_object: ClassVar[str]
    chunk_object: ClassVar[str]
    id_prefix: ClassVar[str]

    request: RequestT
    model: ServedModel
    params: GenerationParams
    count: TokenCount = field(default_factory=TokenCount)
    id: str = field(init=False)
    created: int = field(init=False)
    # Set by admit(): the request's place in its model's admission counts, and its metrics.
    ticket: Ticket | None = field(default=None, init=False)
    recorder: RequestRecorder | None = field(default=None, init=False)
    # How the choices ended, in the order they did (the outcome /metrics counts).
    finish_reasons: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    # -- what an endpoint's job provides --------------------------------------------------

    @abstractmethod
    def engine_prompts(self) -> list[EnginePrompt]:
        """One engine request per prompt; choice ``i * n + j`` is the j-th of prompt i."""

    @property
    @abstractmethod
    def prompt_tokens(self) -> int:
        """The usage's prompt_tokens."""

    def choice_output(self) -> ChoiceOutput:
        """A choice's parsers: none, unless the endpoint parses reasoning or tool calls."""
        return ChoiceOutput(tool_format=None, reasoning_format=None)

    # -- shared -------------------------------------------------------------------------------

    @property
    def prompt_tokens_in_flight(self) -> int:
        """What this job adds to its model's prompt tokens in flight (admission control)."""
        return self.prompt_tokens

    def admit(self, recorder: RequestRecorder | None = None) -> None:
        """Take a place in the model's queue (429 when it is full), before any engine work."""
        self.ticket = self.model.admission.admit(self.prompt_tokens_in_flight)
        self.recorder = recorder
        if recorder is not None:
            recorder.admitted(self.prompt_tokens)

    def release(self) -> None:
        """Give the place back; idempotent, called however the request ended."""
        if self.ticket is not None:
            self.ticket.release()

    @property
    def outcome(self) -> str:
        """The first choice's finish_reason: what /metrics counts a completed request as."""
        return self.finish_reasons[0] if self.finish_reasons else "stop"

    async def run(self) -> AsyncGenerator[ChoiceDelta, None]:
        """Every prompt's choices with stop strings applied, numbered ``prompt * n + choice``
        (OpenAI's order); ends when every choice has finished."""
        n = self.params.n
        streams = [
            follow_choices(self.model.generate(prompt, self.params), self.params, self.count)
            for prompt in self.engine_prompts()
        ]
        counted = self.count.completion_tokens
        async for position, delta in merge(streams):
            delta.index += position * n
            arrived = self.count.completion_tokens - counted
            if arrived:
                counted += arrived
                if self.ticket is not None:
                    self.ticket.started()
                if self.recorder is not None:
                    self.recorder.tokens(delta.index, arrived)
            yield delta
        if self.recorder is not None and self.count.cached_tokens is not None:
            self.recorder.prefix_cache(self.prompt_tokens, self.count.cached_tokens)

    async def choices(self) -> list[Choice]:
        """Every choice, complete (a unary response)."""
        choices = [Choice(index, self.choice_output()) for index in range(len(self.engine_prompts()) * self.params.n)]
        async with contextlib.aclosing(self.run()) as deltas:
            async for delta in deltas:
                choices[delta.index].add(delta)
        self.finish_reasons = [choice.finish_reason for choice in choices]
        return choices

    async def steps(self) -> AsyncGenerator[tuple[Choice, ChoiceDelta, ParsedDelta, bool], None]:
        """Every delta as it arrives: its choice (updated), the delta, what it parsed to, and whether
        it is the choice's first. Finish reasons are recorded as choices finish."""
        choices: dict[int, Choice] = {}
        # aclosing: a disconnect (this generator closed) cancels the engine requests at once.
        async with contextlib.aclosing(self.run()) as deltas:
            async for delta in deltas:
                choice = choices.get(delta.index)
                first = choice is None
                if choice is None:
                    choice = choices[delta.index] = Choice(delta.index, self.choice_output())
                step = choice.add(delta)
                if delta.finished:
                    self.finish_reasons.append(choice.finish_reason)
                yield choice, delta, step, first

    async def chunks(self, write: ChunkWriter) -> AsyncGenerator[dict[str, Any], None]:
        """The stream: one chunk per choice object ``write`` makes, then the usage chunk if asked."""
        async with contextlib.aclosing(self.steps()) as steps:
            async for choice, delta, step, first in steps:
                for choice_object in write(choice, delta, step, first):
                    yield self.chunk([choice_object])
        if self.request.include_usage:
            yield {**self.chunk([]), "usage": self.usage()}

    def usage(self) -> dict[str, Any]:
        return usage(self.prompt_tokens, self.count, prefix_caching=self.model.prefix_caching)

    def response(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.response_object,
            "created": self.created,
            "model": self.model.name,
            "choices": choices,
            "usage": self.usage(),
        }

    def chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk = {
            "id": self.id,
            "object": self.chunk_object,
            "created": self.created,
            "model": self.model.name,
            "choices": choices,
        }
        if self.request.include_usage:
            chunk["usage"] = None  # OpenAI: null in every chunk but the last
        return chunk
