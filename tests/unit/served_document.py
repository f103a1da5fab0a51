"""The document ``GET /openapi.json`` serves for a few models, and what the tests of it share:
the documented paths by kind, each request body's request model, a validator of a request body.

No engine is started: the document needs only each served model's name and task.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pydantic import BaseModel
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from ovserve.api import keys
from ovserve.api.table import add_routes
from ovserve.dialects.anthropic.request import MessagesRequest, PromptRequest
from ovserve.dialects.ollama import request as ollama
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.images.request import ImageGenerationRequest
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.dialects.openai.retrieval.request import (
    DetokenizeRequest,
    EmbeddingRequest,
    RerankRequest,
    TokenizeRequest,
)
from ovserve.models.served import ModelRegistry
from ovserve.settings.schema import ModelSettings

PATHS: dict[str, type[BaseModel]] = {
    "/v3/chat/completions": ChatCompletionRequest,
    "/v3/completions": CompletionRequest,
    "/v3/responses": ResponsesRequest,
    "/v3/embeddings": EmbeddingRequest,
    "/v3/rerank": RerankRequest,
    "/v3/tokenize": TokenizeRequest,
    "/v3/detokenize": DetokenizeRequest,
    "/v3/messages": MessagesRequest,
    "/v3/messages/count_tokens": PromptRequest,
    "/v3/images/generations": ImageGenerationRequest,
}
GENERATION = ("/v3/chat/completions", "/v3/completions", "/v3/responses", "/v3/messages")
# The JSON routes that stream with "stream": true.
STREAMED = (*GENERATION, "/v3/images/generations")
# Anthropic's Messages API: its error shape, 529 for an overloaded model.
ANTHROPIC = ("/v3/messages", "/v3/messages/count_tokens")
# The documented GETs: OpenAI's model list and model object.
READS = ("/v3/models", "/v3/models/{name}")
# A stored response of the Responses API: read back and deleted.
STORED = "/v3/responses/{response_id}"
# Audio: multipart uploads and an audio answer (their schemas are written in ovserve.api.openapi).
AUDIO = ("/v3/audio/transcriptions", "/v3/audio/translations", "/v3/audio/speech")
# An image edit: a multipart upload, admitted like every model's request (429 past its queue).
IMAGE_EDIT = "/v3/images/edits"
# OpenAI's Files and Batch APIs: an upload (a multipart form), a batch's creation and cancel, reads, a delete.
BATCH_API = {
    "/v3/files": ("get", "post"),
    "/v3/files/{file_id}": ("delete", "get"),
    "/v3/files/{file_id}/content": ("get",),
    "/v3/batches": ("get", "post"),
    "/v3/batches/{batch_id}": ("get",),
    "/v3/batches/{batch_id}/cancel": ("post",),
}
# Ollama's native API: its request models, each documented as "Ollama" + the class name.
OLLAMA: dict[str, type[BaseModel]] = {
    "/api/chat": ollama.ChatRequest,
    "/api/generate": ollama.GenerateRequest,
    "/api/embed": ollama.EmbedRequest,
    "/api/embeddings": ollama.EmbeddingsRequest,
    "/api/show": ollama.ShowRequest,
}
OLLAMA_STREAMS = ("/api/chat", "/api/generate")
OLLAMA_READS = ("/api/tags", "/api/ps", "/api/version")
# Ollama's model store: one answer, a 400 pointing at `ovserve export`.
OLLAMA_STORE = {"/api/pull": "post", "/api/push": "post", "/api/create": "post", "/api/copy": "post",
                "/api/delete": "delete"}  # fmt: skip
REQUESTS: dict[str, type[BaseModel]] = {**PATHS, **OLLAMA}


def component(path: str) -> str:
    """The name of the request body's schema of ``path``."""
    return ("Ollama" if path.startswith("/api/") else "") + REQUESTS[path].__name__


def _settings(name: str) -> ModelSettings:
    """Settings without a model directory: what the app's residency manager reads of a model."""
    return ModelSettings.model_construct(name=name, path=Path("/nonexistent") / name)


# What the document needs of a served model: its name and task (and settings for the app's
# residency manager). No engine is started.
def _model(name: str, task: str) -> Any:
    """What the document reads of a served model: its name, task, settings and (image) LoRA aliases."""
    spec = SimpleNamespace(images=SimpleNamespace(aliases=()))
    return SimpleNamespace(name=name, task=task, settings=_settings(name), spec=spec)


SERVED = ModelRegistry(
    [_model("tiny-llm", "text_generation"), _model("tiny-embed", "embeddings"), _model("tiny-rerank", "rerank")]
)


async def served_document() -> dict[str, Any]:
    """What GET /openapi.json answers, through a running app serving :data:`SERVED`."""
    app = web.Application()
    app[keys.MODELS] = SERVED
    add_routes(app)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/openapi.json")
        assert response.status == 200
        assert response.content_type == "application/json"
        return await response.json()


def body_validator(document: dict[str, Any], path: str) -> jsonschema.Draft202012Validator:
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry = Registry().with_resource("urn:ovserve", resource)
    return jsonschema.Draft202012Validator({"$ref": "urn:ovserve" + schema["$ref"]}, registry=registry)
