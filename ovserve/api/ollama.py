"""Ollama's routes (``/api/*`` and ``/``): thin handlers over ``ovserve.dialects.ollama``.

Generation goes through :func:`ovserve.api.routes.generate` (admission, deadline, metrics) with
the NDJSON framing Ollama streams in: one JSON object per line, ``application/x-ndjson``. A request
without messages (chat) or prompt (generate) only asks for the model to be loaded: it is answered
at once with ``done_reason: "load"``, as Ollama does. Errors are raised; the error middleware
writes them in Ollama's shape (``{"error": "..."}``) on every route here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from ovserve.api import keys
from ovserve.api.routes import generate, json_response, read_json_object
from ovserve.api.sse import SSEWriter, dumps
from ovserve.core.embedding import Embedded, embed_texts
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
    ChatResponse,
    EmbeddingsResponse,
    EmbedResponse,
    GenerateResponse,
    ProcessResponse,
    TagsResponse,
    VersionResponse,
    timestamp,
)
from ovserve.dialects.ollama.response import Message as MessageBody
from ovserve.errors import BadRequestError, DeadlineExceededError, OvserveError, bad_request
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
    try:
        parsed = model.model_validate(payload)
    except ValidationError as exc:
        raise bad_request(exc) from None
    if isinstance(parsed, OllamaRequest):
        parsed.model = info.served_name(models, parsed.model)
        if parsed.unknown_fields():
            log.info("ollama request to %r: ignoring fields %s", parsed.model, parsed.unknown_fields())
    return parsed


def _loaded(request: web.Request, name: str, *, chat: bool) -> web.Response:
    """Ollama's answer to a request that only loads the model (no messages / no prompt)."""
    model = request.app[keys.MODELS].get(name)
    model.require_task("text_generation")
    if not model.engine.ready:
        raise model.engine.not_ready_error()
    created = timestamp()
    body: ChatResponse | GenerateResponse
    if chat:
        message = MessageBody(role="assistant", content="")
        body = ChatResponse(model=model.name, created_at=created, message=message, done=True, done_reason="load")
    else:
        body = GenerateResponse(model=model.name, created_at=created, response="", done=True, done_reason="load")
    return json_response(body)


async def chat(request: web.Request) -> web.StreamResponse:
    parsed = _parse(await read_json_object(request), ChatRequest, request.app[keys.MODELS])
    if not parsed.messages:
        return _loaded(request, parsed.model, chat=True)
    endpoint = request.app[keys.OLLAMA]
    return await generate(request, "ollama_chat", lambda _: parsed, endpoint, writer=NDJSONWriter)


async def generate_text(request: web.Request) -> web.StreamResponse:
    parsed = _parse(await read_json_object(request), GenerateRequest, request.app[keys.MODELS])
    if not parsed.prompt and not parsed.images:
        return _loaded(request, parsed.model, chat=False)
    endpoint = request.app[keys.OLLAMA]
    return await generate(request, "ollama_generate", lambda _: parsed, endpoint, writer=NDJSONWriter)


async def _embed(request: web.Request, texts: list[str], name: str, **fields: Any) -> Embedded:
    """The texts embedded within --request_timeout, counted once in /metrics with the outcome."""
    timeout = request.app[keys.SETTINGS].request_timeout
    recorder = request.app[keys.METRICS].recorder("ollama_embed")
    try:
        try:
            async with asyncio.timeout(timeout):
                done = await embed_texts(request.app[keys.MODELS], name, texts, recorder=recorder, **fields)
        except TimeoutError:
            raise DeadlineExceededError(f"the request took longer than --request_timeout ({timeout:g} s)") from None
    except OvserveError as exc:
        recorder.finished(exc.error_type, exc.status)
        raise
    recorder.finished("stop", 200)
    return done


async def embed(request: web.Request) -> web.Response:
    started = time.perf_counter_ns()
    parsed = _parse(await read_json_object(request), EmbedRequest, request.app[keys.MODELS])
    done = await _embed(request, parsed.inputs, parsed.model, truncate=parsed.truncate, dimensions=parsed.dimensions)
    return json_response(
        EmbedResponse(
            model=done.model.name,
            embeddings=done.vectors.tolist(),
            total_duration=time.perf_counter_ns() - started,
            load_duration=0,  # the model is loaded for the server's life
            prompt_eval_count=done.prompt_tokens,
        )
    )


async def embeddings(request: web.Request) -> web.Response:
    parsed = _parse(await read_json_object(request), EmbeddingsRequest, request.app[keys.MODELS])
    done = await _embed(request, [parsed.prompt], parsed.model, truncate=True, dimensions=None, param="prompt")
    return json_response(EmbeddingsResponse(embedding=done.vectors[0].tolist()))


async def tags(request: web.Request) -> web.Response:
    return json_response(TagsResponse(models=[info.listed(model) for model in request.app[keys.MODELS]]))


async def ps(request: web.Request) -> web.Response:
    loaded = [info.running(model) for model in request.app[keys.MODELS] if model.engine.ready]
    return json_response(ProcessResponse(models=loaded))


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
