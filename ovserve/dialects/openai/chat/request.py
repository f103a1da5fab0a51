"""The body of ``POST /v3/chat/completions`` (see :mod:`ovserve.dialects.openai.request` for the
conventions every OpenAI request model follows)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from ovserve.core.conversation import JsonSchemaFormat, OutputFormat, ReasoningEffort, Tool
from ovserve.dialects.openai.request import Lenient, OutputFormats, SamplingRequest
from ovserve.json_types import JsonObject


class TextPart(Lenient):
    type: Literal["text"]
    text: str


class ImageURL(Lenient):
    url: str
    detail: str | None = None


class ImagePart(Lenient):
    type: Literal["image_url"]
    # MindIE sends the URL as a plain string; OpenAI wraps it in {"url": ...}.
    image_url: ImageURL | str


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class FunctionCall(Lenient):
    name: str
    arguments: str


class ToolCall(Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Lenient):
    # "developer" is OpenAI's newer name for "system"; it is rendered as "system".
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a '{self.role}' message needs 'content'")
        return self

    def text_parts(self) -> list[str]:
        if self.content is None:
            return []
        if isinstance(self.content, str):
            return [self.content]
        return [part.text for part in self.content if isinstance(part, TextPart)]

    def image_parts(self) -> list[ImagePart]:
        if not isinstance(self.content, list):
            return []
        return [part for part in self.content if isinstance(part, ImagePart)]


class FunctionDefinition(Lenient):
    # OpenAI: a-z, A-Z, 0-9, underscores and dashes, at most 64 characters.
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: JsonObject | None = None
    strict: bool | None = None

    def tool(self, origin: str, parameters_origin: str) -> Tool:
        """The core's view of this function, offered at ``origin`` (chat's ``tools.N``, Responses'
        too), its parameter schema at ``parameters_origin``."""
        return Tool(self.name, origin, self.description, self.parameters, self.strict, parameters_origin)


class ToolDefinition(Lenient):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Lenient):
    name: str


class NamedToolChoice(Lenient):
    type: Literal["function"]
    function: NamedFunction


class JSONSchemaSpec(Lenient):
    # OpenAI requires a name; ovserve never did (the name only labels the schema for the model).
    name: str | None = None
    description: str | None = None
    # No schema (or {}) admits any JSON value. ``schema_``: "schema" is a BaseModel method.
    schema_: JsonObject = Field(default_factory=dict, alias="schema")
    # Every schema is enforced (or refused) whatever strict says: see ovserve.core.guided.
    strict: bool | None = None


class JSONSchemaFormat(Lenient):
    """OpenAI: JSON matching ``json_schema.schema``."""

    type: Literal["json_schema"]
    json_schema: JSONSchemaSpec

    def output_format(self, origin: str) -> OutputFormat:
        return JsonSchemaFormat(self.json_schema.schema_, origin, f"{origin}.json_schema.schema")


ResponseFormat = OutputFormats[JSONSchemaFormat]


class ChatCompletionRequest(SamplingRequest):
    """The body of ``POST /v3/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    output_limit_field: ClassVar[str] = "max_completion_tokens"  # OpenAI's newer name wins
    # Only the chosen token's logprob exists (the engine gives no alternatives); top_logprobs > 0
    # is refused by the field policy.
    logprobs: bool = False
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    # False: at most one tool call is returned (and a forced call is exactly one).
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    chat_template_kwargs: JsonObject | None = None
    # OpenAI's reasoning switch: reaches the model as chat template variables
    # (ovserve.core.conversation.Conversation.template_variables).
    reasoning_effort: ReasoningEffort | None = None

    @model_validator(mode="after")
    def _tool_choice_needs_tools(self) -> ChatCompletionRequest:
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("'tool_choice' forcing a call needs 'tools'")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = [tool.function.name for tool in self.tools or []]
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice names '{self.tool_choice.function.name}', which is not in tools {names}")
        return self

    def offered_tools(self) -> list[ToolDefinition]:
        """The tools the model is offered: none for tool_choice none, only the named one if named."""
        if not self.tools or self.tool_choice == "none":
            return []
        if isinstance(self.tool_choice, NamedToolChoice):
            return [tool for tool in self.tools if tool.function.name == self.tool_choice.function.name]
        return list(self.tools)

    @property
    def forces_tool_call(self) -> bool:
        return self.tool_choice == "required" or isinstance(self.tool_choice, NamedToolChoice)

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs

    def output_format(self) -> OutputFormat | None:
        """The core's view of ``response_format``."""
        return None if self.response_format is None else self.response_format.output_format("response_format")
