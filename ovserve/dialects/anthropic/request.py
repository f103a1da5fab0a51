"""The bodies of ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` (Anthropic's Messages API).

Conventions, as for the OpenAI dialects: models are strict about types ("10" is not 10) and lenient
about names: an unknown field is kept (``extra="allow"``) and reported by
:meth:`PromptRequest.unknown_fields`, so clients that send newer options (Claude Code's
``context_management``, ``output_config``) are served; ``cache_control`` marks and block fields
this server has no use for (``citations``) are accepted and ignored. A ``null`` top-level option
means "not sent". Discriminated unions are written as their members (:mod:`ovserve.dialects.tagged`
tags them from the members' ``type``), so a validation error names the client's JSON path
(``messages.2.content.0.source.media_type``).

What pydantic cannot check alone is checked here too, with Anthropic's rules: a forced tool must
be offered, a thinking budget is at least 1,024 tokens and below ``max_tokens``, server tools
(``web_search_20250305``...) are refused by name. Rules between messages (roles, ``tool_result``
after its ``tool_use``) are the adapter's (:mod:`.adapter`), which builds the conversation.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ovserve.dialects.tagged import ByType, StrOrList
from ovserve.json_types import JsonObject, without_nulls

# Anthropic's image types (its Messages reference: "image/jpeg", "image/png", "image/gif", "image/webp").
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
# Anthropic: a thinking budget of at least 1,024 tokens.
MIN_THINKING_BUDGET = 1024
# The engine takes sampling integers as int32.
MAX_INT32 = 2**31 - 1
# Anthropic's limit on a tool name.
TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,128}$"


class Lenient(BaseModel):
    # strict: "10" is not 10 and true is not 1; ints are still floats.
    model_config = ConfigDict(extra="allow", strict=True)


# -- content blocks --------------------------------------------------------------------------


class TextBlockParam(Lenient):
    type: Literal["text"]
    text: str


class Base64ImageSource(Lenient):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str = Field(min_length=1)


class URLImageSource(Lenient):
    type: Literal["url"]
    url: str = Field(min_length=1)


ImageSource = Annotated[Base64ImageSource | URLImageSource, ByType()]


class ImageBlockParam(Lenient):
    type: Literal["image"]
    source: ImageSource

    @property
    def url(self) -> str:
        """What the media policy and loader read: a data URL for base64 data."""
        source = self.source
        if isinstance(source, Base64ImageSource):
            return f"data:{source.media_type};base64,{source.data}"
        return source.url


class ToolUseBlockParam(Lenient):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: JsonObject


ToolResultPart = Annotated[TextBlockParam | ImageBlockParam, ByType()]


class ToolResultBlockParam(Lenient):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Annotated[str | list[ToolResultPart], StrOrList()] | None = None
    is_error: bool | None = None


class ThinkingBlockParam(Lenient):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlockParam(Lenient):
    type: Literal["redacted_thinking"]
    data: str


ContentBlock = Annotated[
    TextBlockParam
    | ImageBlockParam
    | ToolUseBlockParam
    | ToolResultBlockParam
    | ThinkingBlockParam
    | RedactedThinkingBlockParam,
    ByType(),
]


class MessageParam(Lenient):
    # "system": Claude Code sends a system message inside messages (its mid-conversation-system beta).
    role: Literal["user", "assistant", "system"]
    content: Annotated[str | list[ContentBlock], StrOrList()]

    @property
    def blocks(self) -> list[Any]:
        return [TextBlockParam(type="text", text=self.content)] if isinstance(self.content, str) else list(self.content)


# The system prompt's blocks: text only (a discriminated union of one, so that another type is
# reported as "system.N.type").
SystemBlock = Annotated[TextBlockParam, ByType()]


# -- tools -----------------------------------------------------------------------------------


class InputSchema(Lenient):
    type: Literal["object"]


class ToolParam(Lenient):
    type: Literal["custom"] | None = None
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    input_schema: JsonObject

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, schema: JsonObject) -> JsonObject:
        InputSchema.model_validate(schema)  # Anthropic: the input is always an object
        return schema


class ServerToolParam(Lenient):
    """A tool Anthropic runs on its own servers (web search, code execution...): none run here."""

    type: str
    name: str | None = None

    @model_validator(mode="after")
    def _refused(self) -> ServerToolParam:
        raise ValueError(
            f"server tool '{self.type}'{f' ({self.name})' if self.name else ''} is not supported by this server; "
            "only custom tools (name, description, input_schema) are"
        )


# A custom tool (type "custom", or none) or, for any other type, a server tool (refused by name).
Tool = Annotated[ToolParam | ServerToolParam, ByType()]


class _Choice(Lenient):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAuto(_Choice):
    type: Literal["auto"]


class ToolChoiceAny(_Choice):
    type: Literal["any"]


class ToolChoiceTool(_Choice):
    type: Literal["tool"]
    name: str


class ToolChoiceNone(Lenient):
    type: Literal["none"]


ToolChoice = Annotated[ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, ByType()]


# -- thinking --------------------------------------------------------------------------------


class ThinkingConfigEnabled(Lenient):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=MIN_THINKING_BUDGET)


class ThinkingConfigAdaptive(Lenient):
    """The model decides how much to think (Claude Code's default): maps like ``enabled``."""

    type: Literal["adaptive"]


class ThinkingConfigDisabled(Lenient):
    type: Literal["disabled"]


Thinking = Annotated[ThinkingConfigEnabled | ThinkingConfigAdaptive | ThinkingConfigDisabled, ByType()]


class MetadataParam(Lenient):
    user_id: str | None = None


class JSONOutputFormatParam(Lenient):
    """Structured output: the answer is JSON matching ``schema`` (the engine's grammar enforces it)."""

    type: Literal["json_schema"]
    # ``schema_``: "schema" is a BaseModel method.
    schema_: JsonObject = Field(alias="schema")


OutputFormatParam = Annotated[JSONOutputFormatParam, ByType()]


class OutputConfigParam(Lenient):
    # Anthropic's effort levels; they reach the template as the core's reasoning effort.
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormatParam | None = None


# -- the bodies ------------------------------------------------------------------------------


class PromptRequest(Lenient):
    """What a prompt is made of: the body of ``count_tokens``, and the base of a messages request."""

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: Annotated[str | list[SystemBlock], StrOrList()] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfigParam | None = None

    @model_validator(mode="before")
    @classmethod
    def _null_means_not_sent(cls, data: Any) -> Any:
        return without_nulls(data)

    @model_validator(mode="after")
    def _forced_tool_is_offered(self) -> PromptRequest:
        names = [tool.name for tool in self.custom_tools]
        if isinstance(self.tool_choice, ToolChoiceAny | ToolChoiceTool) and not names:
            raise ValueError(f"tool_choice '{self.tool_choice.type}' needs 'tools'")
        if isinstance(self.tool_choice, ToolChoiceTool) and self.tool_choice.name not in names:
            raise ValueError(f"tool_choice names '{self.tool_choice.name}', which is not in tools {names}")
        return self

    @property
    def custom_tools(self) -> list[ToolParam]:
        return [tool for tool in self.tools or [] if isinstance(tool, ToolParam)]

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class MessagesRequest(PromptRequest):
    """The body of ``POST /v1/messages``."""

    max_tokens: int = Field(ge=1, le=MAX_INT32)
    stop_sequences: list[Annotated[str, Field(min_length=1)]] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    # The engine takes float32 and refuses 0: the smallest positive value keeps "the top token only".
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, le=MAX_INT32)
    metadata: MetadataParam | None = None

    @model_validator(mode="after")
    def _budget_below_max_tokens(self) -> MessagesRequest:
        if isinstance(self.thinking, ThinkingConfigEnabled) and self.thinking.budget_tokens >= self.max_tokens:
            raise ValueError(
                f"thinking.budget_tokens ({self.thinking.budget_tokens}) must be less than max_tokens "
                f"({self.max_tokens})"
            )
        return self
