"""Embeddings, rerank and tokenize/detokenize: request -> checks -> engine (or tokenizer) -> response body.

Contract:

- Inputs are counted on the model's tokenizer thread (:class:`~ovserve.models.tokenizer.PromptTokenizer`)
  before any engine work: an input over the model's limit is the client's 400 naming the input and
  both numbers, unless the graph sets ``truncate`` (the pipeline then cuts it at the limit, and it
  counts as that many tokens in ``usage``).
- Token-id inputs are decoded to text here and embedded as text: the pipeline takes only text.
  A decode/encode round trip can differ from the ids sent (special tokens are dropped first).
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
        model = self.models.get(request.model)
        model.require_task("embeddings")
        recorder.model = model.name
        model.check_available()
        settings = model.settings.retrieval
        inputs = request.inputs
        _check_count(model, len(inputs), "inputs", "input")
        if request.dimensions is not None and not settings.matryoshka_embeddings:
            raise BadRequestError(
                f"model '{model.name}' does not support 'dimensions' (its graph does not declare "
                "matryoshka_embeddings)",
                param="dimensions",
                code="unsupported_parameter",
            )
        async with asyncio.timeout_at(deadline):  # the tokenizer's work counts towards the deadline
            texts: list[str] = []
            for index, item in enumerate(inputs):
                if isinstance(item, str):
                    texts.append(item)
                    continue
                ids = [token for token in item if isinstance(token, int)]  # a token-id list (inputs is one kind)
                text = await model.tokenizer.decode(ids, skip_special_tokens=True)
                if not text:
                    # Only special (or unknown) ids: the pipeline takes text, and an empty text is
                    # refused as an empty string input is.
                    raise BadRequestError(
                        f"input {index}: its token ids decode to an empty text (special or unknown ids only)",
                        param="input",
                    )
                texts.append(text)
            counts = await model.tokenizer.count_each(
                texts, limit=model.context_length, truncate=settings.truncate, param="input"
            )
        prompt_tokens = sum(counts)
        async with engine_work(model, prompt_tokens, recorder, deadline):
            vectors = await model.engine.embed(texts)
        if request.dimensions is not None:
            vectors = self._shorten(model, vectors, request.dimensions)
        data = [
            Embedding(object="embedding", index=index, embedding=_encode_vector(vector, request.encoding_format))
            for index, vector in enumerate(vectors)
        ]
        return EmbeddingResponse(object="list", data=data, model=model.name, usage=PromptUsage.of(prompt_tokens))

    @staticmethod
    def _shorten(model: ServedModel, vectors: np.ndarray, dimensions: int) -> np.ndarray:
        """Matryoshka: the first ``dimensions`` values, normalised again when the model normalises."""
        size = vectors.shape[1]
        if dimensions > size:
            raise BadRequestError(
                f"'dimensions' is {dimensions} but model '{model.name}' makes {size}-dimensional embeddings",
                param="dimensions",
            )
        shortened = vectors[:, :dimensions]
        if model.settings.retrieval.normalize_embeddings:
            norms = np.linalg.norm(shortened, axis=1, keepdims=True)
            shortened = shortened / np.maximum(norms, np.finfo(np.float32).tiny)
        return shortened

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
