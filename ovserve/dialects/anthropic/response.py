"""Anthropic's Messages API bodies: the message, its stream events, token counts, the model list,
and Anthropic's error shape (see :mod:`ovserve.dialects.body` for how response models are written).

The shapes follow Anthropic's Messages reference (and the ``anthropic`` SDK's types, which parse
them): a key this module leaves unset is absent from the body, as in Anthropic's own answers.

Errors: every :class:`~ovserve.errors.OvserveError` has one Anthropic ``error.type`` and status
(:func:`error_status`): 4xx by their meaning, the queue's 429 ``rate_limit_error``, a model that
cannot take requests now (OpenAI dialects' 503) ``overloaded_error`` with Anthropic's 529, a
deadline ``timeout_error``, the rest ``api_error``. A prompt that does not fit the context reads
``prompt is too long: N tokens > M maximum``, the wording clients such as Claude Code recognise.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal

from pydantic import Field

from ovserve.dialects.body import Body, JsonObject
from ovserve.errors import ContextLengthExceededError, OvserveError

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]
ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "timeout_error",
    "overloaded_error",
]

# Anthropic's status for an overloaded API; the OpenAI dialects' 503 (loading, restarting,
# draining, out of KV cache) is this here.
OVERLOADED_STATUS = 529
_TYPE_BY_STATUS: dict[int, ErrorType] = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


# -- content blocks --------------------------------------------------------------------------


class TextBlock(Body):
    type: Literal["text"]
    text: str


class ThinkingBlock(Body):
    type: Literal["thinking"]
    thinking: str
    signature: str


class ToolUseBlock(Body):
    type: Literal["tool_use"]
    id: str
    name: str
    input: JsonObject


ContentBlock = Annotated[TextBlock | ThinkingBlock | ToolUseBlock, Field(discriminator="type")]


class MessageUsage(Body):
    input_tokens: int
    output_tokens: int
    # The prompt tokens the engine's prefix cache served (0 with prefix caching off); nothing is
    # ever written to a cache on request, so cache_creation_input_tokens is 0.
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class Message(Body):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    content: list[ContentBlock]
    model: str
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: MessageUsage


# -- stream events ---------------------------------------------------------------------------


class MessageStartEvent(Body):
    type: Literal["message_start"]
    message: Message


class ContentBlockStartEvent(Body):
    type: Literal["content_block_start"]
    index: int
    content_block: ContentBlock


class TextDelta(Body):
    type: Literal["text_delta"]
    text: str


class InputJsonDelta(Body):
    type: Literal["input_json_delta"]
    partial_json: str


class ThinkingDelta(Body):
    type: Literal["thinking_delta"]
    thinking: str


class SignatureDelta(Body):
    type: Literal["signature_delta"]
    signature: str


BlockDelta = Annotated[TextDelta | InputJsonDelta | ThinkingDelta | SignatureDelta, Field(discriminator="type")]


class ContentBlockDeltaEvent(Body):
    type: Literal["content_block_delta"]
    index: int
    delta: BlockDelta


class ContentBlockStopEvent(Body):
    type: Literal["content_block_stop"]
    index: int


class MessageDelta(Body):
    stop_reason: StopReason | None
    stop_sequence: str | None


class MessageDeltaUsage(Body):
    """Cumulative counts of the whole message (the SDK overwrites message_start's with them)."""

    output_tokens: int
    input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class MessageDeltaEvent(Body):
    type: Literal["message_delta"]
    delta: MessageDelta
    usage: MessageDeltaUsage


class MessageStopEvent(Body):
    type: Literal["message_stop"]


class PingEvent(Body):
    type: Literal["ping"]


class ErrorDetail(Body):
    type: ErrorType
    message: str


class ErrorResponse(Body):
    """Anthropic's error body; also the ``error`` event that ends a stream that failed."""

    type: Literal["error"]
    error: ErrorDetail

    @classmethod
    def of(cls, error: OvserveError) -> ErrorResponse:
        return cls(type="error", error=ErrorDetail(type=error_type(error), message=error_message(error)))

    @classmethod
    def plain(cls, status: int, message: str) -> ErrorResponse:
        """An error that is only an HTTP status (aiohttp's own refusals)."""
        return cls(type="error", error=ErrorDetail(type=_type_of_status(status), message=message))


StreamEvent = Annotated[
    MessageStartEvent
    | ContentBlockStartEvent
    | ContentBlockDeltaEvent
    | ContentBlockStopEvent
    | MessageDeltaEvent
    | MessageStopEvent
    | PingEvent
    | ErrorResponse,
    Field(discriminator="type"),
]


class TokenCount(Body):
    input_tokens: int


class ModelInfo(Body):
    type: Literal["model"]
    id: str
    display_name: str
    created_at: str  # RFC 3339: when the server loaded the model
    lifecycle: Literal["active"]
    max_input_tokens: int | None = None  # the model's context length

    @classmethod
    def of(cls, name: str, created: int, context_length: int | None = None) -> ModelInfo:
        stamp = datetime.fromtimestamp(created, tz=timezone.utc).isoformat().replace("+00:00", "Z")
        info = cls(type="model", id=name, display_name=name, created_at=stamp, lifecycle="active")
        if context_length is not None:
            info.max_input_tokens = context_length
        return info


class ModelList(Body):
    data: list[ModelInfo]
    has_more: bool
    first_id: str | None
    last_id: str | None


# -- errors ----------------------------------------------------------------------------------


def _type_of_status(status: int) -> ErrorType:
    if status in _TYPE_BY_STATUS:
        return _TYPE_BY_STATUS[status]
    return "invalid_request_error" if status < 500 else "api_error"


def error_type(error: OvserveError) -> ErrorType:
    return _type_of_status(error.status)


def error_status(error: OvserveError) -> int:
    """The HTTP status of ``error`` in this dialect: Anthropic's 529 for an overloaded model."""
    return OVERLOADED_STATUS if error.status == 503 else error.status


def error_message(error: OvserveError) -> str:
    if isinstance(error, ContextLengthExceededError) and error.prompt_tokens is not None:
        # Anthropic's sentence, word for word: clients parse it (Claude Code compacts the
        # conversation on it).
        return f"prompt is too long: {error.prompt_tokens} tokens > {error.maximum} maximum"
    if error.param:
        return f"{error.param}: {error.message}" if not error.message.startswith(error.param) else error.message
    return error.message


def error_body(error: OvserveError) -> JsonObject:
    return ErrorResponse.of(error).dump()
