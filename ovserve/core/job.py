"""One generation request inside the core: the job, its choices, and the neutral steps it yields.

A dialect's adapter builds the core's input (a :class:`~ovserve.core.conversation.Conversation`,
or a prompt list for text completions); :mod:`ovserve.core.chat` / :mod:`ovserve.core.completion`
prepare a :class:`Job` from it, failing with a 4xx or 503 before any engine work. The job then
yields typed :class:`Delta` steps (reasoning, content and tool calls of one choice, its finish
reason on its last step) and ends with the request's :class:`Usage`; the adapter renders them in
its own response models. Nothing here knows a dialect's JSON.

The step loop is one async generator over the engine's outputs: stop strings, parsing, drafting
counts, admission and metrics happen inline, so a streamed token crosses three generators in the
server (the engine client's, :meth:`Job.steps`, the adapter's).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ovserve.core.conversation import Sampling
from ovserve.core.engine_work import ModelWork
from ovserve.core.generation_config import GenerationParams, resolve_generation_params, resolve_max_new_tokens
from ovserve.core.output import ChoiceOutput, ParsedDelta
from ovserve.core.stop import StopTrimmer
from ovserve.engine.messages import EnginePrompt, SequenceOutput
from ovserve.models.drafting import DRAFTING_KINDS, DraftingCounter
from ovserve.models.served import ModelRegistry, ServedModel
from ovserve.parsers.base import ToolCall

Logprob = tuple[int, str, float]
FinishReason = Literal["stop", "length", "tool_calls"]


def ready_model(models: ModelRegistry, name: str) -> ServedModel:
    """The served model ``name``, or a 404 (unknown) / 400 (it does not generate text: an
    embeddings or rerank model) / 503 (loading at start, restarting, a failed load in its
    backoff). A model unloaded on purpose passes: :meth:`ModelWork.take_engine` loads it."""
    model = models.get(name)
    model.require_task("text_generation")
    model.check_available()
    return model


def sampling_params(sampling: Sampling, model: ServedModel, *, prompt_tokens: int, param: str) -> GenerationParams:
    """The prompt-length check, then every sampling value (request, generation_config.json, built-in).

    ``prompt_tokens`` is the longest prompt the parameters serve; ``param`` names the prompt field.
    """
    model.check_prompt_length(prompt_tokens, param=param)
    max_new_tokens = resolve_max_new_tokens(
        sampling,
        model.defaults,
        prompt_tokens=prompt_tokens,
        context_length=model.context_length,
        max_tokens_limit=model.max_tokens_limit,
        prompt_param=param,
    )
    return resolve_generation_params(
        sampling, model.defaults, max_new_tokens=max_new_tokens, best_of_limit=model.best_of_limit, kind=model.kind
    )


def finish_reason(engine_finish: str | None, *, stop_string: bool, tool_calls: bool) -> FinishReason:
    """A choice's ``finish_reason``, decided here only.

    Parsed tool calls make it ``tool_calls`` (OpenAI), whatever ended the generation; a stop
    string the server found is ``stop``; otherwise the engine's reason (``stop``: EOS or a stop
    token, ``length``: max_tokens). A choice the engine never finished reads ``stop``.
    """
    if tool_calls:
        return "tool_calls"
    if stop_string or engine_finish != "length":
        return "stop"
    return "length"


@dataclass(slots=True)
class Delta:
    """What one engine step added to one choice, parsed: the unit every adapter renders."""

    choice: int
    reasoning: str
    content: str
    tool_calls: list[ToolCall]
    logprobs: list[Logprob] | None
    first: bool  # the choice's first step (OVMS: its role chunk marks the first token)
    finish_reason: FinishReason | None  # on the choice's last step
    calls_before: int  # the choice's tool calls before this step (their stream indices start here)


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    # Prompt tokens the engine's prefix cache served; None when unknown (a VLM's prompts).
    cached_tokens: int | None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Choice:
    """One choice, built up from its engine outputs: the unary response reads the whole; the
    stream reads each :class:`Delta` as it is made."""

    def __init__(self, index: int, output: ChoiceOutput, params: GenerationParams) -> None:
        self.index = index
        self._output = output  # the reasoning / tool-call parsers' state
        self._trimmer = StopTrimmer(params.stop, include_stop=params.include_stop)
        self.parsed = ParsedDelta()  # everything parsed so far
        self.logprobs: list[Logprob] = []
        self.started = False
        self.finished = False
        self._engine_finish: str | None = None
        self._stop_string = False

    def add(self, output: SequenceOutput) -> Delta | None:
        """Take one engine output (stop strings applied); None once the choice has finished."""
        if self.finished:
            return None  # the server already stopped this choice on a stop string
        text = self._trimmer.push(output.text)
        self._stop_string = self._trimmer.stopped
        if output.finish_reason is not None and not self._stop_string:
            text += self._trimmer.flush()
        first, self.started = not self.started, True
        calls_before = len(self.parsed.tool_calls)
        step = self._output.push(text)
        if self._stop_string or output.finish_reason is not None:
            step.extend(self._output.finish())
            self.finished = True
            self._engine_finish = output.finish_reason
        self.parsed.extend(step)
        self.logprobs.extend(output.logprobs or ())
        finish = self.finish_reason if self.finished else None
        return Delta(
            self.index, step.reasoning, step.content, step.tool_calls, output.logprobs, first, finish, calls_before
        )

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self.parsed.tool_calls

    @property
    def finish_reason(self) -> FinishReason:
        return finish_reason(self._engine_finish, stop_string=self._stop_string, tool_calls=bool(self.tool_calls))

    @property
    def stop_sequence(self) -> str | None:
        """The request's stop string that ended this choice, if one did."""
        return self._trimmer.matched


