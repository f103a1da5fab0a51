"""Embeddings, rerank and tokenize/detokenize: request -> checks -> engine (or tokenizer) -> response body.

Contract:

- Inputs are counted on the model's tokenizer thread (:class:`~ovserve.models.tokenizer.PromptTokenizer`)
  before any engine work: an input over the model's limit is the client's 400 naming the input and
  both numbers, unless the graph sets ``truncate`` (the pipeline then cuts it at the limit, and it
  counts as that many tokens in ``usage``).
- Embeddings go through the one embedding path, ``ovserve.core.embedding`` (token-id inputs are
  decoded to text there: a decode/encode round trip can differ from the ids sent).
- The pipeline runs in the model's engine process (``EngineClient.embed`` / ``rerank``), which
  splits a request into calls of the model's ``embeddings_batch_size``; nothing here blocks the
  event loop for longer than one bounded tokenizer job.
- Tokenize/detokenize need only the tokenizer, which lives in this process: they answer while the
  model's engine is still loading.
"""

from __future__ import annotations

import asyncio
import base64
import uuid

import numpy as np

# The chat endpoint's own message -> template dict conversion, so that /tokenize's "messages"
# counts exactly the prompt /chat/completions would send.
from ovserve.core.chat import template_messages
from ovserve.core.embedding import embed_texts
from ovserve.core.engine_work import engine_work
from ovserve.dialects.openai.chat.adapter import messages_of
from ovserve.dialects.openai.retrieval.request import (
    DetokenizeRequest,
    EmbeddingRequest,
    RerankRequest,
    TokenizeRequest,
)
from ovserve.dialects.openai.retrieval.response import (
    DetokenizeResponse,
    Embedding,
    EmbeddingResponse,
    PromptUsage,
    RerankedDocument,
    RerankResponse,
    RerankResult,
    TokenizeResponse,
    TokenPiece,
)
from ovserve.errors import BadRequestError
from ovserve.metrics import RequestRecorder
from ovserve.models.served import ModelRegistry, ServedModel


def _check_count(model: ServedModel, count: int, what: str, param: str) -> None:
    limit = model.settings.retrieval.max_allowed_chunks
    if count > limit:
        raise BadRequestError(
            f"the request has {count} {what}, more than model '{model.name}' takes at once "
            f"(max_allowed_chunks {limit}); split it",
            param=param,
        )


def _encode_vector(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        # OpenAI's base64: the float32 values' little-endian bytes (what its SDK decodes).
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    values: list[float] = vector.tolist()
    return values


class RetrievalService:
    """The embeddings, rerank and tokenizer endpoints' work, over the served models."""

    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

    def _model(self, name: str | None) -> ServedModel:
        if name is None:
            if len(self.models) == 1:
                return next(iter(self.models))
            raise BadRequestError("this server serves several models: name one in 'model'", param="model")
        return self.models.get(name)

    # -- embeddings -----------------------------------------------------------------------------

    async def embed(
        self, request: EmbeddingRequest, recorder: RequestRecorder, deadline: float | None = None
    ) -> EmbeddingResponse:
        done = await embed_texts(
            self.models,
            request.model,
            request.inputs,
            truncate=True,  # where the model's graph truncates
            dimensions=request.dimensions,
            recorder=recorder,
            deadline=deadline,
        )
        data = [
            Embedding(object="embedding", index=index, embedding=_encode_vector(vector, request.encoding_format))
            for index, vector in enumerate(done.vectors)
        ]
        return EmbeddingResponse(
            object="list", data=data, model=done.model.name, usage=PromptUsage.of(done.prompt_tokens)
        )

    # -- rerank ---------------------------------------------------------------------------------

    async def rerank(
        self, request: RerankRequest, recorder: RequestRecorder, deadline: float | None = None
    ) -> RerankResponse:
        model = self.models.get(request.model)
        model.require_task("rerank")
        recorder.model = model.name
        model.check_available()
        documents = request.texts
        _check_count(model, len(documents), "documents", "documents")
        limit = model.context_length
        # The query must leave room for a document; documents are cut to fit (a cross-encoder
        # reads query and document as one input of at most `limit` tokens).
        async with asyncio.timeout_at(deadline):
            (query_tokens,) = await model.tokenizer.count_each(
                [request.query], limit=limit, truncate=False, param="query", label="the query"
            )
            document_tokens = await model.tokenizer.count_each(documents, limit=limit, truncate=True, param="documents")
        prompt_tokens = sum(min(limit, query_tokens + count) for count in document_tokens)
        async with engine_work(model, prompt_tokens, recorder, deadline):
            scores = await model.engine.rerank(request.query, documents)
        # Highest first; equal scores in document order, so the same request always gets the same answer.
        order = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
        if request.top_n is not None:
            order = order[: request.top_n]
        results: list[RerankResult] = []
        for index in order:
            result = RerankResult(index=index, relevance_score=scores[index])
            if request.return_documents:
                result.document = RerankedDocument(text=documents[index])
            results.append(result)
        return RerankResponse(
            id=f"rerank-{uuid.uuid4().hex}", model=model.name, results=results, usage=PromptUsage.of(prompt_tokens)
        )

    # -- tokenizer ------------------------------------------------------------------------------

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResponse:
        model = self._model(request.model)
        if request.messages is not None:
            model.require_task("text_generation")
            if any(message.image_parts() for message in request.messages):
                raise BadRequestError("tokenize counts text messages only (no image_url parts)", param="messages")
            messages = template_messages(messages_of(request.messages))
            prompt = await model.render_prompt(messages, None, None, param="messages")
            # As /chat/completions encodes a rendered prompt: the template wrote the special tokens.
            ids = await model.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            assert request.content is not None
            ids = await model.tokenizer.encode(request.content, add_special_tokens=request.add_special)
        if not request.with_pieces:
            return TokenizeResponse(tokens=ids)
        pieces = await model.tokenizer.pieces(ids)
        return TokenizeResponse(
            tokens=[TokenPiece(id=token, piece=piece) for token, piece in zip(ids, pieces, strict=True)]
        )

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResponse:
        model = self._model(request.model)
        return DetokenizeResponse(content=await model.tokenizer.decode(request.tokens, skip_special_tokens=False))
