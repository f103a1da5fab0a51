"""The protocol-neutral input of a chat generation: what every dialect's adapter builds from its
own validated request model, and all the generation core reads.

A :class:`Conversation` is messages made of typed parts (text, an image reference, a tool call,
reasoning; a tool result is a ``tool`` message), the tools offered, the tool choice, an output
format and the sampling fields. Every piece carries its *origin*: the JSON path, in the client's
own request, of the field it came from (``messages.2.content.1.image_url`` for chat,
``input.0.content.1`` for Responses). Whatever the core refuses later (an image it may not fetch,
a prompt too long, a schema it cannot compile) is raised once, with that path as ``param``; no
dialect translates another dialect's errors.

Reasoning effort (chat's ``reasoning_effort``, Responses' ``reasoning.effort``) reaches the model
through its chat template, the only switch an open model has: :meth:`Conversation.template_variables`
passes ``reasoning_effort`` (gpt-oss's harmony template writes ``Reasoning: low|medium|high``) and
``enable_thinking`` (Qwen3-style templates), unless the client's ``chat_template_kwargs`` set them.

Contract for adapters: build it from a request that validated, keep parts in the client's order
(image placeholders are numbered across the conversation in order), and give each piece the path
a client of that dialect would fix. A tool call's arguments are a JSON object: a dialect that sends
them as text builds the call with :meth:`ToolCall.from_text` (one reader, one fallback for text that
is not a JSON object, the same for every dialect).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ovserve.json_types import JsonObject
from ovserve.models.chat_template import TemplateMessage
from ovserve.parsers.calls import read_arguments


@dataclass(frozen=True, slots=True)
class Text:
    text: str
    origin: str


@dataclass(frozen=True, slots=True)
class Image:
    """An image the model should see: a data URL, an http(s) URL or a local path (the media
    policy decides whether it may be read)."""

    url: str
    origin: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the assistant made earlier in the conversation.

    ``arguments``: the JSON object the chat template gets, whatever the dialect.
    ``unreadable_arguments``: the client's text when it sent arguments as text that is not a JSON
    object; ``arguments`` is then the one fallback (:func:`~ovserve.parsers.calls.read_arguments`).
    """

    id: str | None
    name: str
    arguments: JsonObject
    origin: str
    unreadable_arguments: str | None = None

    @classmethod
    def from_text(cls, id: str | None, name: str, text: str, origin: str) -> ToolCall:
        """A call whose arguments came as text (OpenAI chat, Responses), read as every dialect reads it."""
        arguments, unreadable = read_arguments(text)
        return cls(id, name, arguments, origin, unreadable)


@dataclass(frozen=True, slots=True)
class Reasoning:
    """Reasoning the assistant wrote earlier (the template may show it, or drop it)."""

    text: str
    origin: str


Part = Text | Image | ToolCall | Reasoning
# OpenAI's ReasoningEffort enum, every value of it.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
# The effort a template is given: open models know low / medium / high (gpt-oss's harmony
# system message; OVMS's gpt-oss template also takes "none"); OpenAI's levels above high are
# high for them, the others are passed as sent.
_TEMPLATE_EFFORT: dict[ReasoningEffort, str] = {"xhigh": "high", "max": "high"}
# Efforts that ask for no (or next to no) reasoning: thinking switched off where a template can.
_NO_THINKING: frozenset[ReasoningEffort] = frozenset({"none", "minimal"})
Role = Literal["system", "user", "assistant", "tool"]


