"""The stateful engine loop: ``LLMPipeline`` (the path OVMS uses on NPU), one generation at a time."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ovserve.engine.channel import PipeChannel
from ovserve.engine.detokenizer import IncrementalDetokenizer, decode_now
from ovserve.engine.loop import FAILED, HEARTBEAT_INTERVAL_S, Admitted, LoopBase, detokenizer, serial_stats
from ovserve.engine.messages import (
    AddRequest,
    CancelRequest,
    Command,
    EngineErrorKind,
    EngineStats,
    RequestEnded,
    SequenceOutput,
    Shutdown,
    StatsReply,
    StatsRequest,
    VisionPrompt,
)
from ovserve.engine.pipelines import build_generation_config

log = logging.getLogger("ovserve.engine")


class StatefulEngineLoop(LoopBase):
    """``LLMPipeline`` (the stateful path OVMS uses on NPU): one generation at a time, in order.

    ``generate()`` blocks this thread, so the reader thread records cancellations in a set the
    streamer checks after every token; queued requests wait in ``_pending``.
    """

    def __init__(self, pipe: Any, conn: PipeChannel, vocab_size: int | None = None) -> None:
        super().__init__(pipe, conn)
        self._detokenizer = detokenizer(self._tokenizer, vocab_size)
        self._cancelled: set[int] = set()
        self._outstanding: set[int] = set()  # added and not yet ended (kept by the reader thread)
        self._pending: list[AddRequest] = []
        self._current: int | None = None

    def _on_command_received(self, command: Command) -> bool:
        # generate() holds the loop thread for a whole generation: the reader thread keeps the
        # books (cancels reach the streamer through _cancelled) and answers stats itself.
        match command:
            case AddRequest(request_id):
                self._outstanding.add(request_id)
            case CancelRequest(request_id):
                self._cancelled.add(request_id)
                self._outstanding.discard(request_id)
            case StatsRequest(token):
                self._send([StatsReply(token, self._stats())])
                return False
        return True

    def _stats(self) -> EngineStats:
        return serial_stats(len(self._outstanding), busy=self._current is not None)

    def run(self) -> None:
        import openvino as ov

        self._ov = ov
        while self._running:
            # Drain every queued command before the next generation (a cancel of a queued request
            # must drop it before it starts); wait for one only when nothing is pending, and no
            # longer than a heartbeat (a generation's tokens are its signs of life).
            for command in self._queued(None if self._pending else HEARTBEAT_INTERVAL_S):
                self._handle(command)
            self._beat()
            if self._pending and self._running:
                self._generate(self._pending.pop(0))

    def _handle(self, command: Command | Admitted) -> None:  # Admitted: continuous batching only
        match command:
            case AddRequest():
                self._pending.append(command)
            case CancelRequest(request_id):
                before = len(self._pending)
                self._pending = [add for add in self._pending if add.request_id != request_id]
                if len(self._pending) != before:
                    self._cancelled.discard(request_id)
                    self._send([RequestEnded(request_id)])
            case Shutdown():
                self._running = False

    def _generate(self, add: AddRequest) -> None:
        import openvino_genai as ov_genai

        request_id, params = add.request_id, add.params
        assert not isinstance(add.prompt, VisionPrompt), "a VLM is never served by the stateful pipeline"
        decoder = IncrementalDetokenizer(params.skip_special_tokens)
        detokenizer = self._detokenizer
        generated = 0
        outer = self

        class _Streamer(ov_genai.StreamerBase):
            def write(self, token: Any) -> Any:
                nonlocal generated
                ids = [token] if isinstance(token, int) else list(token)
                generated += len(ids)
                if ids:
                    text = decode_now(detokenizer, decoder, ids)
                    outer._send([SequenceOutput(request_id, 0, text, len(ids), None, None)])
                if request_id in outer._cancelled:
                    return ov_genai.StreamingStatus.CANCEL
                return ov_genai.StreamingStatus.RUNNING

            def end(self) -> None:
                pass

        self._current = request_id
        try:
            cfg = build_generation_config(self._pipe, params)
            input_ids = self._ov.Tensor(np.array([add.prompt], dtype=np.int64))
            self._pipe.generate(input_ids, cfg, _Streamer())
        except Exception as exc:
            log.warning("stateful generation of request %d failed: %s", request_id, exc)
            self._send([RequestEnded(request_id, EngineErrorKind.ENGINE, FAILED)])
            return
        finally:
            self._current = None
            self._outstanding.discard(request_id)
        if request_id in self._cancelled:
            self._cancelled.discard(request_id)
            self._send([RequestEnded(request_id)])
            return
        finish = "length" if generated >= params.max_new_tokens else "stop"
        rest = decode_now(detokenizer, decoder, [], ends=True)
        self._send([SequenceOutput(request_id, 0, rest, 0, None, finish), RequestEnded(request_id)])
