"""The bodies of /audio/transcriptions and /audio/translations in each ``response_format``.

Contract: :func:`render` gives (body, content type) for a finished transcript: ``json`` is
``{"text", "usage"}``, ``text`` the bare text, ``srt``/``vtt`` subtitles of the segments,
``verbose_json`` OpenAI's object with ``task``, ``language`` (its English name), ``duration``,
``segments`` (unless only word timestamps were asked), ``words`` (``{word, start, end}``, when
asked) and ``usage``. ``usage`` is OpenAI's duration usage: the audio's seconds, rounded up.
Stream events are :func:`delta_event` and :func:`done_event`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ovserve.dialects.openai.audio.request import AudioRequest
from ovserve.engine.messages import TranscribeResult

# Whisper's language names (OpenAI's verbose_json names the language in English, lower case).
LANGUAGE_NAMES = {
    "en": "english", "de": "german", "fr": "french", "es": "spanish", "it": "italian", "pl": "polish",
    "zh": "chinese", "ja": "japanese", "ko": "korean", "ru": "russian", "pt": "portuguese", "nl": "dutch",
    "tr": "turkish", "sv": "swedish", "uk": "ukrainian", "cs": "czech", "ar": "arabic", "hi": "hindi",
}  # fmt: skip

Segment = tuple[float, float, str]


def usage(seconds: float) -> dict[str, Any]:
    return {"type": "duration", "seconds": max(1, math.ceil(seconds))}


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


def verbose(request: AudioRequest, result: TranscribeResult, seconds: float) -> dict[str, Any]:
    code = result.language or "en"
    body: dict[str, Any] = {
        "task": "translate" if request.task == "translate" else "transcribe",
        "language": LANGUAGE_NAMES.get(code, code) if request.task == "transcribe" else "english",
        "duration": round(seconds, 3),
        "text": result.text,
    }
    if request.timestamps:
        body["segments"] = [
            {
                "id": index,
                "seek": 0,
                "start": start,
                "end": end,
                "text": part,
                "tokens": [],
                "temperature": request.temperature,
                # Not measured by the pipeline; OpenAI's neutral values.
                "avg_logprob": 0.0,
                "compression_ratio": 1.0,
                "no_speech_prob": 0.0,
            }
            for index, (start, end, part) in enumerate(_segments_or_whole(result.text, result.segments, seconds))
        ]
    if request.words:
        body["words"] = [{"word": word, "start": start, "end": end} for start, end, word in result.words]
    body["usage"] = usage(seconds)
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
            return json.dumps(verbose(request, result, seconds), ensure_ascii=False), "application/json"
        case _:
            return json.dumps({"text": text, "usage": usage(seconds)}, ensure_ascii=False), "application/json"


def delta_event(text: str) -> dict[str, Any]:
    return {"type": "transcript.text.delta", "delta": text, "logprobs": None}


def done_event(text: str, seconds: float) -> dict[str, Any]:
    return {"type": "transcript.text.done", "text": text, "logprobs": None, "usage": usage(seconds)}
