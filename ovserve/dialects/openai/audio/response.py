"""The bodies of /audio/transcriptions and /audio/translations in each ``response_format``.

Contract: :func:`render` gives (body, content type) for a finished transcript: ``json`` is
``{"text", "usage"}``, ``text`` the bare text, ``srt``/``vtt`` subtitles of the segments,
``verbose_json`` OpenAI's object with ``task``, ``language`` (its English name), ``duration``,
``segments`` (unless only word timestamps were asked), ``words`` (``{word, start, end}``, when
asked) and ``usage``. ``usage`` is OpenAI's duration usage: the audio's seconds, rounded up.
Stream events are :func:`delta_event` and :func:`done_event`. Every JSON body is a response model
(:class:`~ovserve.dialects.body.Body`).
"""

from __future__ import annotations

import math
from typing import Literal

from ovserve.dialects.body import Body
from ovserve.dialects.openai.audio.request import AudioRequest
from ovserve.dialects.openai.common import ErrorBody, ErrorObject
from ovserve.engine.messages import TranscribeResult
from ovserve.errors import OvserveError

# Whisper's language names (OpenAI's verbose_json names the language in English, lower case).
LANGUAGE_NAMES = {
    "en": "english", "de": "german", "fr": "french", "es": "spanish", "it": "italian", "pl": "polish",
    "zh": "chinese", "ja": "japanese", "ko": "korean", "ru": "russian", "pt": "portuguese", "nl": "dutch",
    "tr": "turkish", "sv": "swedish", "uk": "ukrainian", "cs": "czech", "ar": "arabic", "hi": "hindi",
}  # fmt: skip

Segment = tuple[float, float, str]


class DurationUsage(Body):
    """OpenAI's usage of an audio request: the audio's seconds, rounded up (at least 1)."""

    type: Literal["duration"]
    seconds: int


def usage(seconds: float) -> DurationUsage:
    return DurationUsage(type="duration", seconds=max(1, math.ceil(seconds)))


class Transcription(Body):
    """``response_format: json``."""

    text: str
    usage: DurationUsage


class TranscriptionSegment(Body):
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class TranscriptionWord(Body):
    word: str
    start: float
    end: float


class VerboseTranscription(Body):
    """``response_format: verbose_json``: ``segments`` and ``words`` only when asked for."""

    task: Literal["transcribe", "translate"]
    language: str
    duration: float
    text: str
    segments: list[TranscriptionSegment] | None = None
    words: list[TranscriptionWord] | None = None
    usage: DurationUsage


class TranscriptTextDelta(Body):
    type: Literal["transcript.text.delta"]
    delta: str
    logprobs: None


class TranscriptTextDone(Body):
    type: Literal["transcript.text.done"]
    text: str
    logprobs: None
    usage: DurationUsage


def _clock(seconds: float, separator: str) -> str:
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _segments_or_whole(text: str, segments: list[Segment], seconds: float) -> list[Segment]:
    # A transcript without timestamps (the model wrote none) is one segment spanning the audio.
    return segments or [(0.0, round(seconds, 2), text)]


def srt(text: str, segments: list[Segment], seconds: float) -> str:
    blocks = [
        f"{index}\n{_clock(start, ',')} --> {_clock(end, ',')}\n{part.strip()}\n"
        for index, (start, end, part) in enumerate(_segments_or_whole(text, segments, seconds), start=1)
    ]
    return "\n".join(blocks)


def vtt(text: str, segments: list[Segment], seconds: float) -> str:
    cues = [
        f"{_clock(start, '.')} --> {_clock(end, '.')}\n{part.strip()}\n"
        for start, end, part in _segments_or_whole(text, segments, seconds)
    ]
    return "WEBVTT\n\n" + "\n".join(cues)


def verbose(request: AudioRequest, result: TranscribeResult, seconds: float) -> VerboseTranscription:
    code = result.language or "en"
    body = VerboseTranscription(
        task="translate" if request.task == "translate" else "transcribe",
        language=LANGUAGE_NAMES.get(code, code) if request.task == "transcribe" else "english",
        duration=round(seconds, 3),
        text=result.text,
        usage=usage(seconds),
    )
    if request.timestamps:
        body.segments = [
            TranscriptionSegment(
                id=index,
                seek=0,
                start=start,
                end=end,
                text=part,
                tokens=[],
                temperature=request.temperature,
                # Not measured by the pipeline; OpenAI's neutral values.
                avg_logprob=0.0,
                compression_ratio=1.0,
                no_speech_prob=0.0,
            )
            for index, (start, end, part) in enumerate(_segments_or_whole(result.text, result.segments, seconds))
        ]
    if request.words:
        body.words = [TranscriptionWord(word=word, start=start, end=end) for start, end, word in result.words]
    return body


def render(request: AudioRequest, result: TranscribeResult, seconds: float) -> tuple[str, str]:
    text, segments = result.text, result.segments
    match request.response_format:
        case "text":
            return text, "text/plain"
        case "srt":
            return srt(text, segments, seconds), "text/plain"
        case "vtt":
            return vtt(text, segments, seconds), "text/vtt"
        case "verbose_json":
            return verbose(request, result, seconds).encode(), "application/json"
        case _:
            return Transcription(text=text, usage=usage(seconds)).encode(), "application/json"


class TranscriptError(Body):
    """The last event of a transcription stream that failed after its first byte."""

    type: Literal["error"]
    error: ErrorObject

    @classmethod
    def of(cls, error: OvserveError) -> TranscriptError:
        return cls(type="error", error=ErrorBody.of(error).error)


def delta_event(text: str) -> TranscriptTextDelta:
    return TranscriptTextDelta(type="transcript.text.delta", delta=text, logprobs=None)


def done_event(text: str, seconds: float) -> TranscriptTextDone:
    return TranscriptTextDone(type="transcript.text.done", text=text, logprobs=None, usage=usage(seconds))
