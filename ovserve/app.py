"""The aiohttp application: routes, the error middleware, and the engines' lifetime."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from ovserve.api import keys, table
from ovserve.api.auth import ApiKeys, FailedAuthentications, auth_middleware
from ovserve.api.drain import Drain
from ovserve.api.routes import request_dialect
from ovserve.core.chat import ChatGeneration
from ovserve.core.completion import CompletionGeneration
from ovserve.core.media import MediaResolver
from ovserve.dialects.openai.audio.adapter import AudioService
from ovserve.dialects.openai.audio.speech import SpeechService
from ovserve.dialects.openai.chat.adapter import ChatEndpoint
from ovserve.dialects.openai.completions.adapter import CompletionEndpoint
from ovserve.dialects.openai.responses.adapter import ResponsesEndpoint
from ovserve.dialects.openai.responses.store import ResponseStore
from ovserve.dialects.openai.retrieval.adapter import RetrievalService
from ovserve.errors import (
    MethodNotAllowedError,
    NotFoundError,
    OvserveError,
    PayloadTooLargeError,
    error_body,
)
from ovserve.loop_lag import LoopLagMonitor
from ovserve.metrics import ServerMetrics
from ovserve.models.served import ModelRegistry, ServedModel
from ovserve.settings.schema import ServerSettings

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json_error(body: dict[str, Any], status: int) -> web.Response:
    # ASCII-escaped: a message may quote client input, which must not make the answer unencodable.
    return web.Response(text=json.dumps(body, ensure_ascii=True), status=status, content_type="application/json")


def _error_response(error: OvserveError, dialect: str | None = None) -> web.Response:
    response = _json_error(error.body(), error.status_for(dialect))
    response.headers.update(error.headers())
    if error.closes_connection:
        response.force_close()
    return response


# Sent when building the real answer failed: it cannot fail itself.
_LAST_RESORT_BODY = (
    b'{"error":{"message":"internal server error; see the server log","type":"server_error",'
    b'"param":null,"code":"internal_error"}}'
)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one place where failures become HTTP responses in OpenAI's error shape; never fails itself."""
    try:
        return await _answer(request, handler)
    except (asyncio.CancelledError, ConnectionResetError):
        # The client went away (aiohttp cancels the handler): worth one line, not a traceback.
        log.info("%s %s: the client disconnected before the answer was complete", request.method, request.path)
        raise
    except Exception:
        log.exception("building the error response for %s %r failed", request.method, request.path)
        return web.Response(body=_LAST_RESORT_BODY, status=500, content_type="application/json")


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except OvserveError as exc:
        return _error_response(exc, request_dialect(request))
    except web.HTTPNotFound:
        return _error_response(NotFoundError(f"no route for {request.method} {request.path}"))
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        return _error_response(
            MethodNotAllowedError(f"{request.method} is not allowed on {request.path} (use {allowed})")
        )
    except web.HTTPRequestEntityTooLarge as exc:
        return _error_response(PayloadTooLargeError(f"the request body is larger than {exc.text or 'the limit'}"))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        body = error_body(exc.reason, "invalid_request_error" if exc.status < 500 else "server_error")
        return _json_error(body, exc.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        body = error_body("internal server error; see the server log", "server_error", code="internal_error")
        return _json_error(body, 500)


def create_app(settings: ServerSettings, models: ModelRegistry, api_keys: ApiKeys | None = None) -> web.Application:
    """The application; ``api_keys`` defaults to the settings' keys (the CLI passes its own, to
    reload them on SIGHUP)."""
    api_keys = api_keys if api_keys is not None else ApiKeys(settings.api_key, settings.api_key_file)
    drain = Drain()
    metrics = ServerMetrics()
    failures = FailedAuthentications(lambda reason: metrics.auth_failures.labels(reason=reason).inc())
    # Outermost first: errors become answers; a drain refuses before the key is even checked.
    middlewares = [
        error_middleware,
        drain.middleware(answered_while_draining=table.answered_while_draining),
        auth_middleware(
            api_keys,
            is_open=functools.partial(table.is_open, metrics_public=settings.metrics_public),
            failures=failures,
        ),
    ]
    app = web.Application(middlewares=middlewares, client_max_size=int(settings.max_request_mb * 1024 * 1024))
    app[keys.MEDIA] = MediaResolver(settings.media)
    app[keys.SETTINGS] = settings
    app[keys.MODELS] = models
    app[keys.API_KEYS] = api_keys
    app[keys.DRAIN] = drain
    chat = ChatGeneration(models, app[keys.MEDIA])
    app[keys.CHAT] = ChatEndpoint(chat)
    app[keys.COMPLETIONS] = CompletionEndpoint(CompletionGeneration(models))
    app[keys.RETRIEVAL] = RetrievalService(models)
    app[keys.AUDIO] = AudioService(models, settings.max_audio_seconds, settings.max_queued_requests)
    app[keys.SPEECH] = SpeechService(models)
    store = ResponseStore(
        settings.responses_store,
        max_count=settings.responses_store_max_count,
        max_bytes=int(settings.responses_store_max_mb * 1024 * 1024),
    )
    app[keys.RESPONSES] = ResponsesEndpoint(chat, store)
    app[keys.LOOP_LAG] = LoopLagMonitor()
    app[keys.METRICS] = metrics
    app[keys.METRICS].watch(models, app[keys.LOOP_LAG], store)
    table.add_routes(app)
    app.cleanup_ctx.append(_engines)
    app.cleanup_ctx.append(_media)
    app.cleanup_ctx.append(_loop_lag)
    app.cleanup_ctx.append(_response_store)
    return app


async def _engines(app: web.Application) -> AsyncIterator[None]:
    """Start every engine in the background: the HTTP port answers (health: 503) while they load.
    A model that cannot load is retried with growing delays and never stops the others."""
    models = app[keys.MODELS]
    loading = [asyncio.create_task(model.engine.keep_started(), name=f"load-{model.name}") for model in models]
    app[keys.ENGINE_LOADS] = loading
    yield
    for task in loading:
        task.cancel()
    await asyncio.gather(*(model.engine.close() for model in models), return_exceptions=True)


async def _media(app: web.Application) -> AsyncIterator[None]:
    """One HTTP client session for every image download."""
    await app[keys.MEDIA].start()
    yield
    await app[keys.MEDIA].close()


async def _response_store(app: web.Application) -> AsyncIterator[None]:
    yield
    app[keys.RESPONSES].store.close()


async def _loop_lag(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[keys.LOOP_LAG].run(), name="loop-lag")
    yield
    task.cancel()


def load_models(settings: ServerSettings) -> ModelRegistry:
    return ModelRegistry([ServedModel.load(model, settings) for model in settings.models])
