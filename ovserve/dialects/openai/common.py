"""What OpenAI's bodies share: chat and text completions' usage object, the error shape (see
:mod:`ovserve.dialects.body` for how response models are written), and the check that a text
field says something (:func:`saying`)."""

from __future__ import annotations

from pydantic import AfterValidator

from ovserve.core.job import Usage as CoreUsage
from ovserve.dialects.body import Body
from ovserve.errors import OvserveError


class PromptTokensDetails(Body):
    cached_tokens: int


class Usage(Body):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    # OpenAI and MindIE: the prompt tokens served from the prefix cache; absent when unknown.
    prompt_tokens_details: PromptTokensDetails | None = None

    @classmethod
    def of(cls, usage: CoreUsage) -> Usage:
        """``prompt_tokens_details.cached_tokens``: 0 with prefix caching off, what the engine's model
        of its prefix cache counted with it on (``ovserve.engine.prefix_cache``), absent when unknown."""
        result = cls(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        )
        if usage.cached_tokens is not None:
            result.prompt_tokens_details = PromptTokensDetails(cached_tokens=usage.cached_tokens)
        return result


class ErrorObject(Body):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(Body):
    """OpenAI's error shape; also the event a chat or completion stream ends with when it fails."""

    error: ErrorObject

    @classmethod
    def of(cls, error: OvserveError) -> ErrorBody:
        return cls(error=ErrorObject(message=error.message, type=error.error_type, param=error.param, code=error.code))


def saying(what: str) -> AfterValidator:
    """A text field's check that it is not blank: a blank one "must {what}" (a 400 naming it)."""

    def not_blank(value: str) -> str:
        if not value.strip():
            raise ValueError(f"must {what}")
        return value

    return AfterValidator(not_blank)