@dataclass(slots=True)
class Message:
    role: Role
    content_origin: str  # the message's content (messages.N.content; instructions; ...)
    parts: list[Part] = field(default_factory=list)
    name: str | None = None
    tool_call_id: str | None = None  # a tool message: the call it answers

    @property
    def images(self) -> list[Image]:
        return [part for part in self.parts if isinstance(part, Image)]

    @property
    def texts(self) -> list[str]:
        return [part.text for part in self.parts if isinstance(part, Text)]

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [part for part in self.parts if isinstance(part, ToolCall)]

    @property
    def reasoning(self) -> str:
        return "".join(part.text for part in self.parts if isinstance(part, Reasoning))


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call."""

    name: str
    origin: str  # the tool's path (tools.N)
    description: str | None = None
    parameters: JsonObject | None = None
    strict: bool | None = None
    parameters_origin: str = ""  # where its parameter schema sits (tools.N.function.parameters)

    def template_object(self) -> JsonObject:
        """The OpenAI chat shape chat templates expect (``tools`` of the HF template)."""
        function: JsonObject = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": self.strict,
        }
        return {"type": "function", "function": {key: value for key, value in function.items() if value is not None}}


@dataclass(frozen=True, slots=True)
class ForcedTool:
    """``tool_choice`` naming one function."""

    name: str


ToolChoice = Literal["none", "auto", "required"] | ForcedTool


@dataclass(frozen=True, slots=True)
class JsonSchemaFormat:
    schema: JsonObject
    origin: str  # the format (response_format / text.format)
    schema_origin: str  # the schema itself

    @classmethod
    def any_object(cls, origin: str) -> JsonSchemaFormat:
        """Any JSON object (OpenAI's ``json_object``, Ollama's ``"json"``): the schema of one."""
        return cls({"type": "object"}, origin, origin)


@dataclass(frozen=True, slots=True)
class RegexFormat:
    """Text matching ``pattern`` in full (OVMS's ``regex``; its ``const_string`` is the escaped string)."""

    pattern: str
    origin: str


OutputFormat = JsonSchemaFormat | RegexFormat


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampling:
    """The sampling fields of a request, ``None`` where not sent (the model's
    generation_config.json, then built-in defaults fill them: ``ovserve.core.generation_config``)."""

    max_tokens: int | None = None
    max_tokens_param: str = "max_tokens"  # the field the client set it with
    max_tokens_removed: bool = False  # sent as null: no limit but the context
    # Over what the context leaves (or max_tokens_limit): generate up to that instead of refusing
    # (Anthropic's clients send their own model's output limit, e.g. Claude Code's 32000).
    clamp_max_tokens: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    top_k_removed: bool = False  # sent as null: no top-k filter
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    length_penalty: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool = True
    n: int = 1
    best_of: int | None = None
    logprobs: bool = False
    stream: bool = False
    num_assistant_tokens: int | None = None
    assistant_confidence_threshold: float | None = None
    max_ngram_size: int | None = None


@dataclass(slots=True, kw_only=True)
class Conversation:
    """One chat generation's input, in no dialect's shape."""

    model: str
    messages: list[Message]
    sampling: Sampling
    prompt_origin: str  # what a prompt-level complaint names (messages / input)
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    tool_choice_origin: str = "tool_choice"
    parallel_tool_calls: bool = True
    output_format: OutputFormat | None = None
    template_kwargs: JsonObject | None = None  # the client's chat_template_kwargs
    reasoning_effort: ReasoningEffort | None = None
    # System messages after the conversation's start: kept in place where the model's template
    # renders them there, else joined to the leading system message (Anthropic: Claude Code sends
    # one mid-conversation). Off: they reach the template as sent.
    join_late_system: bool = False
    # Text the assistant's turn starts with (Anthropic's final assistant message, "prefill"): the
    # prompt ends with it and the output continues it.
    continuation: str = ""

    def template_variables(self) -> JsonObject | None:
        """What the chat template gets besides the messages and tools: the client's
        ``chat_template_kwargs``, plus the reasoning effort as the template switches that carry it
        (see the module docstring). The client's own kwargs win; a template that reads neither
        switch renders as without them."""
        if self.reasoning_effort is None:
            return self.template_kwargs
        variables: JsonObject = {
            "reasoning_effort": _TEMPLATE_EFFORT.get(self.reasoning_effort, self.reasoning_effort),
            "enable_thinking": self.reasoning_effort not in _NO_THINKING,
        }
        variables.update(self.template_kwargs or {})
        return variables

    @property
    def forces_tool_call(self) -> bool:
        return self.tool_choice == "required" or isinstance(self.tool_choice, ForcedTool)

    def offered_tools(self) -> list[Tool]:
        """The tools the model is offered: none for tool_choice none, only the named one if named."""
        if self.tool_choice == "none":
            return []
        if isinstance(self.tool_choice, ForcedTool):
            return [tool for tool in self.tools if tool.name == self.tool_choice.name]
        return list(self.tools)

    @property
    def images(self) -> list[Image]:
        return [image for message in self.messages for image in message.images]


def template_message(message: Message, content: str | None) -> TemplateMessage:
    """``message`` as HF chat templates read it (``content`` given: images become placeholders
    upstream). Tool-call arguments are the object (templates apply ``tojson`` themselves)."""
    rendered: TemplateMessage = {"role": message.role, "content": content}
    if message.name is not None:
        rendered["name"] = message.name
    if message.tool_call_id is not None:
        rendered["tool_call_id"] = message.tool_call_id
    reasoning = message.reasoning
    if reasoning:
        rendered["reasoning_content"] = reasoning
    calls = message.tool_calls
    if calls:
        rendered["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in calls
        ]
    return rendered
