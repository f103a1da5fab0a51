"""/audio/speech: OpenAI's text-to-speech request, served by a SpeechT5-style model.

Contract: :class:`SpeechRequest` validates the JSON body (``input`` 1..4096 characters, ``speed``
0.25..4.0, ``response_format`` mp3|opus|aac|flac|wav|pcm, default mp3 as OpenAI's); ``voice`` names
one of the model's voices (its speaker embeddings; OpenAI's ``{"id": ...}`` form is accepted too).
A voice the model does not have is a 400 listing the ones it has, as in OVMS; ``stream_format``
"sse" is refused (OpenAI's SSE events carry base64 audio deltas no SpeechT5 client asks for);
``pcm`` is streamed as the engine speaks each piece of a long input (:meth:`SpeechEndpoint.stream`),
the other formats are one whole file. ``instructions`` cannot steer SpeechT5 and is refused rather than ignored.
:class:`SpeechEndpoint` refuses what can be refused before work (``prepare``), then answers with
the encoded file, its sample rate named in the ``X-Sample-Rate`` header; ``pcm`` is raw 16-bit
little-endian mono at 24 kHz as OpenAI's (resampled from the model's rate: 16 kHz for SpeechT5),
the containers keep the model's rate.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ovserve.core.audio import encode_audio
from ovserve.core.engine_work import ModelWork
from ovserve.dialects.endpoint import Answer, RawBody
from ovserve.dialects.openai.common import saying
from ovserve.errors import BadRequestError, OvserveError, UnsupportedParameterError
from ovserve.models.served import ModelRegistry, ServedModel

TASK = "text_to_speech"
MAX_INPUT_CHARS = 4_096


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: Annotated[str, Field(min_length=1, max_length=MAX_INPUT_CHARS), saying("contain text to speak")]
    voice: str | None = None
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float = Field(default=1.0, ge=0.25, le=4.0)
    instructions: str | None = None
    stream_format: Literal["sse", "audio"] | None = None

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_id(cls, value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"id"}:
            return value["id"]
        return value


@dataclass(kw_only=True)
class SpeechJob(ModelWork):
    request: SpeechRequest


@dataclass(frozen=True, slots=True)
class SpeechCall:
    job: SpeechJob
    streaming: bool  # pcm: written piece by piece as the engine speaks them


class SpeechEndpoint:
    """``/audio/speech`` for the request envelope: one file, or raw ``pcm`` chunks as each piece of
    the speech is made; the audio metrics recorded once the last piece is out."""

    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

    async def prepare(self, request: SpeechRequest, caller: str) -> SpeechCall:
        return SpeechCall(SpeechJob(model=self.check(request), request=request), request.response_format == "pcm")

    def check(self, request: SpeechRequest) -> ServedModel:
        """The request's model, once everything that can be refused before work was checked."""
        model = self.models.get(request.model)
        model.require_task(TASK)
        if request.instructions:
            raise UnsupportedParameterError(
                "'instructions' cannot steer this model's voice; leave it out", param="instructions"
            )
        if request.stream_format == "sse":
            raise UnsupportedParameterError(
                "stream_format 'sse' is not supported: leave it out or ask for 'audio' (response_format 'pcm' "
                "streams as the speech is made)",
                param="stream_format",
            )
        voices = model.spec.voices
        if request.voice is not None and request.voice not in voices:
            known = ", ".join(sorted(voices)) or "none: leave 'voice' out for the model's default speaker"
            raise BadRequestError(
                f"model '{model.name}' has no voice '{request.voice[:60]}' (it has: {known})", param="voice"
            )
        model.check_available()  # a model unloaded on purpose passes: the request's lease loads it
        return model

    async def stream(self, call: SpeechCall) -> AsyncIterator[Answer]:
        """``pcm`` piece by piece as the engine makes them (each piece resampled on its own: pieces
        start with a pause and fade at their edges, so their seams are silent). Closing it early
        cancels the engine request."""
        job, request = call.job, call.job.request
        seconds = 0.0
        pieces = job.model.engine.synthesize_pieces(request.input, request.voice, request.speed)
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                job.started()
                seconds += len(piece.samples) / piece.sample_rate
                yield await asyncio.to_thread(_encoded, piece.samples, piece.sample_rate, "pcm")
        self._record(job, seconds)

    async def complete(self, call: SpeechCall) -> RawBody:
        job, request = call.job, call.job.request
        result = await job.model.engine.synthesize(request.input, request.voice, request.speed)
        job.started()
        self._record(job, len(result.samples) / result.sample_rate)
        return await asyncio.to_thread(_encoded, result.samples, result.sample_rate, request.response_format)

    def failure_event(self, call: SpeechCall, error: OvserveError) -> RawBody:
        return RawBody(b"", "audio/pcm", cut=True)

    @staticmethod
    def _record(job: SpeechJob, seconds: float) -> None:
        if job.recorder is not None:
            job.recorder.audio("speech", seconds, job.engine_seconds(), len(job.request.input))


def _encoded(samples: np.ndarray, rate: int, response_format: str) -> RawBody:
    data, content_type, rate = encode_audio(samples, rate, response_format)
    return RawBody(data, content_type, {"X-Sample-Rate": str(rate)})
