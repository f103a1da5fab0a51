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
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

from ovserve.core.audio import DecodedAudio, decode_audio
from ovserve.dialects.openai.audio.request import AudioRequest
from ovserve.engine.messages import TranscribeRequest, TranscribeResult
from ovserve.engine.speech import model_languages
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.models.served import ModelRegistry, ServedModel

TASK = "speech_to_text"
# Decodes running at once (each holds at most --max_audio_seconds of 16 kHz float32 plus FFmpeg's state).
DECODE_SLOTS = 2
# Whisper's decoder positions when config.json does not say.
_DEFAULT_TARGET_POSITIONS = 448


@dataclass(frozen=True)
class AudioJob:
    request: AudioRequest
    model: ServedModel
    audio: DecodedAudio
    max_new_tokens: int


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

    async def decode(self, request: AudioRequest, model: ServedModel) -> AudioJob:
        async with self._decodes:
            audio = await asyncio.to_thread(decode_audio, request.file, self.max_audio_seconds)
        return AudioJob(request, model, audio, max_new_tokens(model.spec.model_path))

    async def run(self, job: AudioJob) -> AsyncGenerator[str | TranscribeResult, None]:
        request = job.request

        def command(request_id: int) -> TranscribeRequest:
            return TranscribeRequest(
                request_id,
                job.audio.samples,
                request.task,
                request.language,
                request.prompt,
                request.temperature,
                request.timestamps,
                request.words,
                job.max_new_tokens,
            )

        async for item in job.model.engine.transcribe(command):
            yield item