@dataclass(kw_only=True)
class Job(ModelWork, ABC):
    """A validated request, ready for the engine; each kind of job says what its prompts are.
    Its admission and engine hold are every request's (:class:`~ovserve.core.engine_work.ModelWork`)."""

    id_prefix: ClassVar[str]

    params: GenerationParams
    include_usage: bool = False  # the stream ends with a usage chunk (OpenAI's stream_options)
    completion_tokens: int = field(default=0, init=False)
    cached_tokens: int | None = field(default=None, init=False)
    id: str = field(init=False)
    created: int = field(init=False)
    # How the choices ended, in the order they did (the outcome /metrics counts).
    finish_reasons: list[FinishReason] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    # -- what each kind of job provides ---------------------------------------------------

    @abstractmethod
    def engine_prompts(self) -> list[EnginePrompt]:
        """One engine request per prompt; choice ``i * n + j`` is the j-th of prompt i."""

    @property
    @abstractmethod
    def prompt_tokens(self) -> int:
        """The usage's prompt_tokens."""

    def choice_output(self) -> ChoiceOutput:
        """A choice's parsers: none, unless the job parses reasoning or tool calls."""
        return ChoiceOutput(tool_format=None, reasoning_format=None)

    # -- shared -------------------------------------------------------------------------------

    @property
    def admission_tokens(self) -> int:
        return self.prompt_tokens

    @property
    def outcome(self) -> str:
        """The first choice's finish_reason: what /metrics counts a completed request as."""
        return self.finish_reasons[0] if self.finish_reasons else "stop"

    @property
    def usage(self) -> Usage:
        cached = self.cached_tokens if self.model.prefix_caching else 0
        return Usage(self.prompt_tokens, self.completion_tokens, cached)

    async def steps(self, choices: list[Choice] | None = None) -> AsyncGenerator[Delta, None]:
        """Every choice's deltas as the engine makes them, choices numbered ``prompt * n + j``
        (OpenAI's order); ends when every choice has finished. ``choices``, when given, is filled
        with the choices' whole state. Closing it early (a disconnect) cancels the engine requests."""
        prompts = self.engine_prompts()
        if choices is None:
            choices = []
        choices[:] = [Choice(index, self.choice_output(), self.params) for index in range(len(prompts) * self.params.n)]
        finished = 0
        drafting = DraftingCounter(self.model, self.params) if self.model.kind in DRAFTING_KINDS else None
        async with contextlib.aclosing(self._outputs(prompts)) as outputs:  # type: ignore[type-var]
            async for output in outputs:
                if output.token_count:
                    self.completion_tokens += output.token_count
                    self.started()
                    if self.recorder is not None:
                        self.recorder.tokens(output.index, output.token_count)
                if output.cached_tokens is not None:
                    self.cached_tokens = (self.cached_tokens or 0) + output.cached_tokens
                if drafting is not None:
                    drafting.observe(output)
                delta = choices[output.index].add(output)
                if delta is None:
                    continue
                if delta.finish_reason is not None:
                    self.finish_reasons.append(delta.finish_reason)
                    finished += 1
                yield delta
                if finished == len(choices):
                    break  # leaving cancels whatever the engine still runs
        if self.recorder is not None and self.cached_tokens is not None:
            self.recorder.prefix_cache(self.prompt_tokens, self.cached_tokens)

    def _outputs(self, prompts: list[EnginePrompt]) -> AsyncIterator[SequenceOutput]:
        """The engine's outputs, choice indices numbered across prompts."""
        if len(prompts) == 1:
            return self.model.engine.generate(prompts[0], self.params)
        return _merge([self.model.engine.generate(prompt, self.params) for prompt in prompts], self.params.n)

    async def choices(self) -> list[Choice]:
        """Every choice, complete (a unary response)."""
        choices: list[Choice] = []
        async with contextlib.aclosing(self.steps(choices)) as steps:
            async for _ in steps:
                pass
        return choices


_DONE = object()


async def _merge(streams: list[AsyncIterator[SequenceOutput]], n: int) -> AsyncGenerator[SequenceOutput, None]:
    """Outputs of several engine requests as they come, the choice index of stream ``p``'s
    output ``j`` made ``p * n + j``. Leaving early or a failure in one stream closes all of them,
    which cancels their engine requests."""
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def pump(position: int, stream: AsyncIterator[SequenceOutput]) -> None:
        try:
            async with contextlib.aclosing(stream):  # type: ignore[type-var]
                async for item in stream:
                    await queue.put((position, item))
        except Exception as exc:  # travels to the consumer, which re-raises it
            await queue.put((position, exc))
        else:
            await queue.put((position, _DONE))

    tasks = [asyncio.create_task(pump(position, stream)) for position, stream in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            position, item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                item.index += position * n
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
