"""A streamed chat token crosses at most three async generators in the server: the engine
client's ``generate``, the core's ``Job.steps`` and the dialect adapter's ``stream``. Each extra
layer costs every token of every stream a generator hop; this keeps the path from growing back."""

from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Any

from ovserve.engine import client as engine_client
from tests.fast.harness import fast_model
from tests.fast.scripted_engine import reply


def _async_generators_on_the_stack() -> list[str]:
    frame = sys._getframe(1)
    names = []
    while frame is not None:
        if frame.f_code.co_flags & inspect.CO_ASYNC_GENERATOR:
            names.append(frame.f_code.co_qualname)
        frame = frame.f_back  # type: ignore[assignment]
    return names


async def test_a_streamed_token_crosses_three_async_generators(serve, messages, monkeypatch) -> None:
    seen: list[list[str]] = []

    class WatchedQueue(asyncio.Queue[Any]):
        async def get(self) -> Any:
            # Called by the engine client's generator while every layer above it waits on it.
            seen.append(_async_generators_on_the_stack())
            return await super().get()

    monkeypatch.setattr(engine_client.asyncio, "Queue", WatchedQueue)
    served = await serve(fast_model(reply("Hel", "lo", "!")))
    for path in ("/v3/chat/completions", "/v3/responses"):
        body = {"messages": messages} if "chat" in path else {"input": "Hi"}
        status, events = await served.post(path, {**body, "stream": True})
        assert status == 200 and events
    assert seen, "the engine client's generator never waited for an output"
    assert all(len(stack) <= 3 for stack in seen), seen
    assert any("EngineClient.generate" in name for name in seen[0])
    assert any("Job.steps" in name for name in seen[0])
