"""Server-sent events as OpenAI streams them.

Chat and text completions: one ``data:`` line per JSON chunk, then ``data: [DONE]``. The Responses
API (:class:`NamedEventWriter`): an ``event:`` line naming each event's ``type`` before its
``data:`` line, and no ``[DONE]`` (its last event, ``response.completed`` or the like, says it).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ovserve.dialects.body import Body, EncodedBody

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
    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response = web.StreamResponse(status=200, headers=SSE_HEADERS)

    async def open(self) -> None:
        await self.response.prepare(self._request)

    async def send(self, payload: Any) -> None:
        await self.response.write(f"data: {dumps(payload)}\n\n".encode())

    async def done(self) -> None:
        await self.response.write(b"data: [DONE]\n\n")
        await self.response.write_eof()


class NamedEventWriter(SSEWriter):
    async def send(self, payload: Any) -> None:
        kind = payload.type  # every named event is a response model with its "type"
        await self.response.write(f"event: {kind}\ndata: {dumps(payload)}\n\n".encode())

    async def done(self) -> None:
        await self.response.write_eof()
