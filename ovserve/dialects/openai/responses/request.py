"""Pydantic models of ``POST /v3/responses``: OpenAI's Responses API request body.

No engine imports here, as in :mod:`ovserve.dialects.openai.request`. The request inherits the whole sampling
surface of :class:`~ovserve.dialects.openai.request.SamplingRequest` (the OVMS extensions ``top_k``,
``repetition_penalty``, ``stop``... in the body, as for chat); the Responses fields are modelled
here and adapted onto the generation core by ``ovserve.dialects.openai.responses.adapter``.

Every union is discriminated (by ``type`` for items and content parts, by JSON type for
``input``, ``content`` and ``output``), so a bad item gets one error naming its JSON path rather
than one complaint per union member. The tags are written ``<name>`` (:func:`ovserve.errors.tag`):
pydantic puts them in an error's location, and :mod:`ovserve.errors` takes them out again.
Built-in tools (web search, file search, ...) are refused before validation with their own message
(:func:`builtin_tool_refusal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from ovserve.core.conversation import JsonSchemaFormat, OutputFormat, ReasoningEffort
from ovserve.dialects.openai.chat.request import FunctionDefinition
from ovserve.dialects.openai.request import Lenient, OutputFormats, SamplingRequest
from ovserve.dialects.tagged import ByType, StrOrList
from ovserve.json_types import JsonObject

# OpenAI: at most 16 metadata pairs, keys up to 64 characters, values up to 512.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512

ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")
PART_TYPES = ("input_text", "input_image", "output_text", "refusal")


# -- content parts ---------------------------------------------------------------------------


class InputText(Lenient):
    type: Literal["input_text"]
    text: str


class InputImage(Lenient):
    type: Literal["input_image"]
    # A data URL, an allowed http(s) URL or an allowed local path (the chat media policy).
    # OpenAI's file_id (an uploaded file) has no equivalent here.
    image_url: str
    detail: Literal["low", "high", "auto", "original"] | None = None


class OutputText(Lenient):
    type: Literal["output_text"]
    text: str


class Refusal(Lenient):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[InputText | InputImage | OutputText | Refusal, ByType()]
Content = Annotated[str | list[ContentPart], StrOrList()]


def part_text(part: InputText | InputImage | OutputText | Refusal) -> str | None:
    """The text of a text-like part; None for an image."""
    if isinstance(part, Refusal):
        return part.refusal
    if isinstance(part, InputImage):
        return None
    return part.text


# -- input items -----------------------------------------------------------------------------


class MessageItem(Lenient):
    """A message; ``type`` may be left out (OpenAI's "easy input message")."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: Content


class FunctionCallItem(Lenient):
    """A call the model made (echoed back by the client, or from a stored response)."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str


class FunctionCallOutputItem(Lenient):
    """The client's result of a function call."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: Content

    def output_text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(text for part in self.output if (text := part_text(part)) is not None)


class SummaryText(Lenient):
    type: Literal["summary_text"]
    text: str


class ReasoningText(Lenient):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(Lenient):
    """Reasoning the model wrote; its text goes back into the template as ``reasoning_content``."""

    type: Literal["reasoning"]
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None

    def text(self) -> str:
        return "".join(part.text for part in self.content or [])


# A message when its type is left out (MessageItem's default).
InputItem = Annotated[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem, ByType()]
Input = Annotated[str | list[InputItem], StrOrList()]


# -- tools, text format, reasoning -----------------------------------------------------------


class FunctionTool(FunctionDefinition):
    """Chat's function definition, flat: ``{"type": "function", "name": ...}``."""

    type: Literal["function"]


class FunctionToolChoice(Lenient):
    type: Literal["function"]
    name: str


class JSONSchemaTextFormat(Lenient):
    """The Responses API's json_schema format: the chat format's ``json_schema`` object, flattened."""

    type: Literal["json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: JsonObject = Field(default_factory=dict, alias="schema")
    strict: bool | None = None

    def output_format(self, origin: str) -> OutputFormat:
        return JsonSchemaFormat(self.schema_, origin, f"{origin}.schema")


TextFormatConfig = OutputFormats[JSONSchemaTextFormat]


class TextParam(Lenient):
    format: TextFormatConfig | None = None
    # OpenAI's length hint for its own models; the output is the model's either way.
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningParam(Lenient):
    """Echoed. ``effort`` reaches the model as chat template variables, as chat's
    ``reasoning_effort`` does (``ovserve.core.conversation.Conversation.template_variables``);
    ``summary`` changes nothing: reasoning the parser finds is returned whole."""

    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


# -- the request -----------------------------------------------------------------------------


class ResponsesRequest(SamplingRequest):
    """The body of ``POST /v3/responses``."""

    # Before input and tool_choice: their validators read it.
    previous_response_id: str | None = Field(default=None, min_length=1)
    tools: list[FunctionTool] | None = None
    input: Input
    instructions: str | None = None
    # OpenAI's default: stored, so a later request can continue from it.
    store: bool = True
    metadata: dict[str, str] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    output_limit_field: ClassVar[str] = "max_output_tokens"  # chat's max_tokens is accepted too
    tool_choice: Literal["none", "auto", "required"] | FunctionToolChoice | None = None
    parallel_tool_calls: bool = True
    text: TextParam | None = None
    reasoning: ReasoningParam | None = None
    # What extra output data to include (logprobs, encrypted reasoning...): none of it exists here;
    # accepted so clients that always send it (Codex) work, and logged.
    include: list[str] | None = None
    truncation: Literal["disabled", "auto"] | None = None
    background: bool | None = None
    chat_template_kwargs: JsonObject | None = None

    @field_validator("input")
    @classmethod
    def _some_input(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, list) and not value and info.data.get("previous_response_id") is None:
            raise ValueError("empty; send at least one item (or continue a previous_response_id)")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice_needs_tools(cls, value: Any, info: ValidationInfo) -> Any:
        tools = info.data.get("tools") or []
        if value not in (None, "none", "auto") and not tools:
            raise ValueError("forcing a call needs 'tools'")
        if isinstance(value, FunctionToolChoice) and value.name not in (names := [tool.name for tool in tools]):
            raise ValueError(f"names '{value.name}', which is not in tools {names}")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > MAX_METADATA_PAIRS:
            raise ValueError(f"at most {MAX_METADATA_PAIRS} pairs, got {len(value)}")
        for key, item in value.items():
            if len(key) > MAX_METADATA_KEY or len(item) > MAX_METADATA_VALUE:
                raise ValueError(f"keys are at most {MAX_METADATA_KEY} characters, values {MAX_METADATA_VALUE}")
        return value

    @field_validator("truncation")
    @classmethod
    def _no_truncation(cls, value: str | None) -> str | None:
        if value == "auto":
            raise ValueError("'auto' is not supported: a prompt longer than the context is refused, never truncated")
        return value

    @field_validator("background")
    @classmethod
    def _no_background(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("background responses are not supported; stream instead")
        return value

    @field_validator("n")
    @classmethod
    def _one_output(cls, value: int) -> int:
        if value != 1:
            raise ValueError("a response has one output; n must be 1")
        return value

    @property
    def items(self) -> list[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem]:
        """``input`` as items: a string is one user message."""
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return list(self.input)

    @property
    def text_format(self) -> TextFormatConfig | None:
        return self.text.format if self.text is not None else None

    def output_format(self) -> OutputFormat | None:
        """The core's view of ``text.format``."""
        return None if self.text_format is None else self.text_format.output_format("text.format")


def builtin_tool_refusal(tools: object) -> tuple[str, str] | None:
    """(message, param) for the first tool that is not a function tool, read from the raw body.

    OpenAI's built-in tools (web_search, file_search, code_interpreter, computer_use, mcp,
    image_generation...) run on OpenAI's side; a local server cannot run them.
    """
    if not isinstance(tools, Sequence) or isinstance(tools, str):
        return None
    for position, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind != "function":
            return (
                f"tools.{position}: the built-in tool '{kind}' is not supported; ovserve serves function tools only",
                f"tools.{position}.type",
            )
    return None
