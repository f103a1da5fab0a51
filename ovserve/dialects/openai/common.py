"""What OpenAI's chat and text-completion bodies share: the response-model base, the usage object.

Response models are written with every always-present field required (``object`` included) and
every optional key defaulting to ``None``; :meth:`Body.encode` leaves out what was never set, so a
key is absent rather than null exactly where OpenAI leaves it out (a delta's ``role``, a usage's
``prompt_tokens_details``), and null where OpenAI sends null (``finish_reason``, ``logprobs``).
``/openapi.json`` describes the success bodies from these models.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ovserve.core.job import Usage as CoreUsage
from ovserve.errors import OvserveError


class Body(BaseModel):
    """A response body or a piece of one."""

    model_config = ConfigDict(extra="forbid")

    def encode(self) -> str:
        """The JSON text sent to the client."""
        return self.model_dump_json(exclude_unset=True, by_alias=True)


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
