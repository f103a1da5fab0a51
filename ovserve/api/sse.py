"""Server-sent events as OpenAI streams them, and the keep-alive of a stream that goes quiet.

Chat and text completions: one ``data:`` line per JSON chunk, then ``data: [DONE]``. The Responses
and Messages APIs (:class:`NamedEventWriter`): an ``event:`` line naming each event's ``type``
before its ``data:`` line, and no ``[DONE]`` (the last event, ``response.completed`` or
``message_stop``, says it).

A :class:`~ovserve.dialects.body.Burst` (events a stream has at one moment) is written in one
write: its events' frames, each as if it came alone, one after the other.

Keep-alive: a writer whose class sets :attr:`SSEWriter.keepalive` writes that frame whenever
nothing was written for :attr:`SSEWriter.keepalive_interval` seconds (a long prompt's prefill, a
slow step), so proxies and clients with idle timeouts keep the connection. One event-loop timer
per stream drives it: a written event only notes the time, it never starts a task or a timer of
its own. The named-event streams ping with an SSE comment (``: ping``), which every SSE client skips
by the specification (the ``openai`` and ``anthropic`` SDKs included); chat, completions and
Ollama's NDJSON (which has no comments) keep no keep-alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, ClassVar

from aiohttp import web

from ovserve.dialects.body import Body, Burst, EncodedBody

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    # Proxies (nginx) must not buffer the stream.
    "X-Accel-Buffering": "no",
}


def dumps(payload: Any) -> str:
    """A JSON body: a response model's own encoding, or compact JSON of plain data."""
    if isinstance(payload, Body | EncodedBody):
        return payload.encode()
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


class SSEWriter:
    # The frame written after keepalive_interval seconds without a write; None: no keep-alive.
    keepalive: ClassVar[bytes | None] = None
    keepalive_interval: ClassVar[float] = 10.0

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        self._loop: asyncio.AbstractEventLoop | None = None  # set by open() when there is a keep-alive
        self._written = 0.0  # when the last frame was written (event-loop time)
        self._timer: asyncio.TimerHandle | None = None
        self._pinging: asyncio.Task[None] | None = None

    async def open(self) -> None:
        await self.response.prepare(self._request)
        if self.keepalive is not None:
            self._loop = asyncio.get_running_loop()
            self._written = self._loop.time()
            self._arm(self.keepalive_interval)

    async def send(self, payload: Any) -> None:
        if isinstance(payload, Burst):
            await self._write("".join(self.frame(event) for event in payload.events).encode())
        else:
            await self._write(self.frame(payload).encode())

    def frame(self, payload: Any) -> str:
        """One event as the stream writes it."""
        return f"data: {dumps(payload)}\n\n"

    async def done(self) -> None:
        await self._write(b"data: [DONE]\n\n")
        await self._end()

    async def _write(self, frame: bytes) -> None:
        if self._loop is not None:
            self._written = self._loop.time()
        await self.response.write(frame)

    async def _end(self) -> None:
        self._disarm()
        await self.response.write_eof()

    # -- keep-alive ---------------------------------------------------------------------------

    def _arm(self, delay: float) -> None:
        assert self._loop is not None
        self._timer = self._loop.call_later(delay, self._tick)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        """The timer: a keep-alive frame if nothing was written for a whole interval, and the next
        tick an interval after the last write. A stream that ended without :meth:`done` (its
        client went away) stops here."""
        assert self._loop is not None
        self._timer = None
        transport = self._request.transport
        if transport is None or transport.is_closing():
            return
        quiet = self._loop.time() - self._written
        if quiet >= self.keepalive_interval:
            if self._pinging is None or self._pinging.done():
                self._pinging = self._loop.create_task(self._ping())
            quiet = 0.0
        self._arm(self.keepalive_interval - quiet)

    async def _ping(self) -> None:
        assert self.keepalive is not None
        # The stream may end (write_eof) or its client go away while this waits for its turn:
        # the ping is then simply not sent.
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._write(self.keepalive)


class NamedEventWriter(SSEWriter):
    keepalive = b": ping\n\n"

    def frame(self, payload: Any) -> str:
        kind = payload.type  # every named event is a response model (or its encoding) with its "type"
        return f"event: {kind}\ndata: {dumps(payload)}\n\n"

    async def done(self) -> None:
        await self._end()
