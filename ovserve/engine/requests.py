"""The requests in flight on one engine, seen from the event loop: each one's queue, filled by the
engine's events, and the calls that send a request and read its answer.

Contract: :class:`EngineRequests` gives every request a fresh id (unique across engines and
restarts: the engine breaks on duplicates) and an ``asyncio.Queue``; :meth:`EngineRequests.deliver`
puts each of the engine's answers on its request's queue (the request ends with its last answer),
and :meth:`EngineRequests.fail_all` ends every request with an error. A consumer re-raises engine
failures: a request the engine failed as :class:`EngineError` (500), refused as
:class:`BadRequestError`, one cut by the engine's death or stall with the error the client gives
(a retryable 503). A consumer that stops early (disconnect, timeout, a stop string found by the
server) cancels its request: the engine frees it and confirms with :class:`RequestEnded`.

The engine client (``ovserve.engine.client``) owns the process and the pipe: it sends what
:meth:`EngineRequests._send` is given, and routes the engine's events here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
from collections.abc import AsyncGenerator, Callable
from typing import TypeVar

import numpy as np

from ovserve.engine.messages import (
    CancelRequest,
    Command,
    EmbedRequest,
    EmbedResult,
    EngineErrorKind,
    EngineStats,
    Event,
    ImageProgress,
    ImageRequest,
    ImageResult,
    RequestEnded,
    RequestEvent,
    RerankRequest,
    RerankResult,
    SequenceOutput,
    SpeechPiece,
    SpeechResult,
    StatsReply,
    StatsRequest,
    SynthesizeRequest,
    TranscribeRequest,
    TranscribeResult,
    TranscriptDelta,
)
from ovserve.errors import BadRequestError, EngineError, OvserveError, ServiceUnavailableError

# Request ids are unique across all engines and restarts: the engine breaks on duplicates.
_request_ids = itertools.count(1)

# What a request's queue carries: its outputs, its end, or the failure that ended it.
_StreamItem = RequestEvent | BaseException
Piece = TypeVar("Piece", TranscriptDelta, SpeechPiece, ImageProgress)
Last = TypeVar("Last", TranscribeResult, SpeechResult, ImageResult)


class EngineRequests:
    """The requests in flight on one engine (see the module doc); a subclass sends the commands."""

    def __init__(self) -> None:
        self._outbox: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
        self._streams: dict[int, asyncio.Queue[_StreamItem]] = {}
        self._stats_waiters: dict[int, asyncio.Future[EngineStats]] = {}

    def _send(self, command: Command) -> None:
        """Send ``command`` to the engine, or raise the 503 of an engine that cannot take it."""
        raise NotImplementedError

    @property
    def _connected(self) -> bool:
        """A pipe to an engine process is open (a cancel can reach it)."""
        raise NotImplementedError

    @property
    def inflight(self) -> int:
        return len(self._streams)

    def deliver(self, event: Event) -> bool:
        """Put one of the engine's answers on its request's queue; False for an event of another kind."""
        match event:
            case (
                SequenceOutput(request_id=request_id)
                | TranscriptDelta(request_id=request_id)
                | SpeechPiece(request_id=request_id)
                | ImageProgress(request_id=request_id)
            ):
                stream = self._streams.get(request_id)
                if stream is not None:
                    stream.put_nowait(event)
            case (
                RequestEnded(request_id=request_id)
                | EmbedResult(request_id=request_id)
                | RerankResult(request_id=request_id)
                | TranscribeResult(request_id=request_id)
                | SpeechResult(request_id=request_id)
                | ImageResult(request_id=request_id)
            ):
                stream = self._streams.pop(request_id, None)
                if stream is not None:
                    stream.put_nowait(event)
            case StatsReply(token, stats):
                waiter = self._stats_waiters.pop(token, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(stats)
            case _:
                return False
        return True

    def fail_all(self, error: BaseException) -> None:
        """End every request in flight, and every wait for stats, with ``error``."""
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.put_nowait(error)
        waiters, self._stats_waiters = self._stats_waiters, {}
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_exception(error)

    def _open(self, command: Callable[[int], Command]) -> tuple[int, asyncio.Queue[_StreamItem]]:
        """Send ``command`` for a new request id; the queue its events arrive on."""
        request_id = next(_request_ids)
        stream: asyncio.Queue[_StreamItem] = asyncio.Queue()
        self._send(command(request_id))
        self._streams[request_id] = stream
        return request_id, stream

    def _cancel(self, request_id: int) -> None:
        """The caller stopped waiting: cancel the engine request, keeping it registered (its events
        dropped) until the engine confirms with RequestEnded."""
        if request_id in self._streams and self._connected:
            self._streams[request_id] = asyncio.Queue()
            self._outbox.put(CancelRequest(request_id))

    async def embed(self, texts: list[str]) -> np.ndarray:
        """The embeddings of ``texts`` (float32 [len(texts), dim]), computed in the engine process."""
        event = await self._call(lambda request_id: EmbedRequest(request_id, texts))
        assert isinstance(event, EmbedResult)
        return event.vectors

    async def rerank(self, query: str, documents: list[str]) -> list[float]:
        """Each document's relevance to ``query``, in document order."""
        event = await self._call(lambda request_id: RerankRequest(request_id, query, documents))
        assert isinstance(event, RerankResult)
        return event.scores

    async def transcribe(
        self, request: Callable[[int], TranscribeRequest]
    ) -> AsyncGenerator[str | TranscribeResult, None]:
        """The text of a transcription as the engine writes it, then its :class:`TranscribeResult`.
        A consumer that stops early (disconnect, timeout) cancels the request: the engine's
        streamer stops the pipeline at its next token."""
        async with contextlib.aclosing(self._pieces(request, TranscriptDelta, TranscribeResult)) as events:
            async for event in events:
                yield event.text if isinstance(event, TranscriptDelta) else event

    async def synthesize(self, text: str, voice: str | None, speed: float) -> SpeechResult:
        """Speech for the whole ``text``, made in the engine process (its pieces joined)."""
        pieces = [piece async for piece in self.synthesize_pieces(text, voice, speed)]
        samples = pieces[0].samples if len(pieces) == 1 else np.concatenate([piece.samples for piece in pieces])
        return SpeechResult(pieces[-1].request_id, samples, pieces[-1].sample_rate)

    def synthesize_pieces(
        self, text: str, voice: str | None, speed: float
    ) -> AsyncGenerator[SpeechPiece | SpeechResult, None]:
        """Speech for ``text`` piece by piece as the engine makes them (``SynthesizeRequest``), the
        :class:`SpeechResult` last. A consumer that stops early (disconnect, timeout) cancels the
        request: the engine drops it before its next piece."""
        command = lambda request_id: SynthesizeRequest(request_id, text, voice, speed)  # noqa: E731
        return self._pieces(command, SpeechPiece, SpeechResult)

    def generate_images(
        self, request: Callable[[int], ImageRequest]
    ) -> AsyncGenerator[ImageProgress | ImageResult, None]:
        """An image request's progress (its start, its partial images) as the engine reports it, then
        its :class:`ImageResult`.
        A consumer that stops early (disconnect, timeout) cancels the request: the engine stops the
        denoising loop at its next step."""
        return self._pieces(request, ImageProgress, ImageResult)

    async def _pieces(
        self, command: Callable[[int], Command], piece: type[Piece], last: type[Last]
    ) -> AsyncGenerator[Piece | Last, None]:
        """A request answered piece by piece, then by its ``last`` event; leaving early cancels it."""
        request_id, stream = self._open(command)
        finished = False
        try:
            while True:
                event = await stream.get()
                if isinstance(event, piece):
                    yield event
                    continue
                finished = True
                if isinstance(event, last):
                    yield event
                    return
                match event:
                    case RequestEnded(error=error, message=message):
                        raise request_error(error, message or "the request was cancelled")
                    case BaseException():
                        raise event
                raise EngineError(f"unexpected engine answer {type(event).__name__}")
        finally:
            if not finished:
                self._cancel(request_id)

    async def _call(self, command: Callable[[int], Command]) -> EmbedResult | RerankResult | SpeechResult:
        """One request answered by one result event. A caller that stops waiting (disconnect,
        timeout) cancels it: the engine drops it before its next pipeline call."""
        request_id, stream = self._open(command)
        finished = False
        try:
            event = await stream.get()
            finished = True
        finally:
            if not finished:
                self._cancel(request_id)
        match event:
            case EmbedResult() | RerankResult() | SpeechResult():
                return event
            case RequestEnded(error=error, message=message):
                raise request_error(error, message or "the request was cancelled")
            case BaseException():
                raise event
        raise EngineError(f"unexpected engine answer {type(event).__name__}")

    def abort_all(self, error: OvserveError) -> None:
        """End every request in flight with ``error`` (shutdown after the drain timeout) and free
        them in the engine."""
        request_ids = list(self._streams)
        self.fail_all(error)
        if self._connected:
            for request_id in request_ids:
                self._outbox.put(CancelRequest(request_id))

    async def stats(self, timeout: float = 5.0) -> EngineStats:
        """The engine's own counters (active requests as the pipeline sees them)."""
        token = next(_request_ids)
        waiter: asyncio.Future[EngineStats] = asyncio.get_running_loop().create_future()
        self._stats_waiters[token] = waiter
        self._send(StatsRequest(token))
        try:
            return await asyncio.wait_for(waiter, timeout)
        finally:
            self._stats_waiters.pop(token, None)


def request_error(error: EngineErrorKind | None, message: str | None) -> Exception:
    """What the consumer of a request the engine ended with ``error`` raises."""
    match error:
        case EngineErrorKind.REFUSED:
            return BadRequestError(message or "the engine refused the request")
        case EngineErrorKind.IGNORED:
            return ServiceUnavailableError(message or "", code="engine_overloaded")
        case _:
            return EngineError(message or "the engine failed")
