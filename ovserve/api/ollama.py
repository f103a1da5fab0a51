"""Ollama's routes (``/api/*`` and ``/``): thin handlers over ``ovserve.dialects.ollama``.

Generation goes through :func:`ovserve.api.routes.generate` (admission, deadline, metrics) with
the NDJSON framing Ollama streams in: one JSON object per line, ``application/x-ndjson``. A request
without messages (chat) or prompt (generate) only manages the model, as Ollama's does: it loads it
(``done_reason: "load"``, once loaded), or with ``keep_alive: 0`` unloads it (``"unload"``: what
``ollama stop`` sends). ``keep_alive`` on any request sets how long its model stays loaded after it
(``ovserve.models.manager``). Errors are raised; the error middleware writes them in Ollama's
shape (``{"error": "..."}``) on every route here.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any, Literal, TypeVar

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
    keep_alive_seconds,
)
from ovserve.dialects.ollama.response import (
    AssistantMessage,
    ChatResponse,
    EmbeddingsResponse,
    EmbedResponse,
    GenerateResponse,
    ProcessResponse,
    TagsResponse,
    VersionResponse,
    timestamp,
)
from ovserve.errors import BadRequestError, DeadlineExceededError, OvserveError, bad_request
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
    try:
        parsed = model.model_validate(payload)
    except ValidationError as exc:
        raise bad_request(exc) from None
    if isinstance(parsed, OllamaRequest):
        parsed.model = info.served_name(models, parsed.model)
        if parsed.unknown_fields():
            log.info("ollama request to %r: ignoring fields %s", parsed.model, parsed.unknown_fields())
    return parsed


def _deadline(request: web.Request) -> float | None:
    timeout = request.app[keys.SETTINGS].request_timeout
    return asyncio.get_running_loop().time() + timeout if timeout is not None else None


async def _load_or_unload(request: web.Request, parsed: ChatRequest | GenerateRequest) -> web.Response:
    """Ollama's answer to a request with nothing to generate (no messages / no prompt): the model
    unloaded with ``keep_alive: 0`` (any task: ``ollama stop`` sends this for every model; 409 for a
    pinned one), else loaded (within --request_timeout) with the request's ``keep_alive``."""
    model = request.app[keys.MODELS].get(parsed.model)
    keep_alive = keep_alive_seconds(parsed.keep_alive)
    done_reason: Literal["load", "unload"]
    if keep_alive == 0:
        await request.app[keys.RESIDENCY].expire(model)
        done_reason = "unload"
    else:
        model.require_task("text_generation")
        model.check_available()
        lease = await model.lease(_deadline(request), keep_alive=keep_alive)
        lease.release()
        done_reason = "load"
    created = timestamp()
    body: ChatResponse | GenerateResponse
    if isinstance(parsed, ChatRequest):
        message = AssistantMessage(role="assistant", content="")
        body = ChatResponse(model=model.name, created_at=created, message=message, done=True, done_reason=done_reason)
    else:
        body = GenerateResponse(model=model.name, created_at=created, response="", done=True, done_reason=done_reason)
    return json_response(body)


async def chat(request: web.Request) -> web.StreamResponse:
    parsed = _parse(await read_json_object(request), ChatRequest, request.app[keys.MODELS])
    if not parsed.messages:
        return await _load_or_unload(request, parsed)
    endpoint = request.app[keys.OLLAMA]
    return await generate(request, "ollama_chat", lambda _: parsed, endpoint, writer=NDJSONWriter)


async def generate_text(request: web.Request) -> web.StreamResponse:
    parsed = _parse(await read_json_object(request), GenerateRequest, request.app[keys.MODELS])
    if not parsed.prompt and not parsed.images:
        return await _load_or_unload(request, parsed)
    endpoint = request.app[keys.OLLAMA]
    return await generate(request, "ollama_generate", lambda _: parsed, endpoint, writer=NDJSONWriter)


async def _embed(request: web.Request, texts: list[str], parsed: OllamaRequest, **fields: Any) -> Embedded:
    """The texts embedded within --request_timeout (its model loaded for them if need be: a 503
    when it cannot be in time), counted once in /metrics with the outcome."""
    timeout = request.app[keys.SETTINGS].request_timeout
    recorder = request.app[keys.METRICS].recorder("ollama_embed")
    models, keep_alive = request.app[keys.MODELS], keep_alive_seconds(parsed.keep_alive)
    try:
        try:
            done = await embed_texts(
                models, parsed.model, texts, recorder=recorder, deadline=_deadline(request), keep_alive=keep_alive,
                **fields,
            )  # fmt: skip
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
    done = await _embed(request, parsed.inputs, parsed, truncate=parsed.truncate, dimensions=parsed.dimensions)
    return json_response(
        EmbedResponse(
            model=done.model.name,
            embeddings=done.vectors.tolist(),
            total_duration=time.perf_counter_ns() - started,
            load_duration=done.waited_ns,
            prompt_eval_count=done.prompt_tokens,
        )
    )


async def embeddings(request: web.Request) -> web.Response:
    parsed = _parse(await read_json_object(request), EmbeddingsRequest, request.app[keys.MODELS])
    done = await _embed(request, [parsed.prompt], parsed, truncate=True, dimensions=None, param="prompt")
    return json_response(EmbeddingsResponse(embedding=done.vectors[0].tolist()))


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
