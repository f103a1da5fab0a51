"""A streamed token's path through the server, in every dialect that streams generation.

It crosses at most three async generators, all driven by the request's own task: the engine
client's ``generate``, the core's ``Job.steps`` and the dialect adapter's ``stream``. Counted by
walking the frames above the engine client's generator each time it waits for an output: every
async generator frame between it and aiohttp's request handler is one hop (a task between them, as
Anthropic's pings once were, would cut the chain short of the handler). Each extra layer costs
every token of every stream a generator hop; this keeps the path from growing back.

And a step that only adds text builds no response model: a stream of many tokens builds as many
models as a stream of a few (its first and last events' only).

And the named-event streams (Responses, Anthropic) write their many events around the text in
bursts: a write per step, and at most two more (a write is a system call and a client's wake-up).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Any

import pytest

from ovserve.api.sse import SSEWriter
from ovserve.dialects.body import Body
from ovserve.engine import client as engine_client
from tests.fast.harness import MODEL, Served, fast_model
from tests.fast.scripted_engine import reply

MESSAGES = [{"role": "user", "content": "Hi"}]
# Every route that streams generation, with a body that streams.
STREAMS = {
    "chat": ("/v3/chat/completions", {"messages": MESSAGES, "stream": True}),
    "completions": ("/v3/completions", {"prompt": "Hi", "stream": True}),
    "responses": ("/v3/responses", {"input": "Hi", "stream": True}),
    "anthropic": ("/v1/messages", {"messages": MESSAGES, "max_tokens": 64, "stream": True}),
    "ollama chat": ("/api/chat", {"messages": MESSAGES}),
    "ollama generate": ("/api/generate", {"prompt": "Hi"}),
}


def _path_above(frame: Any) -> tuple[list[str], bool]:
    """The async generators on the stack from ``frame`` up, and whether it reaches aiohttp's
    request handler (nothing but generators and coroutines of the request's task in between)."""
    names = []
    handler = False
    while frame is not None:
        if frame.f_code.co_flags & inspect.CO_ASYNC_GENERATOR:
            names.append(frame.f_code.co_qualname)
        handler = handler or frame.f_code.co_filename.endswith("web_protocol.py")
        frame = frame.f_back
    return names, handler


async def _stream(served: Served, name: str) -> str:
    path, body = STREAMS[name]
    async with served.client.post(path, json={"model": MODEL, **body}) as response:
        text = await response.text()
        assert response.status == 200, text
    return text


@pytest.mark.parametrize("name", list(STREAMS))
async def test_a_streamed_token_crosses_three_async_generators(serve, monkeypatch, name: str) -> None:
    seen: list[tuple[list[str], bool]] = []

    class WatchedQueue(asyncio.Queue[Any]):
        async def get(self) -> Any:
            # Called by the engine client's generator while every layer above it waits on it.
            seen.append(_path_above(sys._getframe(1)))
            return await super().get()

    monkeypatch.setattr(engine_client.asyncio, "Queue", WatchedQueue)
    served = await serve(fast_model(reply("Hel", "lo", " wor", "ld", "!")))
    await _stream(served, name)
    assert seen, "the engine client's generator never waited for an output"
    for generators, reaches_handler in seen:
        assert reaches_handler, f"{name}: a task between the handler and the engine: {generators}"
        assert len(generators) <= 3, (name, generators)
    generators = seen[0][0]
    assert generators[0] == "EngineClient.generate" and generators[1] == "Job.steps", generators
    print(f"{name}: {len(generators)} async generators per token: {' <- '.join(generators)}")


@pytest.mark.parametrize("name", list(STREAMS))
async def test_a_text_token_builds_no_response_model(serve, monkeypatch, name: str) -> None:
    built: list[str] = []
    init = Body.__init__

    def counted(self: Body, **fields: Any) -> None:
        built.append(type(self).__name__)
        init(self, **fields)

    monkeypatch.setattr(Body, "__init__", counted)
    counts = []
    for pieces in (3, 30):
        served = await serve(fast_model(reply(*(f"w{n} " for n in range(pieces)))))
        built.clear()
        text = await _stream(served, name)
        assert "w2 " in text
        counts.append(len(built))
    assert counts[0] == counts[1], f"{name}: {counts[0]} models for 3 tokens, {counts[1]} for 30"


@pytest.mark.parametrize("name", ["responses", "anthropic"])
async def test_the_events_around_the_text_take_at_most_two_writes(serve, monkeypatch, name: str) -> None:
    writes: list[bytes] = []
    write = SSEWriter._write

    async def counted(self: SSEWriter, frame: bytes) -> None:
        writes.append(frame)
        await write(self, frame)

    monkeypatch.setattr(SSEWriter, "_write", counted)
    for pieces in (3, 30):
        served = await serve(fast_model(reply(*(f"w{n} " for n in range(pieces)))))
        writes.clear()
        text = await _stream(served, name)
        assert b"".join(writes).decode() == text
        assert len(writes) <= pieces + 2, f"{name}: {len(writes)} writes for {pieces} steps"
