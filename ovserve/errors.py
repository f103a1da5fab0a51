"""One exception hierarchy for everything a client can be told, and its single mapping to HTTP.

Handlers and services raise these; only :func:`error_body` and the error middleware in
``ovserve.app`` turn them into responses, so every failure has OpenAI's error shape:
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

from typing import Any, ClassVar

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

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, self.param, self.code)

    def status_for(self, dialect: str | None) -> int:
        return self.dialect_status.get(dialect, self.status) if dialect else self.status

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries (WWW-Authenticate, Retry-After)."""
        return {}


class BadRequestError(OvserveError):
    """The request is well-formed HTTP but asks for something invalid (OpenAI's 400)."""

    status = 400
    error_type = "invalid_request_error"


class ContextLengthExceededError(BadRequestError):
    default_code = "context_length_exceeded"


class UnsupportedParameterError(BadRequestError):
    """A valid request asks for something this model or engine cannot do.

    OpenAI and OVMS answer 400. Azure AI Foundry documents 422 ("the payload is valid according
    to this specification, however some of the instructions are not supported by the underlying
    model"), so requests in its dialect (``?api-version=``) get 422.
    """

    default_code = "unsupported_parameter"
    dialect_status: ClassVar[dict[str, int]] = {AZURE: 422}


class AuthenticationError(OvserveError):
    """No API key, or not one of the configured keys (OpenAI, vLLM and llama.cpp: 401)."""

    status = 401
    error_type = "invalid_request_error"
    default_code = "invalid_api_key"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="ovserve"'}


class NotFoundError(OvserveError):
    status = 404
    error_type = "invalid_request_error"
    default_code = "not_found"


class ModelNotFoundError(NotFoundError):
    default_code = "model_not_found"


class MethodNotAllowedError(OvserveError):
    status = 405
    error_type = "invalid_request_error"
    default_code = "method_not_allowed"


class PayloadTooLargeError(OvserveError):
    status = 413
    error_type = "invalid_request_error"
    default_code = "payload_too_large"


class RequestTimeoutError(OvserveError):
    """The client sent its request too slowly (--header_timeout / --body_timeout).

    The connection is closed after the response: the rest of a half-sent request cannot be
    told apart from the start of the next one.
    """

    status = 408
    error_type = "invalid_request_error"
    default_code = "request_timeout"
    closes_connection: ClassVar[bool] = True


class UnsupportedMediaTypeError(OvserveError):
    status = 415
    error_type = "invalid_request_error"
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


class DeadlineExceededError(OvserveError):
    """The request ran past --request_timeout; its engine work was cancelled."""

    status = 504
    error_type = "timeout_error"
    default_code = "request_timeout"


class EngineError(OvserveError):
    """The engine failed while serving this request (a step() exception, the process died)."""

    status = 500
    error_type = "server_error"
    default_code = "engine_error"


def error_body(message: str, error_type: str, param: str | None = None, code: str | None = None) -> dict:
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
