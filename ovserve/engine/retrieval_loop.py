"""The one-request-at-a-time engine loop: an embeddings or rerank model (``ovserve.engine.retrieval``),
a speech model (``ovserve.engine.speech``): speech to text, or text to speech piece by piece, or an
image-generation model (``ovserve.engine.images``), its partial images sent as the denoising goes."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from ovserve.engine.channel import PipeChannel
from ovserve.engine.images import ImageCancelled, ImageGenerator, ImageTaskError
from ovserve.engine.loop import FAILED, HEARTBEAT_INTERVAL_S, Admitted, LoopBase, serial_stats
from ovserve.engine.messages import (
    AddRequest,
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
    RerankRequest,
    RerankResult,
    Shutdown,
    SpeechPiece,
    SpeechResult,
    StatsReply,
    StatsRequest,
    SynthesizeRequest,
    TranscribeRequest,
    TranscribeResult,
    TranscriptDelta,
)
from ovserve.engine.retrieval import Embedder, Reranker
from ovserve.engine.spec import EngineSpec
from ovserve.engine.speech import (
    SpeechToText,
    TextToSpeech,
    UnknownLanguageError,
    UnknownVoiceError,
    WordTimestampsError,
)

log = logging.getLogger("ovserve.engine")


class RetrievalEngineLoop(LoopBase):
    """An embeddings or rerank model (``ovserve.engine.retrieval``): one request at a time, in
    arrival order, each split into calls of at most ``embeddings_batch_size`` inputs.

    A model call blocks this thread (releasing the GIL), so, as in the stateful loop, the
    reader thread answers stats itself and records cancellations, which take effect between calls.
    A heartbeat goes out every second while idle, and after any call that ends more than a second
    after the last one, so neither silence while idle nor a long request is mistaken for a stall.
    """

    def __init__(
        self,
        pipe: Embedder | Reranker | SpeechToText | TextToSpeech | ImageGenerator,
        conn: PipeChannel,
        spec: EngineSpec,
    ) -> None:
        super().__init__(pipe, conn)
        self._model = pipe
        self._batch_size = spec.retrieval.embeddings_batch_size
        self._outstanding: set[int] = set()  # received and not yet answered (kept by the reader)
        # Cancelled requests, each with the denoising steps its image request had run when the
        # cancel came (0 for other kinds): the log says how soon after it the pipeline stopped.
        self._cancelled: dict[int, int] = {}
        self._steps_done = 0
        self._busy = False

    def _stats(self) -> EngineStats:
        return serial_stats(len(self._outstanding), busy=self._busy)

    def _on_command_received(self, command: Command) -> bool:
        match command:
            case (
                EmbedRequest(request_id)
                | RerankRequest(request_id)
                | TranscribeRequest(request_id)
                | SynthesizeRequest(request_id)
                | ImageRequest(request_id)
            ):
                self._outstanding.add(request_id)
            case CancelRequest(request_id):
                if request_id in self._outstanding:
                    self._cancelled[request_id] = self._steps_done
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
            case EmbedRequest(request_id, texts) if isinstance(self._model, Embedder):
                self._serve(request_id, texts, self._model.embed, self._embedded)
            case RerankRequest(request_id, query, documents) if not isinstance(
                self._model, (Embedder, SpeechToText, TextToSpeech, ImageGenerator)
            ):
                self._serve(request_id, documents, functools.partial(self._model.score, query), self._reranked)
            case TranscribeRequest() if isinstance(self._model, SpeechToText):
                self._transcribe(self._model, command)
            case SynthesizeRequest(request_id, text, voice, speed) if isinstance(self._model, TextToSpeech):
                self._synthesize(self._model, request_id, text, voice, speed)
            case ImageRequest() if isinstance(self._model, ImageGenerator):
                self._generate_images(self._model, command)
            case (
                AddRequest(request_id)
                | EmbedRequest(request_id)
                | RerankRequest(request_id)
                | TranscribeRequest(request_id)
                | SynthesizeRequest(request_id)
                | ImageRequest(request_id)
            ):
                # The server routes each task to its own models; never hang on another task's request.
                self._send([RequestEnded(request_id, EngineErrorKind.REFUSED, "this model serves another task")])
            case Shutdown():
                self._running = False

    @staticmethod
    def _embedded(request_id: int, parts: list[np.ndarray]) -> Event:
        return EmbedResult(request_id, np.concatenate(parts) if parts else np.zeros((0, 0), np.float32))

    @staticmethod
    def _reranked(request_id: int, parts: list[list[float]]) -> Event:
        return RerankResult(request_id, [score for part in parts for score in part])

    def _serve(self, request_id: int, items: list[str], call: Any, result: Any) -> None:
        with self._serving(request_id):
            parts: list[Any] = []
            for start in range(0, len(items), self._batch_size):
                if self._ended_if_cancelled(request_id):
                    return
                parts.append(call(items[start : start + self._batch_size]))
                self._beat()
            self._send([result(request_id, parts)])

    def _transcribe(self, model: SpeechToText, request: TranscribeRequest) -> None:
        """One pipeline call; the streamer sends each piece of text and stops a cancelled request."""
        request_id = request.request_id

        def on_delta(text: str) -> bool:
            if text:
                self._send([TranscriptDelta(request_id, text)])
            self._beat()
            return request_id in self._cancelled

        with self._serving(request_id):
            if self._ended_if_cancelled(request_id):
                return
            transcript = model.transcribe(request, on_delta)
            if not self._ended_if_cancelled(request_id):
                result = TranscribeResult(
                    request_id, transcript.text, transcript.segments, transcript.words, transcript.language
                )
                self._send([result])

    def _synthesize(self, model: TextToSpeech, request_id: int, text: str, voice: str | None, speed: float) -> None:
        """The text in pieces that fit the model, one pipeline call each, each sent as it is made (the
        pipeline takes no streamer: a cancel takes effect between pieces)."""
        with self._serving(request_id):
            pieces = model.split(text)
            for index, piece in enumerate(pieces):
                if self._ended_if_cancelled(request_id):
                    return
                samples, rate = model.speak_piece(piece, voice, speed, first=index == 0)
                last = index == len(pieces) - 1
                self._send(
                    [SpeechResult(request_id, samples, rate) if last else SpeechPiece(request_id, samples, rate)]
                )
                self._beat()
            if not pieces:  # the server refuses blank input; never leave a request unanswered
                self._send([SpeechResult(request_id, np.zeros(0, np.float32), 16_000)])

    def _generate_images(self, model: ImageGenerator, request: ImageRequest) -> None:
        """One pipeline call; after each denoising step a partial image is sent when one is due, and a
        cancelled request stops there."""
        request_id, wanted = request.request_id, request.params.partial_images
        sent = 0

        def on_step(done: int, steps: int, decode: Any) -> bool:
            nonlocal sent
            self._steps_done = done
            self._beat()
            if request_id in self._cancelled:
                return True
            if sent < wanted and done < steps and done >= partial_image_step(sent, wanted, steps):
                self._send([ImageProgress(request_id, done, decode(), sent)])
                sent += 1
            elif done == 1:  # the request has started: it leaves its model's queue
                self._send([ImageProgress(request_id, done)])
            return request_id in self._cancelled

        self._steps_done = 0
        with self._serving(request_id):
            if self._ended_if_cancelled(request_id):
                return
            try:
                images, steps = model.generate(request, on_step)
            except ImageCancelled as cancelled:
                came = self._cancelled.get(request_id, 0)
                log.info("image request %d %s (the cancel came after step %d)", request_id, cancelled, came)
                self._send([RequestEnded(request_id)])
                return
            self._send([ImageResult(request_id, images, steps)])

    @contextlib.contextmanager
    def _serving(self, request_id: int) -> Iterator[None]:
        """One request's work: a refusal or a pipeline failure in it is its answer; after it the
        request is forgotten and, when it was the last one, a heartbeat says the engine is idle."""
        self._busy = True
        try:
            yield
        except Exception as exc:
            refusal = _refusal(exc)
            if refusal is not None:
                self._send([RequestEnded(request_id, EngineErrorKind.REFUSED, refusal)])
            else:
                log.warning("request %d failed in the pipeline: %s", request_id, exc)
                self._send([RequestEnded(request_id, EngineErrorKind.ENGINE, FAILED)])
        finally:
            self._busy = False
            self._outstanding.discard(request_id)
            self._cancelled.pop(request_id, None)
            if not self._outstanding:
                self._beat(force=True)

    def _ended_if_cancelled(self, request_id: int) -> bool:
        """Whether the request was cancelled, then ended (the engine confirms the cancel)."""
        if request_id in self._cancelled:
            self._send([RequestEnded(request_id)])
            return True
        return False


def partial_image_step(index: int, wanted: int, steps: int) -> int:
    """The denoising step (1-based) after which partial image ``index`` of ``wanted`` is decoded:
    evenly spaced before the last step (a request of fewer steps than partial images gets fewer)."""
    return -(-(index + 1) * steps // (wanted + 1))


def _refusal(exc: Exception) -> str | None:
    """What the client is told when the request asked for what the model has not; None: a failure."""
    match exc:
        case ImageTaskError():
            return str(exc)
        case UnknownLanguageError():
            return f"the model has no language '{exc}'"
        case UnknownVoiceError():
            return f"the model has no voice '{exc}'"
        case WordTimestampsError():
            return "the model was not loaded for word timestamps"
    return None
