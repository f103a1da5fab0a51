"""The bodies of Ollama's ``/api/*`` requests, as pydantic models.

Ollama decodes bodies with Go's ``encoding/json``: unknown fields are ignored, a value of the wrong
type is a 400. The models here do the same (``extra="allow"``, strict types; ints are floats) and
name what they ignored (:meth:`OllamaRequest.unknown_fields`) so the route can log it. ``null`` on a
top-level field means "not sent" (Go leaves the field as it was), on every body.

The constraints live in the field types where JSON Schema can state them (``keep_alive``'s
:data:`DURATION_PATTERN`, non-empty ``input`` and ``stop`` strings), so ``/openapi.json``, generated
from these models, says them too (``ovserve.api.openapi``).

``options`` carries the sampling values (:class:`Options`); the load-time options Ollama has
(``num_ctx``, ``num_thread``, ``num_gpu``...) are validated and ignored: an OpenVINO engine is
sized by its graph, not per request. ``keep_alive`` is validated (:func:`keep_alive_seconds`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ovserve.json_types import JsonObject, without_nulls

# Ollama's seed is an int; -1 (its default) means "random".
MAX_SEED = 2**32 - 1
# Go's time.ParseDuration: a signed sequence of decimal numbers, each with a unit ("1h30m", "-1.5s");
# or, ovserve's extension, a number of seconds in a string ("300"). ASCII digits only: Python's
# float() would read "٣" and " 5" too, which JSON Schema's pattern (and Go) would not.
_DECIMAL = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_UNIT = "ns|us|µs|ms|s|m|h"
DURATION_PATTERN = rf"^[-+]?(?:{_DECIMAL}(?:[eE][-+]?[0-9]+)?|(?:{_DECIMAL}(?:{_UNIT}))+)$"
_DURATION = re.compile(DURATION_PATTERN)
_DURATION_PART = re.compile(rf"({_DECIMAL})({_UNIT})")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# Go's longest duration (2**63 - 1 ns, about 292 years): Ollama cannot hold a model longer, and a
# longer wait (1e300 s, an overflow to infinity) could not be shown as a date in /api/ps. Longer
# means what it would in Ollama's hands: forever, as -1.
LONGEST_KEEP_ALIVE_S = (2**63 - 1) / 1e9
FOREVER = -1.0


class Lenient(BaseModel):
    # strict: "10" is not 10 and true is not 1 (Go's decoder refuses both); ints are still floats.
    model_config = ConfigDict(extra="allow", strict=True)


NonEmptyText = Annotated[str, Field(min_length=1)]


class RequestBody(Lenient):
    """A whole request body: ``null`` on a field means "not sent", as Go's decoder reads it."""

    @model_validator(mode="before")
    @classmethod
    def _null_means_not_sent(cls, data: Any) -> Any:
        return without_nulls(data)


def parse_duration(text: str) -> float:
    """Seconds of a Go duration (``"5m"``, ``"1h30m"``, ``"-1s"``) or of a number in a string
    (:data:`DURATION_PATTERN`); ValueError for anything else."""
    if _DURATION.fullmatch(text) is None:
        raise ValueError(f"not a duration: {text!r} (use e.g. '5m', '30s', '1h', or a number of seconds)")
    sign, unsigned = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    parts = _DURATION_PART.findall(unsigned)
    if not parts:  # a number of seconds
        return sign * float(unsigned)
    return sign * sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def keep_alive_seconds(value: float | str | None) -> float | None:
    """``keep_alive`` in seconds: None when not sent, negative for "keep loaded forever" (which
    anything from :data:`LONGEST_KEEP_ALIVE_S` on is)."""
    if value is None:
        return None
    seconds = parse_duration(value) if isinstance(value, str) else float(value)
    return FOREVER if seconds >= LONGEST_KEEP_ALIVE_S else seconds


