"""Pydantic models of the chat-completions request (OpenAI + OVMS extensions).

No engine imports here: this module only says what a valid request looks like. Unknown fields are
accepted (clients of other servers send their own extras) and reported by
:meth:`ChatCompletionRequest.unknown_fields` so the route can log what it ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# OVMS documents "up to 4 sequences" for stop, as OpenAI does.
MAX_STOP_SEQUENCES = 4
# OVMS documents the seed range as [0, 4294967295].
MAX_SEED = 2**32 - 1


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextPart(_Lenient):
    type: Literal["text"]
    text: str


class ImageURL(_Lenient):
    url: str
    detail: str | None = None


class ImagePart(_Lenient):
    type: Literal["image_url"]
    # MindIE sends the URL as a plain string; OpenAI wraps it in {"url": ...}.
    image_url: ImageURL | str


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class FunctionCall(_Lenient):
    name: str
    arguments: str


class ToolCall(_Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Lenient):
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


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatCompletionRequest(_Lenient):
    """The body of ``POST /v3/chat/completions``.

    Sampling fields default to ``None``, meaning "not sent": the model's generation_config.json
    and then ovserve's built-in defaults fill them (see ``ovserve.generation_config``).
    """

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None

    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    # -1 (OVMS, vLLM) and 0 (llama.cpp) both mean "no top-k filter"; null means "not sent".
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, lt=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool = True
    n: int = Field(default=1, ge=1)
    best_of: int | None = Field(default=None, ge=1)
    length_penalty: float | None = None
    logprobs: bool = False
    # Speculative decoding (draft model) and prompt lookup; only valid on those pipelines.
    num_assistant_tokens: int | None = Field(default=None, ge=1)
    assistant_confidence_threshold: float | None = Field(default=None, gt=0.0, le=1.0)
    max_ngram_size: int | None = Field(default=None, ge=1)

    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences are allowed, got {len(stops)}")
        if any(stop == "" for stop in stops):
            raise ValueError("stop sequences must not be empty")
        return stops

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ChatCompletionRequest:
        if self.stream_options is not None and not self.stream:
            raise ValueError("'stream_options' is only allowed when 'stream' is true")
        if self.stream and self.include_stop_str_in_output is False:
            raise ValueError("'include_stop_str_in_output' cannot be false when 'stream' is true")
        if self.num_assistant_tokens is not None and self.assistant_confidence_threshold is not None:
            raise ValueError("'num_assistant_tokens' and 'assistant_confidence_threshold' exclude each other; send one")
        if self.best_of is not None and self.best_of < self.n:
            raise ValueError(f"'best_of' ({self.best_of}) must be greater than or equal to 'n' ({self.n})")
        return self

    @property
    def output_limit(self) -> int | None:
        """``max_completion_tokens`` is OpenAI's newer name; it wins over ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def stop_sequences(self) -> list[str]:
        return list(self.stop) if isinstance(self.stop, list) else []

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})
