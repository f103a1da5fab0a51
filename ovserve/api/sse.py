"""Server-sent events as OpenAI streams them: one ``data:`` line per JSON chunk, then [DONE]."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    # Proxies (nginx) must not buffer the stream.
    "X-Accel-Buffering": "no",
}


def dumps(payload: Any) -> str:
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
