"""Graceful drain: what SIGTERM (Kubernetes, systemd, Docker) starts.

Contract: :meth:`Drain.begin` turns readiness to 503 at once (``/v2/health/ready``), and from then
on every new request other than health, metrics and model listing gets a 503 with ``Retry-After``
in OpenAI's shape, so a load balancer sends it elsewhere. Requests already in flight go on;
:meth:`Drain.wait_idle` tells when the last one has finished. The CLI gives them
``--drain_timeout`` seconds, then ends what is left (streams get an error event and ``[DONE]``)
and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from ovserve.errors import ServiceUnavailableError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def begin(self) -> None:
        self.draining = True

    async def wait_idle(self, timeout: float) -> bool:
        """True when no request is in flight any more, False when ``timeout`` ran out first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
        return self.inflight == 0

    def middleware(self, *, answered_while_draining: Callable[[web.Request], bool]) -> Middleware:
        """Counts requests in flight; once draining, refuses (503) those whose route is not
        ``answered_while_draining`` (probes and scrapes must see the drain)."""

        @web.middleware
        async def drain(request: web.Request, handler: Handler) -> web.StreamResponse:
            if answered_while_draining(request):
                return await handler(request)
            if self.draining:
                raise ServiceUnavailableError(
                    "the server is shutting down; send the request again (another replica will take it)",
                    code="shutting_down",
                    retry_after=1,
                )
            self.inflight += 1
            self._idle.clear()
            try:
                return await handler(request)
            finally:
                self.inflight -= 1
                if self.inflight == 0:
                    self._idle.set()

        return drain
