"""Pydantic models of the request bodies: chat completions and legacy text completions.

No engine imports here: this module only says what a valid request looks like. Fields other
servers define (llama.cpp, vLLM, MindIE, Databricks...) and OpenAI fields ovserve cannot honour are
not modelled here: ``ovserve.api.field_policy`` maps, drops or refuses them before validation, from
one table. Unknown fields that survive that step are kept (``extra="allow"``) and reported by
:meth:`SamplingRequest.unknown_fields` so the route can log (or, on request, refuse) them.

``null`` means "not sent" for every field, as OpenAI's spec has it, except the limits
``max_tokens`` / ``max_completion_tokens`` / ``top_k``: there an explicit ``null`` means "no limit",
as Databricks and Azure AI Foundry document (see :data:`NULL_MEANS_NO_LIMIT`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# OVMS documents "up to 4 sequences" for stop, as OpenAI does.
MAX_STOP_SEQUENCES = 4
# OVMS documents the seed range as [0, 4294967295].
MAX_SEED = 2**32 - 1
# OpenAI's bound for n.
MAX_N = 128
# Token ids travel as int32 in MindIE's stop_token_ids.
MAX_TOKEN_ID = 2**31 - 1
MAX_TOP_K = 2**31 - 1
# The smallest top_p / repetition_penalty: strictly positive, and still positive as float32.
MIN_POSITIVE = 1e-6

# Limits for which an explicit null means "no limit" (Databricks: "null, which means no limit";
# Azure: max_tokens null "causes the model to use its max context length"). Omitting them means
# the model's default instead.
NULL_MEANS_NO_LIMIT = frozenset({"max_tokens", "max_completion_tokens", "top_k"})


class _Lenient(BaseModel):
    # strict: "10" is not 10 and true is not 1 (OpenAI and OVMS refuse both); ints are still floats.
    model_config = ConfigDict(extra="allow", strict=True)


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


TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]


class SamplingRequest(_Lenient):
    """What chat and text completions share: the model, streaming and the sampling surface.

    Sampling fields default to ``None``, meaning "not sent": the model's generation_config.json
    and then ovserve's built-in defaults fill them (see ``ovserve.generation_config``).
    """

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None

    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    # OVMS: (0, 1]. The engine takes float32, where smaller values become 0 and are refused:
    # MindIE's lower bound, 1e-6, keeps the meaning ("the top token only").
    top_p: float | None = Field(default=None, ge=MIN_POSITIVE, le=1.0)
    # -1 (OVMS, vLLM), 0 (llama.cpp, MindIE) and an explicit null (Databricks) all mean "no
    # top-k filter"; omitting it means the model's default (OVMS: 40). MindIE's upper bound.
    top_k: int | None = Field(default=None, ge=-1, le=MAX_TOP_K)
    min_p: float | None = Field(default=None, ge=0.0, lt=1.0)
    repetition_penalty: float | None = Field(default=None, ge=MIN_POSITIVE)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool = True
    n: int = Field(default=1, ge=1, le=MAX_N)
    best_of: int | None = Field(default=None, ge=1)
    length_penalty: float | None = None
    # Speculative decoding (draft model) and prompt lookup; only valid on those pipelines.
    num_assistant_tokens: int | None = Field(default=None, ge=1)
    assistant_confidence_threshold: float | None = Field(default=None, gt=0.0, le=1.0)
    max_ngram_size: int | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _null_means_not_sent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None or key in NULL_MEANS_NO_LIMIT}
        return data

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
    def _cross_field_rules(self) -> SamplingRequest:
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
        return self.max_tokens

    @property
    def output_limit_removed(self) -> bool:
        """``max_tokens: null`` sent explicitly: generate up to the context, not the model's default."""
        return "max_tokens" in self.model_fields_set and self.max_tokens is None

    @property
    def top_k_removed(self) -> bool:
        return "top_k" in self.model_fields_set and self.top_k is None

    @property
    def stop_sequences(self) -> list[str]:
        return list(self.stop) if isinstance(self.stop, list) else []

    @property
    def wants_logprobs(self) -> bool:
        return False

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class FunctionDefinition(_Lenient):
    # OpenAI: a-z, A-Z, 0-9, underscores and dashes, at most 64 characters.
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(_Lenient):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"]
    function: NamedFunction


class TextFormat(_Lenient):
    """OpenAI: free text (the same as sending no response_format)."""

    type: Literal["text"]


class JSONObjectFormat(_Lenient):
    """OpenAI: any JSON object."""

    type: Literal["json_object"]


class JSONSchemaSpec(_Lenient):
    # OpenAI requires a name; ovserve never did (the name only labels the schema for the model).
    name: str | None = None
    description: str | None = None
    # No schema (or {}) admits any JSON value. ``schema_``: "schema" is a BaseModel method.
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    # Every schema is enforced (or refused) whatever strict says: see ovserve.service.guided.
    strict: bool | None = None


class JSONSchemaFormat(_Lenient):
    """OpenAI: JSON matching ``json_schema.schema``."""

    type: Literal["json_schema"]
    json_schema: JSONSchemaSpec


class RegexFormat(_Lenient):
    """OVMS: text matching ``pattern`` in full."""

    type: Literal["regex"]
    pattern: str = Field(min_length=1)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a valid regex: {exc}") from exc
        return pattern


