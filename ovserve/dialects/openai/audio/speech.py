"""/audio/speech: OpenAI's text-to-speech request, served by a SpeechT5-style model.

Contract: :class:`SpeechRequest` validates the JSON body (``input`` 1..4096 characters, ``speed``
0.25..4.0, ``response_format`` mp3|opus|aac|flac|wav|pcm, default mp3 as OpenAI's); ``voice`` names
one of the model's voices (its speaker embeddings; OpenAI's ``{"id": ...}`` form is accepted too).
A voice the model does not have is a 400 listing the ones it has, as in OVMS; ``stream_format``
"sse" is refused (OpenAI's SSE events carry base64 audio deltas no SpeechT5 client asks for);
``pcm`` is streamed as the engine speaks each piece of a long input (:meth:`SpeechService.speak_pcm`),
the other formats are one whole file. ``instructions`` cannot steer SpeechT5 and is refused rather than ignored.
:meth:`SpeechService.check` refuses what can be refused before work; :meth:`SpeechService.speak`
(the model's engine held by the route) returns the encoded file, its content type, its sample
rate (named in the ``X-Sample-Rate`` header) and its duration; ``pcm`` is raw 16-bit
little-endian mono at 24 kHz as OpenAI's (resampled from the model's rate: 16 kHz for SpeechT5),
the containers keep the model's rate.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ovserve.core.audio import encode_audio
from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.models.served import ModelRegistry, ServedModel

TASK = "text_to_speech"
MAX_INPUT_CHARS = 4_096


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
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

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must contain text to speak")
        return value


@dataclass(frozen=True, slots=True)
class Speech:
    """An answer: the encoded file, its content type and sample rate, and how long it plays."""

    data: bytes
    content_type: str
    sample_rate: int
    seconds: float


class SpeechService:
    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

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

    async def speak_pcm(self, request: SpeechRequest, model: ServedModel) -> AsyncGenerator[Speech, None]:
        """``pcm`` speech piece by piece as the engine makes them (each piece resampled on its own:
        pieces start with a pause and fade at their edges, so their seams are silent). Closing it
        early cancels the engine request."""
        pieces = model.engine.synthesize_pieces(request.input, request.voice, request.speed)
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                data, content_type, rate = await asyncio.to_thread(
                    encode_audio, piece.samples, piece.sample_rate, "pcm"
                )
                yield Speech(data, content_type, rate, len(piece.samples) / piece.sample_rate)

    async def speak(self, request: SpeechRequest, model: ServedModel) -> Speech:
        """The speech of ``request`` by ``model`` (checked, its engine held by the caller)."""
        result = await model.engine.synthesize(request.input, request.voice, request.speed)
        data, content_type, rate = await asyncio.to_thread(
            encode_audio, result.samples, result.sample_rate, request.response_format
        )
        return Speech(data, content_type, rate, len(result.samples) / result.sample_rate)
