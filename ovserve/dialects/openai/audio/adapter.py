"""Transcriptions and translations: form -> checks -> bounded decode -> engine -> text.

Contract:

- :meth:`AudioService.check` finds the model (a 400 unless it serves speech_to_text; a 503 when it
  can be neither served nor loaded now), checks the language against the model's own
  (``lang_to_id`` of its generation_config.json) and word timestamps against its engine (loaded
  with ``enable_word_timestamps`` or not): before any work.
- :meth:`AudioService.decode` decodes the upload (``ovserve.core.audio``) on a worker thread, at
  most :data:`DECODE_SLOTS` at a time so that concurrent uploads cannot multiply the decoder's
  memory; every problem with the audio is a 400 naming it. The route decodes inside the model's
  admission (``ovserve.core.engine_work``): at most ``--max_queued_requests`` requests of a model
  hold their decoded samples (up to ``--max_audio_seconds`` x 64 kB) while they wait for the
  one-at-a-time engine, a 429 beyond.
- :meth:`AudioService.run` yields the transcript's text as the engine writes it, then the
  finished :class:`~ovserve.engine.messages.TranscribeResult`. Stopping early cancels the
  request in the engine.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from ovserve.core.audio import DecodedAudio, decode_audio
from ovserve.core.engine_work import ModelWork
from ovserve.dialects.endpoint import Answer, RawBody
from ovserve.dialects.openai.audio.request import AudioRequest
from ovserve.dialects.openai.audio.response import TranscriptError, delta_event, done_event, render
from ovserve.engine.messages import TranscribeRequest, TranscribeResult
from ovserve.engine.speech import model_languages
from ovserve.errors import BadRequestError, OvserveError, UnsupportedParameterError
from ovserve.models.served import ModelRegistry, ServedModel

TASK = "speech_to_text"
# Decodes running at once (each holds at most --max_audio_seconds of 16 kHz float32 plus FFmpeg's state).
DECODE_SLOTS = 2
# Whisper's decoder positions when config.json does not say.
_DEFAULT_TARGET_POSITIONS = 448


@dataclass(kw_only=True)
class AudioJob(ModelWork):
    """A transcription or translation: its upload is decoded inside the model's admission
    (:meth:`before_engine`), so only admitted requests hold decoded samples."""

    request: AudioRequest
    service: AudioService
    max_new_tokens: int
    audio: DecodedAudio | None = field(default=None, init=False)

    async def before_engine(self) -> None:
        self.audio = await self.service.decode(self.request)

    @property
    def seconds(self) -> float:
        assert self.audio is not None, "decoded before the engine is held"
        return self.audio.seconds


def max_new_tokens(model_dir: Path) -> int:
    """Half of Whisper's decoder positions per 30 s window (the rest is room for the prompt), as
    transformers' Whisper generation does by default."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        positions = int(config.get("max_target_positions") or _DEFAULT_TARGET_POSITIONS)
    except (OSError, ValueError, TypeError):
        positions = _DEFAULT_TARGET_POSITIONS
    return max(1, positions // 2)


class AudioService:
    def __init__(self, models: ModelRegistry, max_audio_seconds: float) -> None:
        self.models = models
        self.max_audio_seconds = max_audio_seconds
        self._decodes = asyncio.Semaphore(DECODE_SLOTS)
        self._languages: dict[str, frozenset[str]] = {}

    def _model(self, name: str) -> ServedModel:
        model = self.models.get(name)
        model.require_task(TASK)
        return model

    def check(self, request: AudioRequest) -> ServedModel:
        """The request's model, once everything that can be refused before work was checked."""
        model = self._model(request.model)
        if request.words and not model.spec.word_timestamps:
            raise UnsupportedParameterError(
                f"model '{model.name}' was not loaded with word timestamps; serve it with "
                "--enable_word_timestamps (a graph: enable_word_timestamps: true), or ask for 'segment'",
                param="timestamp_granularities[]",
            )
        if request.language is not None:
            languages = self._languages.get(model.name)
            if languages is None:
                languages = self._languages[model.name] = model_languages(model.spec.model_path)
            if languages and request.language not in languages:
                raise BadRequestError(
                    f"model '{model.name}' has no language '{request.language}' (it knows: "
                    f"{', '.join(sorted(languages))})",
                    param="language",
                )
        model.check_available()  # a model unloaded on purpose passes: the request's lease loads it
        return model

    async def decode(self, request: AudioRequest) -> DecodedAudio:
        """The upload's samples, decoded on a worker thread (at most DECODE_SLOTS at once)."""
        async with self._decodes:
            return await asyncio.to_thread(decode_audio, request.file, self.max_audio_seconds)

    async def run(self, job: AudioJob) -> AsyncGenerator[str | TranscribeResult, None]:
        """The transcript's text as the engine writes it, then its result; the audio metrics
        recorded once it is done."""
        request = job.request
        samples = job.audio.samples if job.audio is not None else None
        assert samples is not None

        def command(request_id: int) -> TranscribeRequest:
            return TranscribeRequest(
                request_id,
                samples,
                request.task,
                request.language,
                request.prompt,
                request.temperature,
                request.timestamps,
                request.words,
                job.max_new_tokens,
            )

        async for item in job.model.engine.transcribe(command):
            job.started()
            if isinstance(item, TranscribeResult) and job.recorder is not None:
                job.recorder.audio(request.task, job.seconds, job.engine_seconds())
            yield item


@dataclass(frozen=True, slots=True)
class AudioCall:
    job: AudioJob
    streaming: bool


class TranscriptionEndpoint:
    """``/audio/transcriptions`` and ``/audio/translations`` for the request envelope: the whole
    transcript in the asked format, or (``stream``) its deltas as server-sent events."""

    def __init__(self, service: AudioService) -> None:
        self.service = service

    async def prepare(self, request: AudioRequest, caller: str) -> AudioCall:
        model = self.service.check(request)
        job = AudioJob(
            model=model, request=request, service=self.service, max_new_tokens=max_new_tokens(model.spec.model_path)
        )
        return AudioCall(job, request.stream)

    async def complete(self, call: AudioCall) -> RawBody:
        result = None
        async for item in self.service.run(call.job):
            if isinstance(item, TranscribeResult):
                result = item
        assert result is not None, "the engine ends a transcription with its result"
        body, content_type = render(call.job.request, result, call.job.seconds)
        return RawBody(body.encode(), f"{content_type}; charset=utf-8")

    async def stream(self, call: AudioCall) -> AsyncIterator[Answer]:
        async for item in self.service.run(call.job):
            if isinstance(item, TranscribeResult):
                yield done_event(item.text, call.job.seconds)
            else:
                yield delta_event(item)

    def failure_event(self, call: AudioCall, error: OvserveError) -> Answer:
        return TranscriptError.of(error)
