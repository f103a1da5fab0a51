"""Ollama's routes as endpoints of the request envelope, beside generation (``adapter.OllamaEndpoint``).

Contract:

- :class:`OllamaGenerationEndpoint` serves ``/api/chat`` and ``/api/generate``: a request without
  messages (chat) or prompt (generate) only manages its model, as Ollama's does. With
  ``keep_alive: 0`` it unloads the model (``done_reason: "unload"``: what ``ollama stop`` sends;
  any task; 409 for a pinned model) and holds nothing, so its own request cannot hold the unload
  up; otherwise it loads it (``"load"``, answered once loaded, within ``--request_timeout``) with
  the request's ``keep_alive``: the envelope's lease is the load. Every other request is
  generation, delegated to :class:`~ovserve.dialects.ollama.adapter.OllamaEndpoint`.
- :class:`OllamaEmbedEndpoint` serves ``/api/embed`` and the older ``/api/embeddings`` over the one
  embedding path (``ovserve.core.embedding``), with the request's ``keep_alive``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from ovserve.core.embedding import EmbeddingJob, prepare_embedding
from ovserve.core.engine_work import LoadWork, UnloadWork
from ovserve.dialects.endpoint import Answer, UnaryEndpoint
from ovserve.dialects.ollama import request as req
from ovserve.dialects.ollama.adapter import OllamaCall, OllamaEndpoint
from ovserve.dialects.ollama.response import (
    AssistantMessage,
    ChatResponse,
    EmbeddingsResponse,
    EmbedResponse,
    GenerateResponse,
    timestamp,
)
from ovserve.errors import OvserveError
from ovserve.models.served import ModelRegistry, ServedModel

GenerationRequest = req.ChatRequest | req.GenerateRequest


@dataclass(frozen=True, slots=True)
class ManageCall:
    """A chat or generate request with nothing to generate: a load or an unload of its model."""

    job: LoadWork | UnloadWork
    request: GenerationRequest
    streaming: bool = False


def manages_only(request: GenerationRequest) -> bool:
    """Whether the request has nothing to generate (no messages; no prompt nor images)."""
    if isinstance(request, req.ChatRequest):
        return not request.messages
    return not request.prompt and not request.images


class OllamaGenerationEndpoint:
    """``/api/chat`` and ``/api/generate``: generation, or a load or unload (see the module doc).
    ``expire`` unloads a model now, or as its last request ends (the residency manager's)."""

    def __init__(self, generation: OllamaEndpoint, expire: Callable[[ServedModel], Awaitable[None]]) -> None:
        self.generation = generation
        self.models: ModelRegistry = generation.models
        self.expire = expire

    async def prepare(self, request: GenerationRequest, caller: str) -> OllamaCall | ManageCall:
        if not manages_only(request):
            return await self.generation.prepare(request, caller)
        model = self.models.get(request.model)
        keep_alive = req.keep_alive_seconds(request.keep_alive)
        if keep_alive == 0:
            return ManageCall(UnloadWork(model=model), request)
        model.require_task("text_generation")
        model.check_available()
        job = LoadWork(model=model)
        job.keep_alive = keep_alive
        return ManageCall(job, request)

    async def complete(self, call: OllamaCall | ManageCall) -> Answer:
        if isinstance(call, OllamaCall):
            return await self.generation.complete(call)
        done_reason: Literal["load", "unload"] = "load"
        if isinstance(call.job, UnloadWork):
            await self.expire(call.job.model)
            done_reason = "unload"
        name, created = call.job.model.name, timestamp()
        if isinstance(call.request, req.ChatRequest):
            message = AssistantMessage(role="assistant", content="")
            return ChatResponse(model=name, created_at=created, message=message, done=True, done_reason=done_reason)
        return GenerateResponse(model=name, created_at=created, response="", done=True, done_reason=done_reason)

    def stream(self, call: OllamaCall | ManageCall) -> AsyncIterator[Answer]:
        assert isinstance(call, OllamaCall), "a load or unload is answered in one line"
        return self.generation.stream(call)

    def failure_event(self, call: OllamaCall | ManageCall, error: OvserveError) -> Answer:
        assert isinstance(call, OllamaCall)
        return self.generation.failure_event(call, error)


EmbedRequests = req.EmbedRequest | req.EmbeddingsRequest


@dataclass(frozen=True, slots=True)
class EmbedCall:
    job: EmbeddingJob
    request: EmbedRequests
    streaming: bool = False
    started_ns: int = field(default_factory=time.perf_counter_ns)


class OllamaEmbedEndpoint(UnaryEndpoint[EmbedCall]):
    async def prepare(self, request: EmbedRequests, caller: str) -> EmbedCall:
        if isinstance(request, req.EmbedRequest):
            job = await prepare_embedding(
                self.models, request.model, request.inputs, truncate=request.truncate, dimensions=request.dimensions
            )
        else:
            job = await prepare_embedding(
                self.models, request.model, [request.prompt], truncate=True, dimensions=None, param="prompt"
            )
        job.keep_alive = req.keep_alive_seconds(request.keep_alive)
        return EmbedCall(job, request)

    async def complete(self, call: EmbedCall) -> EmbedResponse | EmbeddingsResponse:
        vectors = await call.job.run()
        if isinstance(call.request, req.EmbeddingsRequest):
            return EmbeddingsResponse(embedding=vectors[0].tolist())
        return EmbedResponse(
            model=call.job.model.name,
            embeddings=vectors.tolist(),
            total_duration=time.perf_counter_ns() - call.started_ns,
            load_duration=call.job.waited_ns,
            prompt_eval_count=call.job.prompt_tokens,
        )
