"""The body of ``POST /v3/completions`` (legacy text completions, no chat template)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ovserve.dialects.openai.request import SamplingRequest


class CompletionRequest(SamplingRequest):
    """The body of ``POST /v3/completions`` (legacy text completions, no chat template)."""

    # A list gives one choice (or n) per prompt, in order. Token-id prompts are not accepted.
    prompt: str | Annotated[list[str], Field(min_length=1)]
    echo: bool = False
    # OpenAI: the number of most likely alternatives per token, plus the chosen one. The engine
    # gives only the chosen token, so only 0 is accepted (the field policy refuses more).
    logprobs: int | None = Field(default=None, ge=0, le=5)

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is not None
