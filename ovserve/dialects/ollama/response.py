"""The bodies Ollama's ``/api/*`` routes answer with (field names and meanings as Ollama's API
documents them; durations in nanoseconds, timestamps RFC 3339 in UTC).

``/openapi.json`` names its schemas after these classes (``ovserve.api.openapi``), so none shares a
name with a request model of the dialect: an answer's message is an :class:`AssistantMessage`,
its calls :class:`CalledTool`.

A generation's line is written once per field: :class:`ChatResponse` and :class:`GenerateResponse`
are their own line (``_ChatLine``, ``_GenerateLine``, both a ``_Line``) plus the :class:`Stats` the
last line adds; the bases are listed so the keys keep Ollama's order (the line's, then the stats).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Literal

from ovserve.dialects.body import Body, JsonObject
from ovserve.errors import OvserveError, TooManyRequestsError

DoneReason = Literal["stop", "length", "load", "unload"]


def timestamp(at: datetime | None = None) -> str:
    """RFC 3339 with microseconds and ``Z``, as Ollama writes ``created_at`` (``at``: now)."""
    if at is not None:
        return at.isoformat().replace("+00:00", "Z")
    # Now is every streamed line's: the whole second is formatted once per second (a third of
    # datetime's cost), and the microseconds written as isoformat writes them (none when 0).
    second, fraction = divmod(time.time_ns() // 1000, 1_000_000)
    if second != _SECOND[0]:
        _SECOND[:] = second, datetime.fromtimestamp(second, UTC).isoformat().removesuffix("+00:00")
    return f"{_SECOND[1]}.{fraction:06d}Z" if fraction else f"{_SECOND[1]}Z"


_SECOND: list[Any] = [None, ""]  # the last second timestamp() formatted: (epoch second, its text)


class CalledFunction(Body):
    index: int | None = None
    name: str
    arguments: JsonObject


class CalledTool(Body):
    """A tool call the model made (what a client sends back is ``ovserve.dialects.ollama.request.ToolCall``)."""

    id: str | None = None
    function: CalledFunction


class AssistantMessage(Body):
    """The message of an answer (what a client sends is ``ovserve.dialects.ollama.request.Message``)."""

    role: Literal["assistant"]
    content: str
    thinking: str | None = None
    tool_calls: list[CalledTool] | None = None


class Stats(Body):
    """What the last line of a stream (and a unary answer) adds."""

    done_reason: DoneReason | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class _Line(Body):
    model: str
    created_at: str


class _ChatLine(_Line):
    message: AssistantMessage
    done: bool


class _GenerateLine(_Line):
    response: str
    thinking: str | None = None
    done: bool


# Stats first among the bases: pydantic orders fields from the last base to the class itself.
class ChatResponse(Stats, _ChatLine):
    """A line of an ``/api/chat`` stream, or its unary answer (the last line adds the :class:`Stats`)."""


class GenerateResponse(Stats, _GenerateLine):
    """A line of an ``/api/generate`` stream, or its unary answer (the last line adds the :class:`Stats`)."""


class ErrorResponse(Body):
    """Every Ollama error: a status code and ``{"error": "..."}`` (also a stream's last line)."""

    error: str


class EmbedResponse(Body):
    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class EmbeddingsResponse(Body):
    embedding: list[float]


class ModelDetails(Body):
    parent_model: str
    format: str
    family: str
    families: list[str] | None
    parameter_size: str
    quantization_level: str


class ListedModel(Body):
    """A model of ``/api/tags``."""

    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: ModelDetails


class TagsResponse(Body):
    models: list[ListedModel]


class RunningModel(Body):
    """A model of ``/api/ps``: loaded now."""

    name: str
    model: str
    size: int
    digest: str
    details: ModelDetails
    expires_at: str
    size_vram: int
    context_length: int


class ProcessResponse(Body):
    models: list[RunningModel]


class ShowResponse(Body):
    modelfile: str
    parameters: str
    template: str
    details: ModelDetails
    model_info: JsonObject
    capabilities: list[str]
    modified_at: str


class VersionResponse(Body):
    version: str


def error_status(error: OvserveError) -> int:
    """The status Ollama answers ``error`` with: ovserve's, except a full queue, which Ollama
    answers 503 ("server busy")."""
    return 503 if isinstance(error, TooManyRequestsError) else error.status


def error_message(error: OvserveError) -> str:
    """Ollama's error is one string: the field at fault leads it, where the message does not name it."""
    if error.param and error.param not in error.message:
        return f"{error.param}: {error.message}"
    return error.message


def error_body(message: str) -> JsonObject:
    return ErrorResponse(error=message).dump()