class ConstStringFormat(_Lenient):
    """OVMS: exactly ``value``."""

    type: Literal["const_string"]
    value: str


# OpenAI's text / json_object / json_schema, and OVMS's regex / const_string, told apart by
# "type" (the field is a discriminated union). An unknown type is reported with param
# "response_format.type"; any other error of a member with param "response_format" (see
# ovserve.api.routes.validation_error).
ResponseFormat = TextFormat | JSONObjectFormat | JSONSchemaFormat | RegexFormat | ConstStringFormat


class ChatCompletionRequest(SamplingRequest):
    """The body of ``POST /v3/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    # Only the chosen token's logprob exists (the engine gives no alternatives); top_logprobs > 0
    # is refused by the field policy.
    logprobs: bool = False
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    # False: at most one tool call is returned (and a forced call is exactly one).
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = Field(default=None, discriminator="type")
    chat_template_kwargs: dict[str, Any] | None = None

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
    def output_limit(self) -> int | None:
        """``max_completion_tokens`` is OpenAI's newer name; it wins over ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def output_limit_removed(self) -> bool:
        if self.max_completion_tokens is not None:
            return False
        if "max_completion_tokens" in self.model_fields_set:
            return True
        return super().output_limit_removed

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs


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


# -- retrieval and tokenizer endpoints ------------------------------------------------------

_NonEmptyText = Annotated[str, Field(min_length=1)]
_TokenIds = Annotated[list[TokenId], Field(min_length=1)]


class _RetrievalRequest(_Lenient):
    """OpenAI's ``null`` = "not sent", for every optional field."""

    @model_validator(mode="before")
    @classmethod
    def _null_means_not_sent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class EmbeddingRequest(_RetrievalRequest):
    """The body of ``POST /v3/embeddings`` (OpenAI's shape).

    ``input``: one text, a list of texts, one list of token ids, or a list of such lists; never
    empty, never a mix of texts and ids (OpenAI refuses both).
    """

    model: str
    input: (
        _NonEmptyText
        | Annotated[list[_NonEmptyText], Field(min_length=1)]
        | _TokenIds
        | Annotated[list[_TokenIds], Field(min_length=1)]
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _one_kind_of_input(cls, value: Any) -> Any:
        # The union's own errors name a member ("input.constrained-str"); say what is allowed instead.
        def texts(items: list[Any]) -> bool:
            return all(isinstance(item, str) for item in items)

        def ids(items: Any) -> bool:
            return isinstance(items, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in items)

        if isinstance(value, str):
            if not value:
                raise ValueError("must not be an empty string")
            return value
        if not isinstance(value, list) or not value:
            raise ValueError("must be a non-empty string or a non-empty list")
        if not (texts(value) or ids(value) or all(ids(item) for item in value)):
            raise ValueError(
                "must be a string, a list of strings, a list of token ids or a list of token-id lists (not a mix)"
            )
        if texts(value) and not all(value):
            raise ValueError(f"item {[bool(item) for item in value].index(False)} is an empty string")
        if not texts(value) and not ids(value) and not all(value):
            raise ValueError(f"item {[bool(item) for item in value].index(False)} is an empty list of token ids")
        return value

    @property
    def inputs(self) -> list[str] | list[list[int]]:
        """Every input as a list: texts, or token-id lists."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if isinstance(value[0], int):
            return [[token for token in value if isinstance(token, int)]]
        return value


class RerankDocument(_Lenient):
    text: _NonEmptyText


class RerankRequest(_RetrievalRequest):
    """The body of ``POST /v3/rerank`` (OVMS's and Cohere's shape)."""

    model: str
    query: _NonEmptyText
    # Empty documents are refused here, before any tokenizing: there is nothing in one to score
    # (one the tokenizer reads nothing of, e.g. control characters only, is scored as an empty one).
    documents: Annotated[list[_NonEmptyText | RerankDocument], Field(min_length=1)]
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False

    @field_validator("documents", mode="before")
    @classmethod
    def _no_empty_document(cls, value: Any) -> Any:
        # The union's own error names a member ("documents.0.constrained-str"); name the item instead.
        if isinstance(value, list):
            for index, item in enumerate(value):
                if item == "" or (isinstance(item, dict) and item.get("text") == ""):
                    raise ValueError(f"item {index} is an empty document")
        return value

    @property
    def texts(self) -> list[str]:
        return [document if isinstance(document, str) else document.text for document in self.documents]


class TokenizeRequest(_RetrievalRequest):
    """The body of ``POST /v3/tokenize`` (llama.cpp's shape): ``content``, or chat ``messages``
    rendered with the model's chat template first (as /chat/completions would)."""

    model: str | None = None  # llama.cpp sends none: fine when the server serves one model
    content: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)] | None = None
    add_special: bool = False  # llama.cpp's default
    with_pieces: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> TokenizeRequest:
        if (self.content is None) == (self.messages is None):
            raise ValueError("send exactly one of 'content' and 'messages'")
        return self


class DetokenizeRequest(_RetrievalRequest):
    """The body of ``POST /v3/detokenize`` (llama.cpp's shape)."""

    model: str | None = None

    tokens: list[TokenId]
