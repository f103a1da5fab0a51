"""The bodies ``/v3/responses`` answers with: the ``response`` object (``POST`` and ``GET``), its
output items, the events of a stream, and ``response.deleted`` (see :mod:`ovserve.dialects.body`
for the conventions).

The names follow OpenAI's OpenAPI document (``Response``, ``OutputMessage``,
``ResponseTextDeltaEvent``...) where they do not clash with the request's own models
(:mod:`ovserve.dialects.openai.responses.request`), so the two documents read side by side.

The request settings a response echoes (``reasoning``, ``text.format``) are echoed as the client
sent them, fields this server does not know included: their models allow extra fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from ovserve.core.conversation import ReasoningEffort
from ovserve.core.job import Usage as CoreUsage
from ovserve.dialects.body import Body, JsonObject

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]
# OpenAI's codes of a failed response; any other failure reads server_error.
FailureCode = Literal["server_error", "rate_limit_exceeded", "invalid_prompt", "invalid_image", "image_too_large"]

# -- output items ---------------------------------------------------------------------------------


class OutputTextContent(Body):
    type: Literal["output_text"]
    text: str
    annotations: tuple[()]  # always empty: no file or web citations here
    logprobs: tuple[()]  # always empty: this endpoint offers no logprobs


class ReasoningTextContent(Body):
    type: Literal["reasoning_text"]
    text: str


class OutputMessage(Body):
    """The assistant's text: one ``output_text`` part."""

    id: str
    type: Literal["message"]
    status: ItemStatus
    role: Literal["assistant"]
    content: list[OutputTextContent]


class OutputReasoning(Body):
    """What the reasoning parser took out of the text: one ``reasoning_text`` part, no summary."""

    id: str
    type: Literal["reasoning"]
    status: ItemStatus
    summary: tuple[()]
    content: list[ReasoningTextContent]


class OutputFunctionCall(Body):
    id: str
    type: Literal["function_call"]
    status: ItemStatus
    call_id: str
    name: str
    arguments: str


OutputItem = Annotated[OutputMessage | OutputReasoning | OutputFunctionCall, Field(discriminator="type")]
ContentPart = Annotated[OutputTextContent | ReasoningTextContent, Field(discriminator="type")]

# -- the response object --------------------------------------------------------------------------


class InputTokensDetails(Body):
    # What the engine's prefix-cache model counted; 0 when unknown (a VLM's prompts): the field is
    # required.
    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(Body):
    # 0: the engine does not say how many generated tokens were reasoning (docs/responses-fields.md).
    reasoning_tokens: int


class ResponseUsage(Body):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    @classmethod
    def of(cls, usage: CoreUsage) -> ResponseUsage:
        return cls(
            input_tokens=usage.prompt_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=usage.cached_tokens or 0, cache_write_tokens=0),
            output_tokens=usage.completion_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            total_tokens=usage.total_tokens,
        )


class ResponseError(Body):
    code: FailureCode
    message: str


class IncompleteDetails(Body):
    reason: Literal["max_output_tokens"]


class _Echo(Body):
    """A request setting echoed as the client sent it."""

    model_config = ConfigDict(extra="allow")


class ResponseReasoning(_Echo):
    effort: ReasoningEffort | None
    summary: Literal["auto", "concise", "detailed"] | None


class TextFormatText(_Echo):
    type: Literal["text"]


class TextFormatJsonObject(_Echo):
    type: Literal["json_object"]