class Options(Lenient):
    """Ollama's ``options``: the runtime sampling values the core honours, and the load-time ones
    it accepts and ignores (listed in docs/ollama.md)."""

    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    # MindIE's lower bound: the smallest top_p still positive as float32.
    top_p: float | None = Field(default=None, ge=1e-6, le=1.0)
    # 0 (llama.cpp) means "no top-k filter".
    top_k: int | None = Field(default=None, ge=0, le=2**31 - 1)
    min_p: float | None = Field(default=None, ge=0.0, lt=1.0)
    # -1: until the model stops; -2: until the context is full (both "no limit but the context").
    num_predict: int | None = Field(default=None, ge=-2)
    stop: list[NonEmptyText] | None = None
    seed: int | None = Field(default=None, ge=-1, le=MAX_SEED)
    repeat_penalty: float | None = Field(default=None, ge=1e-6)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    # Load-time options: validated, ignored (the graph sizes the engine).
    num_ctx: int | None = Field(default=None, ge=1)
    num_thread: int | None = Field(default=None, ge=0)
    num_gpu: int | None = Field(default=None, ge=-1)
    num_batch: int | None = Field(default=None, ge=1)
    num_keep: int | None = Field(default=None, ge=-1)
    # ovserve's extension, here too: the ollama client passes options through as they are.
    tool_choice: str | None = None

    @field_validator("num_predict")
    @classmethod
    def _not_zero(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("num_predict must be positive, or -1 (until the model stops) or -2 (fill the context)")
        return value


class FunctionCall(Lenient):
    name: str = Field(min_length=1)
    # Ollama sends arguments as an object (OpenAI: a JSON string).
    arguments: JsonObject = Field(default_factory=dict)


class ToolCall(Lenient):
    id: str | None = None
    function: FunctionCall


class Message(Lenient):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    thinking: str | None = None
    # Base64 image data (Ollama's images: no data: prefix).
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class FunctionDefinition(Lenient):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: JsonObject | None = None


class ToolDefinition(Lenient):
    type: Literal["function"] = "function"
    function: FunctionDefinition


# "json" or a JSON schema; "" means none (Ollama's client sends it so).
Format = Literal["", "json"] | JsonObject
Think = bool | Literal["low", "medium", "high"]


class OllamaRequest(RequestBody):
    """What every Ollama body that names a model to run shares."""

    model: str = Field(min_length=1)
    keep_alive: float | Annotated[str, Field(pattern=DURATION_PATTERN)] | None = None

    @field_validator("keep_alive", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        # Before the pattern: this names the formats, where the pattern's own error would quote it.
        if isinstance(value, str):
            parse_duration(value)
        return value

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class GenerationRequest(OllamaRequest):
    """What /api/chat and /api/generate share."""

    # Ollama streams unless told not to.
    stream: bool = True
    format: Format | None = None
    options: Options = Field(default_factory=Options)
    think: Think | None = None
    # ovserve's extension (Ollama has no tool_choice): "auto", "none", "required" or a tool's name.
    tool_choice: str | None = None


class ChatRequest(GenerationRequest):
    """``POST /api/chat``; no messages: load the model and answer ``done_reason: "load"``."""

    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolDefinition] = Field(default_factory=list)

    @property
    def forced(self) -> str | None:
        """``tool_choice`` from the body, else from ``options`` (where the ollama client can send it)."""
        return self.tool_choice if self.tool_choice is not None else self.options.tool_choice

    @model_validator(mode="after")
    def _tool_choice(self) -> ChatRequest:
        choice = self.forced
        if choice is None or choice in ("auto", "none"):
            return self
        if not self.tools:
            raise ValueError("'tool_choice' forcing a call needs 'tools'")
        names = [tool.function.name for tool in self.tools]
        if choice != "required" and choice not in names:
            raise ValueError(f"'tool_choice' names '{choice}', which is not in tools {names}")
        return self


class GenerateRequest(GenerationRequest):
    """``POST /api/generate``; no prompt: load the model and answer ``done_reason: "load"``."""

    prompt: str = ""
    system: str | None = None
    suffix: str | None = None
    template: str | None = None
    raw: bool = False
    images: list[str] | None = None
    context: list[int] | None = None

    @model_validator(mode="after")
    def _supported(self) -> GenerateRequest:
        """Fields that cannot be honoured here: a 400 each, never silently dropped, whether the
        request generates or only loads the model (a body is refused for what it is)."""
        if self.template:
            raise ValueError(
                "'template' (a Go template) is not supported: the model's own chat template renders the prompt; "
                "send 'raw': true with a prompt you formatted yourself"
            )
        if self.suffix:
            raise ValueError(f"model '{self.model}' does not support insert ('suffix')")
        if self.context:
            raise ValueError(
                "'context' (token ids of an earlier answer) is not supported: send the conversation to /api/chat"
            )
        if self.raw:
            # raw prompts skip the template (think's switches) and the chat path (its grammar): no silent drop.
            for name, value in (("images", self.images), ("format", self.format), ("think", self.think)):
                if value not in (None, "", [], False):
                    raise ValueError(f"'{name}' needs the chat template: send it without 'raw'")
        return self


class EmbedRequest(OllamaRequest):
    """``POST /api/embed``."""

    input: NonEmptyText | Annotated[list[NonEmptyText], Field(min_length=1)]
    truncate: bool = True
    dimensions: int | None = Field(default=None, ge=1)
    options: Options = Field(default_factory=Options)

    @field_validator("input", mode="before")
    @classmethod
    def _some_input(cls, value: Any) -> Any:
        # The union's own errors name a member ("input.constrained-str"); say what is allowed instead.
        if isinstance(value, str):
            if not value:
                raise ValueError("must not be an empty string")
            return value
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            raise ValueError("must be a non-empty string or a non-empty list of strings")
        if "" in value:
            raise ValueError(f"item {value.index('')} is an empty string")
        return value

    @property
    def inputs(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class EmbeddingsRequest(OllamaRequest):
    """``POST /api/embeddings``: Ollama's older, one-prompt embeddings endpoint."""

    prompt: str = Field(min_length=1)
    options: Options = Field(default_factory=Options)


class ShowRequest(RequestBody):
    """``POST /api/show``; older clients send ``name`` (read when ``model`` is not sent)."""

    model: str | None = Field(default=None, min_length=1)
    name: str | None = Field(default=None, min_length=1)
    verbose: bool = False

    @model_validator(mode="after")
    def _named(self) -> ShowRequest:
        if self.model is None and self.name is None:
            raise ValueError("'model' is required")
        return self

    @property
    def model_name(self) -> str:
        return self.model or self.name or ""
