"""One exception hierarchy for everything a client can be told, and its single mapping to HTTP.

Handlers and services raise these; only :func:`error_body` (OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``) or a dialect's own error body (Anthropic's:
``ovserve.dialects.anthropic.response``), chosen per route by the error middleware in
``ovserve.app``, turn them into responses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypedDict

from pydantic import ValidationError

# Request dialects whose documented contract changes an error's status (see status_for).
AZURE = "azure"


class OvserveError(Exception):
    """Base of every error that reaches a client."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = None
    # Statuses that a client dialect documents for this kind of error instead of `status`.
    dialect_status: ClassVar[dict[str, int]] = {}
    # After the response, close the connection instead of keeping it alive.
    closes_connection: ClassVar[bool] = False

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code

    def body(self) -> ErrorPayload:
        return error_body(self.message, self.error_type, self.param, self.code)

    def status_for(self, dialect: str | None) -> int:
        return self.dialect_status.get(dialect, self.status) if dialect else self.status

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries (WWW-Authenticate, Retry-After)."""
        return {}


class InvalidRequestError(OvserveError):
    """The client's request is at fault: OpenAI types every such 4xx ``invalid_request_error``
    (rate limits aside: :class:`TooManyRequestsError`)."""

    status = 400
    error_type = "invalid_request_error"


class BadRequestError(InvalidRequestError):
    """The request is well-formed HTTP but asks for something invalid (OpenAI's 400)."""


class ContextLengthExceededError(BadRequestError):
    """The prompt (``prompt_tokens`` of at most ``maximum``, when the prompt itself is too long) or
    the prompt and the output asked for do not fit the model."""

    default_code = "context_length_exceeded"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        prompt_tokens: int | None = None,
        maximum: int | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.prompt_tokens = prompt_tokens
        self.maximum = maximum


class UnsupportedParameterError(BadRequestError):
    """A valid request asks for something this model or engine cannot do.

    OpenAI and OVMS answer 400. Azure AI Foundry documents 422 ("the payload is valid according
    to this specification, however some of the instructions are not supported by the underlying
    model"), so requests in its dialect (``?api-version=``) get 422.
    """

    default_code = "unsupported_parameter"
    dialect_status: ClassVar[dict[str, int]] = {AZURE: 422}


class AuthenticationError(InvalidRequestError):
    """No API key, or not one of the configured keys (OpenAI, vLLM and llama.cpp: 401)."""

    status = 401
    default_code = "invalid_api_key"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="ovserve"'}


class NotFoundError(InvalidRequestError):
    """No route for the path, or no such model or stored response."""

    status = 404
    default_code = "not_found"


class ModelNotFoundError(NotFoundError):
    default_code = "model_not_found"


class MethodNotAllowedError(InvalidRequestError):
    """The path has a route, but not for this HTTP method (the message names those it has)."""

    status = 405
    default_code = "method_not_allowed"


class PayloadTooLargeError(InvalidRequestError):
    """The request body is larger than --max_request_mb."""

    status = 413
    default_code = "payload_too_large"


class RequestTimeoutError(InvalidRequestError):
    """The client sent its request too slowly (--header_timeout / --body_timeout).

    The connection is closed after the response: the rest of a half-sent request cannot be
    told apart from the start of the next one.
    """

    status = 408
    default_code = "request_timeout"
    closes_connection: ClassVar[bool] = True


class UnsupportedMediaTypeError(InvalidRequestError):
    """The request body's Content-Type is not one its route reads."""

    status = 415
    default_code = "unsupported_media_type"


class ServiceUnavailableError(OvserveError):
    """The model exists but cannot take requests now (loading, restarting, draining, out of KV cache).

    Answered with ``Retry-After`` (seconds), as vLLM and the Databricks/Azure contracts do.
    """

    status = 503
    error_type = "service_unavailable"
    default_code = "model_not_ready"

    def __init__(
        self, message: str, *, param: str | None = None, code: str | None = None, retry_after: int = 1
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class TooManyRequestsError(ServiceUnavailableError):
    """Admission control: the model's queue is full (--max_queued_requests, --max_prompt_tokens_in_flight)."""

    status = 429
    error_type = "rate_limit_error"
    default_code = "queue_full"


class ModelTooLargeError(ServiceUnavailableError):
    """A model whose estimated memory exceeds the whole --models_memory_budget: no eviction can make
    room, so there is no ``Retry-After`` (retrying helps only once the budget or the model changes)."""

    default_code = "model_too_large_for_budget"

    def headers(self) -> dict[str, str]:
        return {}


class ConflictError(InvalidRequestError):
    """The request contradicts the server's configuration (unloading a pinned model)."""

    status = 409
    default_code = "conflict"


class DeadlineExceededError(OvserveError):
    """The request ran past --request_timeout; its engine work was cancelled."""

    status = 504
    error_type = "timeout_error"
    default_code = "request_timeout"


class EngineError(OvserveError):
    """The engine failed while serving this request (a step() exception, the process died)."""

    default_code = "engine_error"


class ErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorPayload(TypedDict):
    """OpenAI's error body, ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


def error_body(message: str, error_type: str, param: str | None = None, code: str | None = None) -> ErrorPayload:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class MediaError(BadRequestError):
    """An image_url part cannot be used (param names the part: messages.N.content.M.image_url)."""

    default_code = "invalid_image"


class MediaNotAllowedError(MediaError):
    """The media policy forbids the URL or path; nothing was fetched or opened."""

    default_code = "image_url_not_allowed"


class MediaFetchError(MediaError):
    """An allowed URL could not be fetched (HTTP error, timeout, redirect limit, connection)."""

    default_code = "image_fetch_failed"


class MediaTooLargeError(MediaError):
    """Over --max_image_mb, or more pixels than the decoder accepts."""

    default_code = "image_too_large"


# -- pydantic's complaints, in a client's words ------------------------------------------------
#
# Every caller (request bodies, settings, graph files, the export check) turns a ValidationError
# into words here, and only here. pydantic's error locations hold steps that are not in the
# client's JSON: the member a plain union tried ("str", "list[str]", "FunctionToolChoice") and the
# tag of a discriminated union's member. Request models tag their discriminated unions with
# ``tag("name")`` (``<name>``) so the tags are known for what they are.


def tag(name: str) -> str:
    """The location step of a discriminated union member named ``name``."""
    return f"<{name}>"


def _is_tag(part: object) -> bool:
    return isinstance(part, str) and part.startswith("<") and part.endswith(">")


def by_type(default: str | None) -> Callable[[Any], str | None]:
    """A discriminator on a JSON object's ``type`` (``default`` when it has none): its member's tag.

    A non-string ``type`` is tagged as it is, so it reads as an unknown type; a value that is no
    object has no tag (pydantic's "union tag not found", a complaint about its shape)."""

    def discriminate(value: Any) -> str | None:
        if not isinstance(value, dict):
            return None
        kind = value.get("type", default)
        return None if kind is None else tag(kind if isinstance(kind, str) else repr(kind))

    return discriminate


def str_or_list(value: Any) -> str:
    """A discriminator for a string-or-list field (the Responses API's content and input)."""
    return tag("str") if isinstance(value, str) else tag("list")


# The member a plain union tried ("constrained-str": an Annotated str with a Field limit).
_MEMBER = re.compile(
    r"^(str|int|float|bool|none|list|dict|literal|tagged-union|constrained-[a-z]+|function-[a-z-]+"
    r"|[A-Z][A-Za-z0-9]*)(\[.*\])?$"
)


@dataclass(frozen=True)
class Complaint:
    """One of pydantic's complaints: the path of the offending value in the client's JSON, and
    what is wrong with it."""

    path: tuple[str | int, ...]
    message: str

    @property
    def param(self) -> str | None:
        return ".".join(str(part) for part in self.path) or None

    @property
    def text(self) -> str:
        """The message, prefixed by its path (``messages.0.content: Field required``)."""
        return f"{self.param}: {self.message}" if self.param else self.message


def complaints(exc: ValidationError) -> list[Complaint]:
    """Every complaint of ``exc``, in pydantic's order."""
    return [_complaint(error) for error in exc.errors(include_url=False)]


def first_complaint(exc: ValidationError) -> Complaint:
    return _complaint(exc.errors(include_url=False)[0])


def _complaint(error: Any) -> Complaint:
    path: list[str | int] = []
    after_tag = False
    for part in error["loc"]:
        if _is_tag(part):
            after_tag = True
            continue
        if isinstance(part, str) and _MEMBER.match(part):
            break  # a plain union's member: the field itself is what the client fixes
        path.append(part)
    message = error["msg"].removeprefix("Value error, ")
    kind = error["type"]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        if isinstance(error["input"], dict):
            path.append("type")
            message = "Field required"
            if kind == "union_tag_invalid":
                expected = [name.strip("'<>") for name in error["ctx"]["expected_tags"].split(", ")]
                quoted = [f"'{name}'" for name in expected]
                message = "Input should be " + " or ".join(
                    [", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted
                )
        else:
            message = "Input should be a valid dictionary"
    elif kind == "list_type" and after_tag and error["loc"][-1] == tag("list"):
        message = "Input should be a string or a list"
    return Complaint(tuple(path), message)


def bad_request(exc: ValidationError) -> BadRequestError:
    """A request body's first complaint as the client's 400."""
    complaint = first_complaint(exc)
    return BadRequestError(complaint.text, param=complaint.param)
