"""Connection timeouts: a client that is too slow to send its request is dropped.

aiohttp's server closes idle keep-alive connections but has no limit on how long a request head
may take to arrive, so sockets that send a header line every few seconds (slowloris) are held
for ever and can exhaust the server's file descriptors. This module adds that limit; together
with ``read_json_object`` (``--body_timeout``) and aiohttp's own keep-alive timer it bounds every
phase of reading a request:

* idle (connection open or previous response written, no byte of the next request yet):
  ``--keep_alive_timeout``, aiohttp's timer; the connection is closed silently.
* request head (from its first byte until the blank line after the headers):
  ``--header_timeout``, :class:`TimedRequestHandler`; the client gets a 408, then the
  connection is closed.
* request body: ``--body_timeout``, enforced where the body is read (``ovserve.api.routes``).
* the response, streamed or not, is not limited here: generation may take minutes.

Only public aiohttp API is used: :class:`TimedServer` is a ``web.Server`` (the protocol factory a
``web.ServerRunner`` serves) built from the application's own handler and request factory, and it
marks head/response boundaries by wrapping those two callables.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from ovserve.api.sse import dumps
from ovserve.errors import RequestTimeoutError

log = logging.getLogger(__name__)


class _Phase(enum.Enum):
    IDLE = "idle"  # waiting for the first byte of a request (aiohttp's keep-alive timer runs)
    HEAD = "head"  # some bytes of a request head arrived; the header timer runs
    REQUEST = "request"  # the head is complete: body and response are not timed here


def _timeout_response(message: str) -> bytes:
    body = dumps(RequestTimeoutError(message).body()).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class TimedRequestHandler(RequestHandler):
    """aiohttp's connection protocol plus a deadline for each request head."""

    def __init__(self, manager: TimedServer, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._phase = _Phase.IDLE
        self._header_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if data and self._phase is _Phase.IDLE:
            self._phase = _Phase.HEAD
            # Bytes of a request arrived: the connection is no longer idle, so aiohttp's
            # keep-alive timer stops (keep_alive(True) cancels it) and the head's own
            # deadline starts. aiohttp re-arms keep-alive after the response.
            self.keep_alive(True)
            loop = asyncio.get_running_loop()
            self._header_timer = loop.call_later(self._header_timeout, self._head_too_slow)
        super().data_received(data)

    def head_received(self) -> None:
        """The request head is parsed; the request is being handled."""
        self._phase = _Phase.REQUEST
        self._cancel_header_timer()

    def response_done(self) -> None:
        """The handler returned; bytes that follow belong to the next request."""
        if self._phase is _Phase.REQUEST:
            self._phase = _Phase.IDLE

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _head_too_slow(self) -> None:
        self._header_timer = None
        if self._phase is not _Phase.HEAD or self.transport is None:
            return
        log.info("closing a connection whose request head took longer than %g s", self._header_timeout)
        # No request is in flight (the head never completed), so nothing else writes here.
        self.transport.write(_timeout_response(f"the request head was not received within {self._header_timeout:g} s"))
        self.force_close()


class TimedServer(web.Server):
    """The application's ``web.Server``, serving connections with :class:`TimedRequestHandler`."""

    def __init__(self, app_server: web.Server, *, header_timeout: float, **handler_kwargs: Any) -> None:
        app_handler = app_server.request_handler
        app_factory = app_server.request_factory

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            try:
                return await app_handler(request)
            finally:
                if isinstance(request.protocol, TimedRequestHandler):
                    request.protocol.response_done()

        def make_request(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> web.BaseRequest:
            # aiohttp builds a request only once its head is complete.
            if isinstance(protocol, TimedRequestHandler):
                protocol.head_received()
            return app_factory(message, payload, protocol, writer, task)

        super().__init__(handle, request_factory=make_request, handler_cancellation=app_server.handler_cancellation)
        self._header_timeout = header_timeout
        self._handler_kwargs = handler_kwargs

    def __call__(self) -> TimedRequestHandler:
        return TimedRequestHandler(
            self, header_timeout=self._header_timeout, loop=asyncio.get_running_loop(), **self._handler_kwargs
        )
