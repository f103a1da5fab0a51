"""Every route the server answers, once, with the attributes the middlewares read.

A :class:`Route` names its canonical path, the prefixes it is also served under (OpenAI clients
call ``/v1``, llama.cpp clients no prefix at all), whether it answers without an API key (probes),
whether it keeps answering during a drain (probes and scrapes must see the drain), the error
shape it answers in (:func:`error_dialect`: OpenAI's, Anthropic's on the Messages routes, or Ollama's on
``/api/*`` and ``/``), and whether it is a POST operation the OpenAPI document describes (the
operator's routes are not). The auth, drain and error middlewares ask :func:`route_of` instead
of keeping path lists of their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from ovserve.api import anthropic, batches, console, files, ollama, responses, routes
from ovserve.api.envelope import Way
from ovserve.api.openapi import openapi_json

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The OpenAI API's own version prefix, and what else the same handlers answer under.
API_PREFIXES = ("/v3", "/v1", "")
MODEL_LIST_PREFIXES = ("/v3", "/v1")
# Anthropic clients call /v1; /v3 is ovserve's own prefix.
ANTHROPIC_PREFIXES = ("/v1", "/v3")

# Whose error shape a route answers in: OpenAI's, Anthropic's or Ollama's. Routes that several
# dialects speak ("by_header"), and requests that matched no route: Ollama's under /api/, else
# Anthropic's when the request carries Anthropic's version header, else OpenAI's.
ErrorDialect = Literal["openai", "anthropic", "ollama"]
ANTHROPIC_HEADER = "anthropic-version"
OLLAMA_PATH = "/api/"


@dataclass(frozen=True)
class Route:
    method: Literal["GET", "POST", "DELETE"]
    path: str  # without prefix when ``prefixes`` is set
    # A route that touches a model comes in through the request envelope: its Way (ovserve.api.envelope).
    handler: Handler | Way[Any]
    prefixes: tuple[str, ...] = ("",)
    open: bool = False  # answered without an API key
    while_draining: bool = False  # still answered once SIGTERM started a drain
    metrics: bool = False  # /metrics: open with --metrics_public
    errors: ErrorDialect | Literal["by_header"] = "openai"
    # A POST that /openapi.json documents (and the fuzzer sends): the API's operations, not the
    # operator's (model load/unload, config reload: no body, and not to be fuzzed).
    documented: bool = True

    @property
    def paths(self) -> list[str]:
        return [prefix + self.path for prefix in self.prefixes]

    @property
    def enveloped(self) -> bool:
        """Whether the route comes in through the request envelope."""
        return isinstance(self.handler, Way)

    def serve(self) -> Handler:
        return self.handler.handler() if isinstance(self.handler, Way) else self.handler


ROUTES: tuple[Route, ...] = (
    # OpenAI's operations, each under /v3, /v1 and no prefix.
    *(
        Route("POST", path, way, API_PREFIXES)
        for path, way in (
            ("/chat/completions", routes.CHAT),
            ("/completions", routes.COMPLETIONS),
            ("/responses", responses.CREATE),
            ("/embeddings", routes.EMBEDDINGS),
            ("/rerank", routes.RERANK),
            ("/audio/transcriptions", routes.TRANSCRIPTIONS),
            ("/audio/translations", routes.TRANSLATIONS),
            ("/audio/speech", routes.SPEECH),
            ("/images/generations", routes.IMAGE_GENERATIONS),
            ("/images/edits", routes.IMAGE_EDITS),
            ("/tokenize", routes.TOKENIZE),
            ("/detokenize", routes.DETOKENIZE),
        )
    ),
    Route("GET", "/responses/{response_id}", responses.get_response, API_PREFIXES),
    Route("DELETE", "/responses/{response_id}", responses.delete_response, API_PREFIXES),
    # OpenAI's Files API (ovserve.api.files): under /v3 and /v1 only (no model work, no llama.cpp client).
    # Its POST is not in /openapi.json yet (docs/batch.md says what is left).
    Route("POST", "/files", files.create_file, MODEL_LIST_PREFIXES),
    Route("GET", "/files", files.list_files, MODEL_LIST_PREFIXES),
    Route("GET", "/files/{file_id}", files.get_file, MODEL_LIST_PREFIXES),
    Route("DELETE", "/files/{file_id}", files.delete_file, MODEL_LIST_PREFIXES),
    Route("GET", "/files/{file_id}/content", files.file_content, MODEL_LIST_PREFIXES),
    # OpenAI's Batch API (ovserve.api.batches): its lines come in through the envelope, not its routes.
    Route("POST", "/batches", batches.create_batch, MODEL_LIST_PREFIXES),
    Route("GET", "/batches", batches.list_batches, MODEL_LIST_PREFIXES),
    Route("GET", "/batches/{batch_id}", batches.get_batch, MODEL_LIST_PREFIXES),
    Route("POST", "/batches/{batch_id}/cancel", batches.cancel_batch, MODEL_LIST_PREFIXES),
    Route("POST", "/messages", anthropic.MESSAGES, ANTHROPIC_PREFIXES, errors="anthropic"),
    Route("POST", "/messages/count_tokens", anthropic.COUNT_TOKENS, ANTHROPIC_PREFIXES, errors="anthropic"),
    Route("GET", "/models", routes.list_models, MODEL_LIST_PREFIXES, errors="by_header"),
    Route("GET", "/models/{name}", routes.get_model, MODEL_LIST_PREFIXES, errors="by_header"),
    Route("POST", "/models/{name}/load", routes.LOAD_MODEL, MODEL_LIST_PREFIXES, documented=False),
    Route("POST", "/models/{name}/unload", routes.unload_model, MODEL_LIST_PREFIXES, documented=False),
    Route("POST", "/v1/config/reload", routes.reload_config, documented=False),
    Route("GET", "/v2/health/live", routes.health_live, open=True, while_draining=True),
    Route("GET", "/v2/health/ready", routes.health_ready, open=True, while_draining=True),
    Route("GET", "/v2/models/{name}/ready", routes.model_ready, open=True, while_draining=True),
    Route("GET", "/health", routes.health, open=True, while_draining=True),
    Route("GET", "/metrics", routes.metrics, while_draining=True, metrics=True),
    Route("GET", "/openapi.json", openapi_json),
    # Ollama's native API (ovserve.api.ollama); "/" is its liveness answer, open as the probes are,
    # and the browser console's page for a browser (ovserve.api.console: decided by Accept).
    Route("GET", "/", console.root, open=True, errors="ollama"),
    # The console: its page and files are open and name no model; its data answers need the key.
    Route("GET", "/console", console.redirect, open=True),
    Route("GET", "/console/", console.page, open=True),
    Route("GET", "/console/static/{file}", console.static_file, open=True),
    Route("GET", "/console/api/logs", console.logs),
    Route("GET", "/console/api/info", console.info),
    Route("POST", "/api/chat", ollama.CHAT, errors="ollama"),
    Route("POST", "/api/generate", ollama.GENERATE, errors="ollama"),
    Route("POST", "/api/embed", ollama.EMBED, errors="ollama"),
    Route("POST", "/api/embeddings", ollama.EMBEDDINGS, errors="ollama"),
    Route("GET", "/api/tags", ollama.tags, errors="ollama"),
    Route("GET", "/api/ps", ollama.ps, errors="ollama"),
    Route("POST", "/api/show", ollama.show, errors="ollama"),
    Route("GET", "/api/version", ollama.version, errors="ollama"),
    *(
        Route("POST", f"/api/{name}", ollama.model_store, errors="ollama")
        for name in ("pull", "push", "create", "copy")
    ),
    Route("DELETE", "/api/delete", ollama.model_store, errors="ollama"),
)

_BY_PATH = {(route.method, path): route for route in ROUTES for path in route.paths}


def add_routes(app: web.Application) -> None:
    for route in ROUTES:
        handler = route.serve()
        for path in route.paths:
            if route.method == "GET":
                app.router.add_get(path, handler)  # and HEAD
            else:
                app.router.add_route(route.method, path, handler)


def is_open(request: web.Request, *, metrics_public: bool) -> bool:
    """Answered without an API key: the probes, and /metrics with --metrics_public."""
    route = route_of(request)
    return route is not None and (route.open or (metrics_public and route.metrics))


def answered_while_draining(request: web.Request) -> bool:
    route = route_of(request)
    return route is not None and route.while_draining


def error_dialect(request: web.Request) -> ErrorDialect:
    """The error shape ``request`` is answered in (see :data:`ErrorDialect`)."""
    route = route_of(request)
    if route is not None and route.errors != "by_header":
        return route.errors
    if request.path.startswith(OLLAMA_PATH):
        return "ollama"
    return "anthropic" if ANTHROPIC_HEADER in request.headers else "openai"


def route_of(request: web.Request) -> Route | None:
    """The table's entry for the route ``request`` matched; None for no route (a 404 or 405)."""
    info = request.match_info.route.resource
    if info is None:
        return None
    method = request.method if request.method != "HEAD" else "GET"
    return _BY_PATH.get((method, info.canonical))  # type: ignore[arg-type]
