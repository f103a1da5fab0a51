"""The bodies ``POST /v3/chat/completions`` answers with: a ``chat.completion`` or a stream of
``chat.completion.chunk`` objects (see :mod:`ovserve.dialects.body` for the conventions)."""

from __future__ import annotations

from typing import Literal

from ovserve.dialects.body import Body
from ovserve.dialects.openai.common import ErrorBody, Usage


class TokenLogprob(Body):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TokenLogprob]  # always empty: the engine gives only the chosen token


class ChoiceLogprobs(Body):
    content: list[TokenLogprob]
    refusal: None


class CalledFunction(Body):
    name: str
    arguments: str


class MessageToolCall(Body):
    id: str
    type: Literal["function"]
    function: CalledFunction


class AssistantMessage(Body):
    role: Literal["assistant"]
    content: str | None
    refusal: None
    reasoning_content: str | None = None  # OVMS, vLLM, DeepSeek: the reasoning parser's output
    tool_calls: list[MessageToolCall] | None = None


class Choice(Body):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"]


class ChatCompletion(Body):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class FunctionCallDelta(Body):
    name: str | None = None
    arguments: str


class ToolCallDelta(Body):
    """OpenAI's streaming shape: id, type and name first, then the arguments."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class Delta(Body):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(Body):
    index: int
    delta: Delta
    logprobs: ChoiceLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


class ChatCompletionChunk(Body):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    # With stream_options.include_usage: null in every chunk but the last, which has no choices.
    usage: Usage | None = None


# The data of each event of a stream (then ``data: [DONE]``): chunks, or an error once it has failed.
ChatCompletionStreamEvent = ChatCompletionChunk | ErrorBody
