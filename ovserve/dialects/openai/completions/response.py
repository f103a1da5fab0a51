"""The bodies ``POST /v3/completions`` answers with: a ``text_completion`` object, or a stream of
them (see :mod:`ovserve.dialects.body` for the conventions)."""

from __future__ import annotations

from typing import Literal

from ovserve.dialects.body import Body
from ovserve.dialects.openai.common import ErrorBody, Usage


class CompletionLogprobs(Body):
    """The legacy logprobs shape: ``top_logprobs`` holds only the chosen token (all the engine gives)."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(Body):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


class Completion(Body):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    # Always in a unary answer; in a stream only with stream_options.include_usage (null in every
    # chunk but the last, which has no choices).
    usage: Usage | None = None


# The data of each event of a stream (then ``data: [DONE]``): chunks, or an error once it has failed.
CompletionStreamEvent = Completion | ErrorBody
