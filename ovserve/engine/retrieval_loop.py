"""The retrieval engine loop: an embeddings or rerank pipeline, one request at a time."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ovserve.engine.channel import PipeChannel
from ovserve.engine.loop import FAILED, HEARTBEAT_INTERVAL_S, Admitted, LoopBase
from ovserve.engine.messages import (
    AddRequest,
    CancelRequest,
    Command,
    EmbedRequest,
    EmbedResult,
    EngineErrorKind,
    EngineStats,
    Event,
    Heartbeat,
    RequestEnded,
    RerankRequest,
    RerankResult,
    Shutdown,
    StatsReply,
    StatsRequest,
)
from ovserve.engine.spec import EngineSpec

log = logging.getLogger("ovserve.engine")


class RetrievalEngineLoop(LoopBase):
    """An embeddings or rerank pipeline: one request at a time, in arrival order, each split into
    pipeline calls of at most ``embeddings_batch_size`` inputs.

    A pipeline call blocks this thread (releasing the GIL), so, as in the stateful loop, the
    reader thread answers stats itself and records cancellations, which take effect between calls.
    A heartbeat goes out every second while idle, and after any call that ends more than a second
    after the last one, so neither silence while idle nor a long request is mistaken for a stall.
    """

    def __init__(self, pipe: Any, conn: PipeChannel, spec: EngineSpec) -> None:
        super().__init__(pipe, conn)
        self._batch_size = spec.retrieval.embeddings_batch_size
        self._outstanding: set[int] = set()  # received and not yet answered (kept by the reader)
        self._cancelled: set[int] = set()
        self._busy = False
        self._last_beat = 0.0

    def _stats(self) -> EngineStats:
        busy = int(self._busy)
        return EngineStats(
            active_requests=len(self._outstanding),
            releasing_requests=0,
            engine_requests=busy,
            scheduled_requests=busy,
            cache_usage=0.0,
        )

    def _on_command_received(self, command: Command) -> bool:
        match command:
            case EmbedRequest(request_id) | RerankRequest(request_id):
                self._outstanding.add(request_id)
            case CancelRequest(request_id):
                if request_id in self._outstanding:
                    self._cancelled.add(request_id)
                return False
            case StatsRequest(token):
                self._send([StatsReply(token, self._stats())])
                return False
        return True

    def run(self) -> None:
        while self._running:
            idle = True
            for command in self._queued(HEARTBEAT_INTERVAL_S):
                idle = False
                self._handle(command)
                if not self._running:
                    break
            if idle:
                self._beat()  # still alive

    def _handle(self, command: Command | Admitted) -> None:  # Admitted: continuous batching only
        match command:
            case EmbedRequest(request_id, texts):
                self._serve(request_id, texts, lambda batch: self._pipe.embed_documents(batch), self._embedded)
            case RerankRequest(request_id, query, documents):
                self._serve(request_id, documents, lambda batch: self._pipe.rerank(query, batch), self._reranked)
            case AddRequest(request_id):  # the server routes generation elsewhere; never hang on one
                self._send([RequestEnded(request_id, EngineErrorKind.REFUSED, "this model does not generate text")])
            case Shutdown():
                self._running = False

    @staticmethod
    def _embedded(request_id: int, parts: list[Any]) -> Event:
        vectors = [np.asarray(part, dtype=np.float32) for part in parts]
        return EmbedResult(request_id, np.concatenate(vectors) if vectors else np.zeros((0, 0), np.float32))

    def _reranked(self, request_id: int, parts: list[Any]) -> Event:
        # Each call returns (index within the call, score) pairs sorted by score: back to document order.
        scores: list[float] = []
        for part in parts:
            batch = [0.0] * len(part)
            for index, score in part:
                batch[index] = float(score)
            scores.extend(batch)
        return RerankResult(request_id, scores)

    def _serve(self, request_id: int, items: list[str], call: Any, result: Any) -> None:
        self._busy = True
        parts: list[Any] = []
        try:
            for start in range(0, len(items), self._batch_size):
                if request_id in self._cancelled:
                    self._send([RequestEnded(request_id)])
                    return
                parts.append(call(items[start : start + self._batch_size]))
                self._beat()
            self._send([result(request_id, parts)])
        except Exception as exc:
            log.warning("request %d failed in the pipeline: %s", request_id, exc)
            self._send([RequestEnded(request_id, EngineErrorKind.ENGINE, FAILED)])
        finally:
            self._busy = False
            self._outstanding.discard(request_id)
            self._cancelled.discard(request_id)
            if not self._outstanding:
                self._send([Heartbeat(self._stats())])

    def _beat(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= HEARTBEAT_INTERVAL_S:
            self._last_beat = now
            self._send([Heartbeat(self._stats())])
