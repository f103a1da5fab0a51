"""The bodies of ``POST /v3/embeddings`` (OpenAI's shape), ``/v3/rerank`` (OVMS's and Cohere's) and
``/v3/tokenize`` / ``/v3/detokenize`` (llama.cpp's), as :mod:`ovserve.dialects.openai.retrieval.adapter`
builds them (see :mod:`ovserve.dialects.body` for the conventions)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ovserve.dialects.body import Body


class PromptUsage(Body):
    """The tokens read: embeddings and rerank generate none, so both counts are the same."""

    prompt_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, prompt_tokens: int) -> PromptUsage:
        return cls(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens)


class Embedding(Body):
    object: Literal["embedding"]
    index: int = Field(ge=0)
    # "base64": the float32 values' little-endian bytes (what OpenAI's SDK decodes).
    embedding: list[float] | str


class EmbeddingResponse(Body):
    """One embedding per input, in input order."""

    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: PromptUsage


class RerankedDocument(Body):
    text: str


class RerankResult(Body):
    index: int = Field(ge=0)
    relevance_score: float
    document: RerankedDocument | None = None  # with return_documents only


class RerankResponse(Body):
    """The documents by relevance, highest first (the first ``top_n``)."""

    id: str
    model: str
    results: list[RerankResult]
    usage: PromptUsage


class TokenPiece(Body):
    id: int
    piece: str


class TokenizeResponse(Body):
    """The token ids, with their pieces when ``with_pieces`` is true."""

    tokens: list[int] | list[TokenPiece]


class DetokenizeResponse(Body):
    content: str