class TextFormatJsonSchema(_Echo):
    type: Literal["json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: JsonObject = Field(alias="schema")
    strict: bool | None = None


class TextFormatRegex(_Echo):
    """OVMS's extension: text matching ``pattern`` in full."""

    type: Literal["regex"]
    pattern: str


class TextFormatConstString(_Echo):
    """OVMS's extension: exactly ``value``."""

    type: Literal["const_string"]
    value: str


TextFormat = Annotated[
    TextFormatText | TextFormatJsonObject | TextFormatJsonSchema | TextFormatRegex | TextFormatConstString,
    Field(discriminator="type"),
]


class ResponseText(Body):
    format: TextFormat


class ResponseFunctionTool(Body):
    type: Literal["function"]
    name: str
    description: str | None
    parameters: JsonObject | None
    strict: bool | None


class ResponseToolChoice(Body):
    """A forced call of one function."""

    type: Literal["function"]
    name: str


class Response(Body):
    """A model response: what ``POST /v3/responses`` answers (or its stream's last event carries)
    and ``GET /v3/responses/{id}`` reads back."""

    id: str
    object: Literal["response"]
    created_at: int
    status: ResponseStatus
    completed_at: int | None
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: ResponseReasoning | None
    store: bool
    temperature: float
    text: ResponseText
    tool_choice: Literal["none", "auto", "required"] | ResponseToolChoice
    tools: list[ResponseFunctionTool]
    top_p: float
    truncation: Literal["disabled"]
    metadata: dict[str, str]
    # The schema has no null usage: left out until it is known (a stream's first events, a failure).
    usage: ResponseUsage | None = None


class ResponseDeleted(Body):
    id: str
    object: Literal["response.deleted"]
    deleted: Literal[True]


# -- stream events --------------------------------------------------------------------------------
# Each event is numbered in the stream (sequence_number, from 0). The fields are in the order the
# events have always been written in.


class ResponseCreatedEvent(Body):
    type: Literal["response.created"]
    sequence_number: int
    response: Response


class ResponseInProgressEvent(Body):
    type: Literal["response.in_progress"]
    sequence_number: int
    response: Response


class ResponseCompletedEvent(Body):
    type: Literal["response.completed"]
    sequence_number: int
    response: Response


class ResponseIncompleteEvent(Body):
    """The last event when ``max_output_tokens`` (or the context) ran out."""

    type: Literal["response.incomplete"]
    sequence_number: int
    response: Response


class ResponseFailedEvent(Body):
    """The last event of a stream that failed after it started (the engine died, the deadline)."""

    type: Literal["response.failed"]
    sequence_number: int
    response: Response


class ResponseOutputItemAddedEvent(Body):
    type: Literal["response.output_item.added"]
    sequence_number: int
    output_index: int
    item: OutputItem


class ResponseOutputItemDoneEvent(Body):
    type: Literal["response.output_item.done"]
    sequence_number: int
    output_index: int
    item: OutputItem


class ResponseContentPartAddedEvent(Body):
    type: Literal["response.content_part.added"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: ContentPart


class ResponseContentPartDoneEvent(Body):
    type: Literal["response.content_part.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: ContentPart


class ResponseTextDeltaEvent(Body):
    type: Literal["response.output_text.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: tuple[()]


class ResponseTextDoneEvent(Body):
    type: Literal["response.output_text.done"]
    sequence_number: int
    text: str
    logprobs: tuple[()]
    item_id: str
    output_index: int
    content_index: int


class ResponseReasoningTextDeltaEvent(Body):
    type: Literal["response.reasoning_text.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ResponseReasoningTextDoneEvent(Body):
    type: Literal["response.reasoning_text.done"]
    sequence_number: int
    text: str
    item_id: str
    output_index: int
    content_index: int


class ResponseFunctionCallArgumentsDeltaEvent(Body):
    """A call's arguments, sent whole: the parser emits a call once it is complete."""

    type: Literal["response.function_call_arguments.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class ResponseFunctionCallArgumentsDoneEvent(Body):
    type: Literal["response.function_call_arguments.done"]
    sequence_number: int
    item_id: str
    output_index: int
    name: str
    arguments: str


ResponseStreamEvent = Annotated[
    ResponseCreatedEvent
    | ResponseInProgressEvent
    | ResponseOutputItemAddedEvent
    | ResponseContentPartAddedEvent
    | ResponseTextDeltaEvent
    | ResponseTextDoneEvent
    | ResponseReasoningTextDeltaEvent
    | ResponseReasoningTextDoneEvent
    | ResponseFunctionCallArgumentsDeltaEvent
    | ResponseFunctionCallArgumentsDoneEvent
    | ResponseContentPartDoneEvent
    | ResponseOutputItemDoneEvent
    | ResponseCompletedEvent
    | ResponseIncompleteEvent
    | ResponseFailedEvent,
    Field(discriminator="type"),
]
