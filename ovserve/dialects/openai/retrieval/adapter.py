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

import base64
import uuid
from dataclasses import dataclass

import numpy as np

# The chat endpoint's own message -> template dict conversion, so that /tokenize's "messages"
# counts exactly the prompt /chat/completions would send.
from ovserve.core.chat import template_messages
from ovserve.core.embedding import EmbeddingJob, prepare_embedding
from ovserve.core.engine_work import ModelWork, TokenizerWork
from ovserve.dialects.endpoint import UnaryEndpoint, WorkCall
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


@dataclass(kw_only=True)
class RerankJob(ModelWork):
    query: str
    documents: list[str]
    prompt_tokens: int

    @property
    def admission_tokens(self) -> int:
        return self.prompt_tokens


EmbeddingCall = WorkCall[EmbeddingJob, EmbeddingRequest]
RerankCall = WorkCall[RerankJob, RerankRequest]
TokenizerRequest = TokenizeRequest | DetokenizeRequest


def _model(models: ModelRegistry, name: str | None) -> ServedModel:
    """The named model, or the only one served when the request names none (tokenize/detokenize)."""
    if name is None:
        if len(models) == 1:
            return next(iter(models))
        raise BadRequestError("this server serves several models: name one in 'model'", param="model")
    return models.get(name)


class EmbeddingsEndpoint(UnaryEndpoint[EmbeddingCall]):
    async def prepare(self, request: EmbeddingRequest, caller: str) -> EmbeddingCall:
        job = await prepare_embedding(
            self.models, request.model, request.inputs, truncate=True, dimensions=request.dimensions
        )  # truncate: where the model's graph truncates
        return WorkCall(job, request)

    async def complete(self, call: EmbeddingCall) -> EmbeddingResponse:
        vectors = await call.job.run()
        data = [
            Embedding(object="embedding", index=index, embedding=_encode_vector(vector, call.request.encoding_format))
            for index, vector in enumerate(vectors)
        ]
        usage = PromptUsage.of(call.job.prompt_tokens)
        return EmbeddingResponse(object="list", data=data, model=call.job.model.name, usage=usage)


class RerankEndpoint(UnaryEndpoint[RerankCall]):
    async def prepare(self, request: RerankRequest, caller: str) -> RerankCall:
        model = self.models.get(request.model)
        model.require_task("rerank")
        model.check_available()
        documents = request.texts
        _check_count(model, len(documents), "documents", "documents")
        limit = model.context_length
        # The query must leave room for a document; documents are cut to fit (a cross-encoder
        # reads query and document as one input of at most `limit` tokens).
        (query_tokens,) = await model.tokenizer.count_each(
            [request.query], limit=limit, truncate=False, param="query", label="the query"
        )
        document_tokens = await model.tokenizer.count_each(documents, limit=limit, truncate=True, param="documents")
        prompt_tokens = sum(min(limit, query_tokens + count) for count in document_tokens)
        job = RerankJob(model=model, query=request.query, documents=documents, prompt_tokens=prompt_tokens)
        return WorkCall(job, request)

    async def complete(self, call: RerankCall) -> RerankResponse:
        job, request = call.job, call.request
        scores = await job.model.engine.rerank(job.query, job.documents)
        job.started()
        # Highest first; equal scores in document order, so the same request always gets the same answer.
        order = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
        if request.top_n is not None:
            order = order[: request.top_n]
        results: list[RerankResult] = []
        for index in order:
            result = RerankResult(index=index, relevance_score=scores[index])
            if request.return_documents:
                result.document = RerankedDocument(text=job.documents[index])
            results.append(result)
        usage = PromptUsage.of(job.prompt_tokens)
        return RerankResponse(id=f"rerank-{uuid.uuid4().hex}", model=job.model.name, results=results, usage=usage)


class _TokenizerEndpoint(UnaryEndpoint[WorkCall[TokenizerWork, TokenizerRequest]]):
    """A call of the named model's tokenizer (or the only model's): no engine, no load."""

    async def prepare(self, request: TokenizerRequest, caller: str) -> WorkCall[TokenizerWork, TokenizerRequest]:
        return WorkCall(TokenizerWork(model=_model(self.models, request.model)), request)


class TokenizeEndpoint(_TokenizerEndpoint):
    async def complete(self, call: WorkCall[TokenizerWork, TokenizerRequest]) -> TokenizeResponse:
        model, request = call.job.model, call.request
        assert isinstance(request, TokenizeRequest)
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


class DetokenizeEndpoint(_TokenizerEndpoint):
    async def complete(self, call: WorkCall[TokenizerWork, TokenizerRequest]) -> DetokenizeResponse:
        request = call.request
        assert isinstance(request, DetokenizeRequest)
        text = await call.job.model.tokenizer.decode(request.tokens, skip_special_tokens=False)
        return DetokenizeResponse(content=text)
