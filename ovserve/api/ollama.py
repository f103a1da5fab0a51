"""Ollama's routes (``/api/*`` and ``/``): thin handlers over ``ovserve.dialects.ollama``.

Chat, generate, embed and embeddings come in through the request envelope (``ovserve.api.envelope``:
body, admission, lease, deadline, metrics) with the NDJSON framing Ollama streams in: one JSON
object per line, ``application/x-ndjson``. A request without messages (chat) or prompt (generate)
only manages the model, as Ollama's does (``ovserve.dialects.ollama.endpoints``). ``keep_alive`` on
any request sets how long its model stays loaded after it (``ovserve.models.manager``). Errors are
raised; the error middleware writes them in Ollama's shape (``{"error": "..."}``) on every route here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel

from ovserve.api import keys
from ovserve.api.envelope import RequestView, Way, json_response, read_json_object, validated
from ovserve.api.sse import SSEWriter, dumps
from ovserve.dialects.ollama import models as info
from ovserve.dialects.ollama.request import (
    ChatRequest,
    EmbeddingsRequest,
    EmbedRequest,
    GenerateRequest,
    OllamaRequest,
    ShowRequest,
)
from ovserve.dialects.ollama.response import (
    ProcessResponse,
    TagsResponse,
    VersionResponse,
)
from ovserve.errors import BadRequestError
from ovserve.json_types import JsonObject
from ovserve.models.residency import ModelState
from ovserve.models.served import ModelRegistry

log = logging.getLogger(__name__)

# The Ollama API level these routes speak. Clients compare it to decide what to send (tools,
# thinking, structured outputs all need a recent Ollama), so it names the Ollama release whose
# API this matches, not ovserve's own version.
OLLAMA_API_VERSION = "0.12.0"

Parsed = TypeVar("Parsed", bound=BaseModel)


class NDJSONWriter(SSEWriter):
    """Ollama's stream: one JSON object per line, no terminator but the end of the body."""

    def __init__(self, request: web.Request) -> None:
        super().__init__(request)
        self.response = web.StreamResponse(
            status=200, headers={"Content-Type": "application/x-ndjson", "Cache-Control": "no-cache"}
        )

    async def send(self, payload: Any) -> None:
        await self.response.write(f"{dumps(payload)}\n".encode())

    async def done(self) -> None:
        await self.response.write_eof()


def _parse(payload: Any, model: type[Parsed], models: ModelRegistry) -> Parsed:
    parsed = validated(model, payload)
    if isinstance(parsed, OllamaRequest):
        parsed.model = info.served_name(models, parsed.model)
        if parsed.unknown_fields():
            log.info("ollama request to %r: ignoring fields %s", parsed.model, parsed.unknown_fields())
    return parsed


def _parser(model: type[Parsed]) -> Callable[[RequestView, JsonObject], Parsed]:
    return lambda request, payload: _parse(payload, model, request.app[keys.MODELS])


CHAT = Way("ollama_chat", _parser(ChatRequest), keys.OLLAMA, writer=NDJSONWriter)
GENERATE = Way("ollama_generate", _parser(GenerateRequest), keys.OLLAMA, writer=NDJSONWriter)
EMBED = Way("ollama_embed", _parser(EmbedRequest), keys.OLLAMA_EMBED)
EMBEDDINGS = Way("ollama_embed", _parser(EmbeddingsRequest), keys.OLLAMA_EMBED)


async def tags(request: web.Request) -> web.Response:
    return json_response(TagsResponse(models=[info.listed(model) for model in request.app[keys.MODELS]]))


async def ps(request: web.Request) -> web.Response:
    """The loaded models (not those unloading), the one that stays longest first, as Ollama sorts them."""
    manager = request.app[keys.RESIDENCY]
    loaded = [model for model in request.app[keys.MODELS] if manager.state(model) is ModelState.LOADED]
    expiries = {model.name: model.residency.expires_at() for model in loaded}
    loaded.sort(key=lambda model: _stays_until(expiries[model.name]), reverse=True)
    running = [info.running(model, expiries[model.name], manager.measure(model)) for model in loaded]
    return json_response(ProcessResponse(models=running))


def _stays_until(expires_at: float | None) -> float:
    """When a model unloads, as a sort key: never is the latest."""
    return math.inf if expires_at is None else expires_at


async def show(request: web.Request) -> web.Response:
    parsed = _parse(await read_json_object(request), ShowRequest, request.app[keys.MODELS])
    models = request.app[keys.MODELS]
    return json_response(info.show(models.get(info.served_name(models, parsed.model_name))))


async def version(request: web.Request) -> web.Response:
    return json_response(VersionResponse(version=OLLAMA_API_VERSION))


async def root(request: web.Request) -> web.Response:
    return web.Response(text="Ollama is running", content_type="text/plain")


async def model_store(request: web.Request) -> web.Response:
    """``/api/pull``, ``push``, ``create``, ``copy``, ``delete``: ovserve serves exported OpenVINO
    directories named at startup; there is no model store to change over HTTP."""
    operation = request.path.rsplit("/", 1)[-1]
    raise BadRequestError(
        f"/api/{operation} is not supported: ovserve serves OpenVINO models exported ahead of time. "
        "Export one with `ovserve export text_generation --source_model <hf-model-id> "
        "--model_repository_path <directory>` and serve it with --config_path (see docs/ollama.md)"
    )
