"""The aiohttp application: routes, the error middleware, and the engines' lifetime."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from aiohttp import web

from ovserve.api import keys, table
from ovserve.api.auth import ApiKeys, FailedAuthentications, auth_middleware
from ovserve.api.batches import line_answerer
from ovserve.api.drain import Drain
from ovserve.api.routes import request_dialect
from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.console.files import ConsoleFiles
from ovserve.console.log_ring import LogRing
from ovserve.core.chat import ChatGeneration
from ovserve.core.completion import CompletionGeneration
from ovserve.core.media import MediaResolver
from ovserve.dialects.anthropic import response as anthropic
from ovserve.dialects.anthropic.adapter import MessagesEndpoint
from ovserve.dialects.anthropic.count import CountTokensEndpoint
from ovserve.dialects.ollama import response as ollama
from ovserve.dialects.ollama.adapter import OllamaEndpoint
from ovserve.dialects.ollama.endpoints import OllamaEmbedEndpoint, OllamaGenerationEndpoint
from ovserve.dialects.openai.audio.adapter import AudioService, TranscriptionEndpoint
from ovserve.dialects.openai.audio.speech import SpeechEndpoint
from ovserve.dialects.openai.batches.runner import BatchRunner
from ovserve.dialects.openai.batches.share import BatchShare
from ovserve.dialects.openai.batches.store import BatchStore
from ovserve.dialects.openai.chat.adapter import ChatEndpoint
from ovserve.dialects.openai.completions.adapter import CompletionEndpoint
from ovserve.dialects.openai.files.records import shared_database
from ovserve.dialects.openai.files.store import FileStore, files_directory
from ovserve.dialects.openai.images.adapter import ImagesEndpoint
from ovserve.dialects.openai.load import LoadModelEndpoint
from ovserve.dialects.openai.responses.adapter import ResponsesEndpoint
from ovserve.dialects.openai.responses.backends import open_store, response_ids
from ovserve.dialects.openai.responses.ids import default_replica_name
from ovserve.dialects.openai.retrieval.adapter import (
    DetokenizeEndpoint,
    EmbeddingsEndpoint,
    RerankEndpoint,
    TokenizeEndpoint,
)
from ovserve.errors import (
    MethodNotAllowedError,
    NotFoundError,
    OvserveError,
    PayloadTooLargeError,
    error_body,
)
from ovserve.loop_lag import LoopLagMonitor
from ovserve.metrics import ServerMetrics
from ovserve.models.manager import ResidencyManager
from ovserve.models.reload import ConfigReloader
from ovserve.models.served import ModelRegistry, ServedModel
from ovserve.settings.schema import ServerSettings

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json_error(body: Mapping[str, object], status: int) -> web.Response:
    # ASCII-escaped: a message may quote client input, which must not make the answer unencodable.
    return web.Response(text=json.dumps(body, ensure_ascii=True), status=status, content_type="application/json")


def _error_response(request: web.Request, error: OvserveError) -> web.Response:
    """``error`` in the shape of the dialect ``request`` speaks (``table.error_dialect``)."""
    dialect = table.error_dialect(request)
    if dialect == "ollama":
        response = _json_error(ollama.error_body(ollama.error_message(error)), ollama.error_status(error))
    elif dialect == "anthropic":
        response = _json_error(anthropic.error_body(error), anthropic.error_status(error))
    else:
        response = _json_error(error.body(), error.status_for(request_dialect(request)))
    response.headers.update(error.headers())
    if error.closes_connection:
        response.force_close()
    return response


def _status_response(request: web.Request, status: int, message: str, code: str | None = None) -> web.Response:
    """An answer that is only an HTTP status and a message (aiohttp's own refusals, our crashes)."""
    dialect = table.error_dialect(request)
    if dialect == "ollama":
        return _json_error(ollama.error_body(message), status)
    if dialect == "anthropic":
        return _json_error(anthropic.ErrorResponse.plain(status, message).dump(), status)
    return _json_error(
        error_body(message, "invalid_request_error" if status < 500 else "server_error", code=code), status
    )


# Sent when building the real answer failed: it cannot fail itself.
_LAST_RESORT_BODY = (
    b'{"error":{"message":"internal server error; see the server log","type":"server_error",'
    b'"param":null,"code":"internal_error"}}'
)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one place where failures become HTTP responses, in the error shape of the request's
    dialect (OpenAI's; Anthropic's and Ollama's on their routes); never fails itself."""
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
        return _error_response(request, exc)
    except web.HTTPNotFound:
        return _error_response(request, NotFoundError(f"no route for {request.method} {request.path}"))
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        return _error_response(
            request, MethodNotAllowedError(f"{request.method} is not allowed on {request.path} (use {allowed})")
        )
    except web.HTTPRequestEntityTooLarge as exc:
        return _error_response(
            request, PayloadTooLargeError(f"the request body is larger than {exc.text or 'the limit'}")
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _status_response(request, exc.status, exc.reason)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _status_response(request, 500, "internal server error; see the server log", code="internal_error")


def create_app(
    settings: ServerSettings, models: ModelRegistry, api_keys: ApiKeys | None = None, *, clock: Clock = SYSTEM_CLOCK
) -> web.Application:
    """The application; ``api_keys`` defaults to the settings' keys (the CLI passes its own, to
    reload them on SIGHUP); ``clock`` drives its timers (``ovserve.clock``: tests move their own)."""
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
    app[keys.EMBEDDINGS] = EmbeddingsEndpoint(models)
    app[keys.RERANK] = RerankEndpoint(models)
    app[keys.TOKENIZE] = TokenizeEndpoint(models)
    app[keys.DETOKENIZE] = DetokenizeEndpoint(models)
    app[keys.TRANSCRIPTIONS] = TranscriptionEndpoint(AudioService(models, settings.max_audio_seconds))
    app[keys.SPEECH] = SpeechEndpoint(models)
    app[keys.IMAGES] = ImagesEndpoint(models)
    store = open_store(
        settings.responses_store,
        max_count=settings.responses_store_max_count,
        max_bytes=int(settings.responses_store_max_mb * 1024 * 1024),
        max_age=settings.responses_store_max_age_s,
        password_file=settings.responses_store_password_file,
        clock=clock,
    )
    replica = settings.replica_name or default_replica_name(settings.port)
    app[keys.RESPONSES] = ResponsesEndpoint(chat, store, response_ids(settings.responses_store, replica))
    files = FileStore(
        files_directory(settings.files_dir, settings.responses_store),
        max_bytes=int(settings.max_file_mb * 1024 * 1024),
        max_lines=settings.max_file_lines,
        database=shared_database(settings.files_dir, settings.responses_store),
        password_file=settings.responses_store_password_file,
    )
    app[keys.FILES] = files
    share = BatchShare(
        models,
        alone=settings.batch_concurrency,
        shared=settings.batch_concurrency_shared,
        hold=settings.batch_share_hold,
    )
    app[keys.BATCHES] = BatchRunner(BatchStore(files), share, models, line_answerer(app), metrics=metrics, name=replica)
    app[keys.MESSAGES] = MessagesEndpoint(chat)
    app[keys.COUNT_TOKENS] = CountTokensEndpoint(models, app[keys.MESSAGES])
    app[keys.LOOP_LAG] = LoopLagMonitor(clock=clock)
    residency = ResidencyManager(models, settings, clock=clock)
    app[keys.RESIDENCY] = residency
    ollama_generation = OllamaEndpoint(models, chat, CompletionGeneration(models))
    app[keys.OLLAMA] = OllamaGenerationEndpoint(ollama_generation, residency.expire)
    app[keys.OLLAMA_EMBED] = OllamaEmbedEndpoint(models)
    app[keys.LOAD_MODEL] = LoadModelEndpoint(models, residency.describe)
    if settings.config_path is not None:
        app[keys.CONFIG_RELOADER] = ConfigReloader(settings, models, residency)
    app[keys.METRICS] = metrics
    app[keys.METRICS].scrape.watch(models, app[keys.LOOP_LAG], store, residency, files)
    app[keys.CONSOLE_FILES] = ConsoleFiles()
    app[keys.CONSOLE_LOGS] = LogRing()
    table.add_routes(app)
    app.cleanup_ctx.append(_console_logs)
    app.cleanup_ctx.append(_engines)
    app.cleanup_ctx.append(_config_watch)
    app.cleanup_ctx.append(_media)
    app.cleanup_ctx.append(_loop_lag)
    app.cleanup_ctx.append(_response_store)
    app.cleanup_ctx.append(_files)
    app.cleanup_ctx.append(_batches)
    return app


async def _engines(app: web.Application) -> AsyncIterator[None]:
    """Start the engines of the models loaded at start in the background: the HTTP port answers
    (health: 503) while they load. A model that cannot load is retried with growing delays and
    never stops the others. Models loaded on demand wait for their first request."""
    residency = app[keys.RESIDENCY]
    app[keys.ENGINE_LOADS] = residency.start()
    yield
    await residency.close()


async def _console_logs(app: web.Application) -> AsyncIterator[None]:
    """The console's Logs view: warnings and errors of the ``ovserve`` logger while the app runs
    (kept even with --console false: a bounded deque, and nothing is logged per token)."""
    ring = app[keys.CONSOLE_LOGS]
    logger = logging.getLogger("ovserve")
    logger.addHandler(ring)
    yield
    logger.removeHandler(ring)


async def _config_watch(app: web.Application) -> AsyncIterator[None]:
    """With --config_path: config.json and its graphs checked every --file_system_poll_wait_seconds."""
    reloader = app.get(keys.CONFIG_RELOADER)
    interval = app[keys.SETTINGS].file_system_poll_wait_seconds
    task = None
    if reloader is not None and interval > 0:
        task = asyncio.create_task(reloader.watch(interval), name="config-watch")
    yield
    if task is not None:
        task.cancel()


async def _media(app: web.Application) -> AsyncIterator[None]:
    """One HTTP client session for every image download."""
    await app[keys.MEDIA].start()
    yield
    await app[keys.MEDIA].close()


async def _response_store(app: web.Application) -> AsyncIterator[None]:
    """A shared store's pool and schema set up before the first request (a fault there is counted,
    and retried by the first call: the server starts either way)."""
    await app[keys.RESPONSES].store.start()
    yield
    await app[keys.RESPONSES].store.aclose()


async def _files(app: web.Application) -> AsyncIterator[None]:
    """The files store's directory and database, before the first request."""
    await app[keys.FILES].start()
    yield
    await app[keys.FILES].aclose()


async def _batches(app: web.Application) -> AsyncIterator[None]:
    """Batches left unfinished by the last run resume; at exit the running ones stop where they are."""
    await app[keys.BATCHES].start()
    yield
    await app[keys.BATCHES].aclose()


async def _loop_lag(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[keys.LOOP_LAG].run(), name="loop-lag")
    yield
    task.cancel()


def load_models(settings: ServerSettings) -> ModelRegistry:
    return ModelRegistry([ServedModel.load(model, settings) for model in settings.models])
