"""What OpenAI's request bodies share: the lenient base model, the sampling surface of chat,
completions and Responses (:class:`SamplingRequest`), and the output formats they have in common
(:data:`OutputFormats`, with each dialect's own json_schema member).

Each says what it is to the core, once for every dialect that sends it:
:meth:`SamplingRequest.sampling` (the output limit read by one rule, each request naming its newer
field in ``output_limit_field``) and every format's ``output_format(origin)``. No engine imports
here: these modules only say what a valid request looks like. Fields other
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
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ovserve.core import conversation as core
from ovserve.dialects.tagged import ByType

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


class Lenient(BaseModel):
    # strict: "10" is not 10 and true is not 1 (OpenAI and OVMS refuse both); ints are still floats.
    model_config = ConfigDict(extra="allow", strict=True)


class StreamOptions(Lenient):
    include_usage: bool = False


TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]


class SamplingRequest(Lenient):
    """What chat and text completions share: the model, streaming and the sampling surface.

    Sampling fields default to ``None``, meaning "not sent": the model's generation_config.json
    and then ovserve's built-in defaults fill them (see ``ovserve.core.generation_config``).
    """

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None

    max_tokens: int | None = Field(default=None, ge=1)
    # The output limit's newer name, which wins over max_tokens when both are sent: chat's
    # max_completion_tokens, Responses' max_output_tokens (text completions has only max_tokens).
    output_limit_field: ClassVar[str] = "max_tokens"
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
        limit: int | None = getattr(self, self.output_limit_param)
        return limit

    @property
    def output_limit_removed(self) -> bool:
        """The limit sent as an explicit ``null`` (the newer name's null counts even beside
        ``max_tokens``): generate up to the context, not the model's default."""
        newer = self.output_limit_field
        if getattr(self, newer) is not None:
            return False
        if newer in self.model_fields_set:
            return True
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

    @property
    def output_limit_param(self) -> str:
        """The field that set the output limit (what an error about it names): the newer name
        when it was sent, else ``max_tokens``."""
        return self.output_limit_field if getattr(self, self.output_limit_field) is not None else "max_tokens"

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})

    def sampling(self) -> core.Sampling:
        """The core's view of these fields (``ovserve.core.conversation``)."""
        return core.Sampling(
            max_tokens=self.output_limit,
            max_tokens_param=self.output_limit_param,
            max_tokens_removed=self.output_limit_removed,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            top_k_removed=self.top_k_removed,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            length_penalty=self.length_penalty,
            seed=self.seed,
            stop=tuple(self.stop_sequences),
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos,
            include_stop_str_in_output=self.include_stop_str_in_output,
            skip_special_tokens=self.skip_special_tokens,
            n=self.n,
            best_of=self.best_of,
            logprobs=self.wants_logprobs,
            stream=self.stream,
            num_assistant_tokens=self.num_assistant_tokens,
            assistant_confidence_threshold=self.assistant_confidence_threshold,
            max_ngram_size=self.max_ngram_size,
        )


class TextFormat(Lenient):
    """OpenAI: free text (the same as sending no response_format)."""

    type: Literal["text"]

    def output_format(self, origin: str) -> core.OutputFormat | None:
        """The core's output format (each format below says its own), ``origin`` the field that
        carries it (``response_format``, ``text.format``): free text is none."""
        return None


class JSONObjectFormat(Lenient):
    """OpenAI: any JSON object."""

    type: Literal["json_object"]

    def output_format(self, origin: str) -> core.OutputFormat:
        return core.JsonSchemaFormat.any_object(origin)


class RegexFormat(Lenient):
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

    def output_format(self, origin: str) -> core.OutputFormat:
        return core.RegexFormat(self.pattern, origin)


class ConstStringFormat(Lenient):
    """OVMS: exactly ``value``."""

    type: Literal["const_string"]
    value: str

    def output_format(self, origin: str) -> core.OutputFormat:
        return core.RegexFormat(re.escape(self.value), origin)


JsonSchemaT = TypeVar("JsonSchemaT", bound=Lenient)
# OpenAI's text / json_object / json_schema, and OVMS's regex / const_string, told apart by
# "type": an unknown type is reported with param "response_format.type", any other error of a
# member with the path of the offending value (see ovserve.errors). Each dialect gives its own
# json_schema member (chat's nests the schema in ``json_schema``, Responses' has it flat):
# ``OutputFormats[JSONSchemaFormat]``.
OutputFormats = Annotated[TextFormat | JSONObjectFormat | JsonSchemaT | RegexFormat | ConstStringFormat, ByType()]
