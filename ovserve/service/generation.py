"""What chat and text completions share between the engine's outputs and the response objects.

:func:`follow_choices` turns one engine request's outputs into per-choice deltas with stop
sequences applied; :func:`merge` runs several engine requests (one per prompt of a text
completion) as one stream; :func:`usage` is the usage object both endpoints report.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ovserve.engine.messages import SequenceOutput
from ovserve.generation_config import GenerationParams
from ovserve.service.stop import StopTrimmer

T = TypeVar("T")


@dataclass
class ChoiceDelta:
    index: int
    text: str
    logprobs: list[tuple[int, str, float]] | None = None
    engine_finish: str | None = None  # the engine's reason: "stop" (EOS, a stop token) or "length"
    stop_string: bool = False  # the server found one of the request's stop strings

    @property
    def finished(self) -> bool:
        """The choice's last delta (``ovserve.service.response.finish_reason`` names why)."""
        return self.stop_string or self.engine_finish is not None


@dataclass
class TokenCount:
    """Generated tokens of a request so far (every choice, every prompt)."""

    completion_tokens: int = 0
    # Prompt tokens the engine's prefix cache served, summed over the request's prompts; None
    # until (unless) the engine says.
    cached_tokens: int | None = None


@dataclass
class _ChoiceState:
    trimmer: StopTrimmer
    finished: bool = False


async def follow_choices(
    outputs: AsyncIterator[SequenceOutput], params: GenerationParams, count: TokenCount
) -> AsyncIterator[ChoiceDelta]:
    """Engine outputs with stop sequences applied; ends when every choice has finished."""
    choices: dict[int, _ChoiceState] = {}
    async with contextlib.aclosing(outputs):  # type: ignore[type-var]
        async for output in outputs:
            count.completion_tokens += output.token_count
            if output.cached_tokens is not None:
                count.cached_tokens = (count.cached_tokens or 0) + output.cached_tokens
            state = choices.get(output.index)
            if state is None:
                state = choices[output.index] = _ChoiceState(StopTrimmer(params.stop, include_stop=params.include_stop))
            if state.finished:
                continue  # the server already stopped this choice on a stop sequence
            text = state.trimmer.push(output.text)
            if output.finish_reason is not None and not state.trimmer.stopped:
                text += state.trimmer.flush()
            delta = ChoiceDelta(output.index, text, output.logprobs, output.finish_reason, state.trimmer.stopped)
            state.finished = delta.finished
            yield delta
            if len(choices) == params.n and all(s.finished for s in choices.values()):
                return  # leaving the generator cancels whatever the engine still runs


_DONE = object()


async def merge(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Items of several streams as they come, tagged with the stream's position.

    Leaving early (a disconnect) or a failure in one stream closes all of them, which cancels
    their engine requests.
    """
    if len(streams) == 1:
        async with contextlib.aclosing(streams[0]):  # type: ignore[type-var]
            async for item in streams[0]:
                yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def pump(position: int, stream: AsyncIterator[T]) -> None:
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
                yield position, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def usage(prompt_tokens: int, count: TokenCount, *, prefix_caching: bool) -> dict[str, Any]:
    """OpenAI's usage object.

    ``prompt_tokens_details.cached_tokens`` (OpenAI, MindIE) is 0 with prefix caching off, and
    with it on what the engine's model of its prefix cache counted (ovserve.engine.prefix_cache);
    it is left out when that is unknown (a VLM's prompts).
    """
    result: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": count.completion_tokens,
        "total_tokens": prompt_tokens + count.completion_tokens,
    }
    cached = count.cached_tokens if prefix_caching else 0
    if cached is not None:
        result["prompt_tokens_details"] = {"cached_tokens": cached}
    return result
