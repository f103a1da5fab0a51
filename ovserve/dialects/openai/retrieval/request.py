"""The bodies of the retrieval and tokenizer endpoints: embeddings, rerank, tokenize, detokenize."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from ovserve.dialects.openai.chat.request import ChatMessage
from ovserve.dialects.openai.request import Lenient, TokenId
from ovserve.json_types import without_nulls

_NonEmptyText = Annotated[str, Field(min_length=1)]
_TokenIds = Annotated[list[TokenId], Field(min_length=1)]


class _RetrievalRequest(Lenient):
    """OpenAI's ``null`` = "not sent", for every optional field."""

    @model_validator(mode="before")
    @classmethod
    def _null_means_not_sent(cls, data: Any) -> Any:
        return without_nulls(data)

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


class RerankDocument(Lenient):
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
