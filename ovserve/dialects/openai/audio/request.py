"""The multipart form of /audio/transcriptions and /audio/translations, as OpenAI documents it.

Contract: :func:`parse_form` turns the form's fields into an :class:`AudioRequest` or raises a
:class:`~ovserve.errors.BadRequestError` naming the field. Fields the server does not use
(``include[]``, ``chunking_strategy``, ``known_speaker_*``) are accepted and logged, as unknown
JSON fields are elsewhere; a field that asks for something the server cannot do (a stream of a
translation or of segments, word timestamps of a translation) is refused rather than silently dropped.

``timestamp_granularities[]`` follows OpenAI: it needs ``response_format`` ``verbose_json`` (else a
400); without it, or with ``segment``, the answer has segments; with ``word`` it has words (whether
the model can is the service's check: its engine must have been loaded with word timestamps);
with both, both.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Literal, cast

from multidict import MultiDictProxy

from ovserve.errors import BadRequestError, UnsupportedParameterError

log = logging.getLogger(__name__)

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
Granularity = Literal["segment", "word"]
GRANULARITIES: tuple[Granularity, ...] = ("segment", "word")
RESPONSE_FORMATS: tuple[ResponseFormat, ...] = ("json", "text", "srt", "verbose_json", "vtt")
# Formats that carry segment timestamps.
TIMED_FORMATS = frozenset({"srt", "verbose_json", "vtt"})
# Formats a stream may be asked in (OpenAI streams text deltas only).
STREAMED_FORMATS = frozenset({"json", "text"})
_LANGUAGE = re.compile(r"[a-z]{2,3}")
_KNOWN = {
    "file",
    "model",
    "language",
    "prompt",
    "temperature",
    "response_format",
    "timestamp_granularities[]",
    "timestamp_granularities",
    "stream",
}
_IGNORED = {"include[]", "include", "chunking_strategy", "known_speaker_names[]", "known_speaker_references[]"}
MAX_PROMPT_CHARS = 4_096


@dataclass(frozen=True)
class AudioRequest:
    task: Literal["transcribe", "translate"]
    model: str
    file: bytes
    filename: str
    language: str | None
    prompt: str | None
    temperature: float
    response_format: ResponseFormat
    stream: bool
    granularities: frozenset[Granularity] = frozenset()

    @property
    def timestamps(self) -> bool:
        """Segment timestamps wanted: srt, vtt, and verbose_json unless it asked for words only."""
        if self.response_format == "verbose_json" and self.granularities:
            return "segment" in self.granularities
        return self.response_format in TIMED_FORMATS

    @property
    def words(self) -> bool:
        """Word timestamps wanted (verbose_json's ``words``)."""
        return "word" in self.granularities


def _text(form: MultiDictProxy[object], name: str) -> str | None:
    values = form.getall(name, [])
    if not values:
        return None
    if len(values) > 1:
        raise BadRequestError(f"'{name}' was given {len(values)} times", param=name)
    value = values[0]
    if not isinstance(value, str):
        raise BadRequestError(f"'{name}' must be a text field, not a file", param=name)
    return value


def parse_form(form: MultiDictProxy[object], task: Literal["transcribe", "translate"]) -> AudioRequest:
    files = form.getall("file", [])
    if not files:
        raise BadRequestError("'file' is required: the audio to transcribe, as a multipart file field", param="file")
    if len(files) > 1:
        raise BadRequestError("one 'file' per request", param="file")
    upload = files[0]
    if isinstance(upload, str):
        raise BadRequestError("'file' must be a file field (multipart with a filename), not text", param="file")
    data = upload.file.read()  # type: ignore[attr-defined]
    filename = str(getattr(upload, "filename", "") or "")

    model = _text(form, "model")
    if not model:
        raise BadRequestError("'model' is required", param="model")

    language = _text(form, "language")
    if language is not None:
        if task == "translate":
            raise UnsupportedParameterError("'language' is not a parameter of translations", param="language")
        language = language.strip().lower()
        if not _LANGUAGE.fullmatch(language):
            raise BadRequestError(
                f"'language' must be an ISO-639-1 code such as 'en', got {language[:40]!r}", param="language"
            )

    prompt = _text(form, "prompt")
    if prompt is not None and len(prompt) > MAX_PROMPT_CHARS:
        raise BadRequestError(f"'prompt' has {len(prompt)} characters; at most {MAX_PROMPT_CHARS}", param="prompt")

    temperature = 0.0
    raw_temperature = _text(form, "temperature")
    if raw_temperature is not None:
        try:
            temperature = float(raw_temperature)
        except ValueError:
            raise BadRequestError(
                f"'temperature' must be a number, got {raw_temperature[:40]!r}", param="temperature"
            ) from None
        if not math.isfinite(temperature) or not 0.0 <= temperature <= 1.0:
            raise BadRequestError("'temperature' must be between 0 and 1", param="temperature")

    response_format = _text(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise BadRequestError(
            f"'response_format' must be one of {', '.join(RESPONSE_FORMATS)}, got {response_format[:40]!r}",
            param="response_format",
        )

    granularities: set[Granularity] = set()
    for granularity in [*form.getall("timestamp_granularities[]", []), *form.getall("timestamp_granularities", [])]:
        if granularity in GRANULARITIES:
            granularities.add(cast(Granularity, granularity))
        else:
            raise BadRequestError(
                f"'timestamp_granularities[]' takes 'segment' or 'word', got {str(granularity)[:40]!r}",
                param="timestamp_granularities[]",
            )
    if "word" in granularities and task == "translate":
        # The words would be English ones aligned to speech in another language.
        raise UnsupportedParameterError(
            "word timestamps are for transcriptions, not translations", param="timestamp_granularities[]"
        )
    if granularities and response_format != "verbose_json":
        raise BadRequestError(
            "'timestamp_granularities[]' needs response_format 'verbose_json'", param="timestamp_granularities[]"
        )

    stream = False
    raw_stream = _text(form, "stream")
    if raw_stream is not None:
        lowered = raw_stream.strip().lower()
        if lowered not in ("true", "false", "1", "0"):
            raise BadRequestError(f"'stream' must be true or false, got {raw_stream[:40]!r}", param="stream")
        stream = lowered in ("true", "1")
    if stream and task == "translate":
        raise UnsupportedParameterError("translations cannot be streamed", param="stream")
    if stream and response_format not in STREAMED_FORMATS:
        raise BadRequestError(
            f"a stream carries text deltas: response_format must be json or text, not {response_format}",
            param="stream",
        )

    unknown = sorted(set(form) - _KNOWN - _IGNORED)
    if unknown or set(form) & _IGNORED:
        log.info("audio request: ignored fields %s", ", ".join(sorted(set(form) - _KNOWN)))
    return AudioRequest(
        task=task,
        model=model,
        file=data,
        filename=filename,
        language=language,
        prompt=prompt or None,
        temperature=temperature,
        response_format=response_format,
        stream=stream,
        granularities=frozenset(granularities),
    )
