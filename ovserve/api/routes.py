"""OpenAI's routes and the operator's: the request envelope's ways in (``ovserve.api.envelope``) for
every route that touches a model, thin handlers for the rest (model lists, unload, reload, health,
metrics). Errors are raised, never built here."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable
from typing import Literal, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from ovserve.api import keys
from ovserve.api.auth import is_authorized
from ovserve.api.envelope import EventWriter, Form, RawWriter, RequestView, Way, json_response, validated
from ovserve.api.field_policy import Endpoint, apply_field_policy, parse_extra_parameters
from ovserve.api.sse import NamedEventWriter
from ovserve.dialects.anthropic import response as anthropic
from ovserve.dialects.openai.audio.adapter import TranscriptionEndpoint
from ovserve.dialects.openai.audio.request import AudioRequest, parse_form
from ovserve.dialects.openai.audio.speech import SpeechRequest
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.images.request import (
    ImageEditFields,
    ImageEditRequest,
    ImageGenerationRequest,
    edit_parts,
)
from ovserve.dialects.openai.models import ModelList, ModelObject
from ovserve.dialects.openai.request import SamplingRequest
from ovserve.dialects.openai.retrieval.request import (
    DetokenizeRequest,
    EmbeddingRequest,
    RerankRequest,
    TokenizeRequest,
)
from ovserve.errors import AZURE, BadRequestError
from ovserve.json_types import JsonObject
from ovserve.models.served import ServedModel

log = logging.getLogger(__name__)

Body = TypeVar("Body", bound=BaseModel)
RequestModel = TypeVar("RequestModel", bound=SamplingRequest)
# Anthropic's clients send it on every request: it selects Anthropic's shapes on shared routes.
ANTHROPIC_HEADER = "anthropic-version"


def _context_length(model: ServedModel) -> int | None:
    return model.context_length if model.task == "text_generation" else None


def anthropic_model_list(models: Iterable[ServedModel]) -> anthropic.ModelList:
    data = [anthropic.ModelInfo.of(model.name, model.created, _context_length(model)) for model in models]
    return anthropic.ModelList(
        data=data, has_more=False, first_id=data[0].id if data else None, last_id=data[-1].id if data else None
    )


def request_dialect(request: RequestView) -> str | None:
    """Azure AI Foundry clients always send ``?api-version=``; its contract has its own 422s."""
    return AZURE if "api-version" in request.query else None


def parse_request(
    request: RequestView, payload: JsonObject, endpoint: Endpoint, model: type[RequestModel]
) -> RequestModel:
    """Field policy (other servers' fields, Azure's extra-parameters header), then pydantic."""
    mode = parse_extra_parameters(request.headers.get("extra-parameters"))
    models = request.app[keys.MODELS]
    if request_dialect(request) == AZURE and "model" not in payload and len(models) == 1:
        # Azure AI Foundry: "model ... is ignored if the endpoint serves only one model".
        payload = {**payload, "model": next(iter(models)).name}
    cleaned, dropped = apply_field_policy(payload, endpoint, frozenset(model.model_fields), mode)
    parsed = validated(model, cleaned)
    ignored = sorted({*dropped, *parsed.unknown_fields()})
    if ignored:
        log.info("%s request to %r: ignoring fields %s", endpoint.value, parsed.model, ignored)
    return parsed


def _parsed(model: type[Body]) -> Callable[[RequestView, JsonObject], Body]:
    """A parser of a JSON body into ``model`` (a 400 naming the field)."""

    return lambda request, payload: validated(model, payload)


def _sampling(endpoint: Endpoint, model: type[RequestModel]) -> Callable[[RequestView, JsonObject], RequestModel]:
    return lambda request, payload: parse_request(request, payload, endpoint, model)


CHAT = Way(Endpoint.CHAT.value, _sampling(Endpoint.CHAT, ChatCompletionRequest), keys.CHAT)
COMPLETIONS = Way(Endpoint.COMPLETIONS.value, _sampling(Endpoint.COMPLETIONS, CompletionRequest), keys.COMPLETIONS)
EMBEDDINGS = Way("embeddings", _parsed(EmbeddingRequest), keys.EMBEDDINGS)
RERANK = Way("rerank", _parsed(RerankRequest), keys.RERANK)
TOKENIZE = Way("tokenize", _parsed(TokenizeRequest), keys.TOKENIZE)
DETOKENIZE = Way("detokenize", _parsed(DetokenizeRequest), keys.DETOKENIZE)


def _transcript_way(name: str, task: Literal["transcribe", "translate"]) -> Way[TranscriptionEndpoint]:
    parse = functools.partial(_form, task=task)
    return Way(name, parse, keys.TRANSCRIPTIONS, body="form", writer=EventWriter)


def _form(request: RequestView, form: Form, *, task: Literal["transcribe", "translate"]) -> AudioRequest:
    return parse_form(form, task)


TRANSCRIPTIONS = _transcript_way("audio_transcriptions", "transcribe")
TRANSLATIONS = _transcript_way("audio_translations", "translate")
SPEECH = Way("audio_speech", _parsed(SpeechRequest), keys.SPEECH, writer=RawWriter)
IMAGE_GENERATIONS = Way("images_generations", _parsed(ImageGenerationRequest), keys.IMAGES, writer=NamedEventWriter)


def _image_edit(request: RequestView, form: Form) -> ImageEditRequest:
    fields, image, mask = edit_parts(form)
    return ImageEditRequest(validated(ImageEditFields, fields), image, mask)


IMAGE_EDITS = Way("images_edits", _image_edit, keys.IMAGES, body="form", writer=NamedEventWriter)
LOAD_MODEL = Way("load_model", lambda request, _: request.match_info["name"], keys.LOAD_MODEL, body="none")


async def list_models(request: web.Request) -> web.Response:
    """Every configured model, loaded or not (``ovserve.state`` says which)."""
    models = request.app[keys.MODELS]
    if request.headers.get(ANTHROPIC_HEADER) is not None:
        return json_response(anthropic_model_list(models))
    return json_response(ModelList.of(models, request.app[keys.RESIDENCY].describe))


async def get_model(request: web.Request) -> web.Response:
    model = request.app[keys.MODELS].get(request.match_info["name"])
    if request.headers.get(ANTHROPIC_HEADER) is not None:
        return json_response(anthropic.ModelInfo.of(model.name, model.created, _context_length(model)))
    return json_response(ModelObject.of(model, request.app[keys.RESIDENCY].describe))


async def unload_model(request: web.Request) -> web.Response:
    """Unload a model once the requests using it have finished (409 for a pinned model); its object."""
    model = request.app[keys.MODELS].get(request.match_info["name"])
    await request.app[keys.RESIDENCY].unload(model, "api")
    return json_response(ModelObject.of(model, request.app[keys.RESIDENCY].describe))


async def reload_config(request: web.Request) -> web.Response:
    """OVMS's ``POST /v1/config/reload``: apply config.json as it is now; what changed (400 naming
    file and line when it cannot be served: nothing changes then)."""
    reloader = request.app.get(keys.CONFIG_RELOADER)
    if reloader is None:
        raise BadRequestError("this server serves no --config_path: there is no config to reload")
    report = await reloader.reload()
    return json_response(dataclasses.asdict(report))


async def health_live(request: web.Request) -> web.Response:
    return web.Response(status=200)


def _server_ready(request: web.Request) -> bool:
    """OVMS's server readiness: not draining, no model loading at start or restarting, and at
    least one serving or loadable on demand. A model whose start fails (retried with growing
    delays, its own readiness 503) does not take the others out of a load balancer; a model
    unloaded on purpose (on demand, idle, evicted) counts as available: its next request loads it."""
    if request.app[keys.DRAIN].draining:
        return False
    residency, registry = request.app[keys.RESIDENCY], request.app[keys.MODELS]
    models = list(registry)
    return all(residency.settled(model) for model in models) and any(residency.available(model) for model in models)


async def health_ready(request: web.Request) -> web.Response:
    """200 once the models have loaded (see :func:`_server_ready`); 503 while loading, restarting,
    after a stall, and from the start of a drain."""
    return web.Response(status=200 if _server_ready(request) else 503)


async def model_ready(request: web.Request) -> web.Response:
    """KServe-style per-model readiness (OVMS: /v2/models/{name}/ready): 200 while its engine is
    loaded; an unloaded model is 503 here (the server's readiness counts it as available). Open
    to probes: an unknown name's 404 lists the served models only to a caller with a key."""
    authorized = is_authorized(request, request.app[keys.API_KEYS])
    model = request.app[keys.MODELS].get(request.match_info["name"], list_served=authorized)
    ready = model.engine.ready and not request.app[keys.DRAIN].draining
    return web.Response(status=200 if ready else 503)


async def health(request: web.Request) -> web.Response:
    """Overall state; each model's state only for a caller with a key (model names stay private)."""
    models = request.app[keys.MODELS]
    draining = request.app[keys.DRAIN].draining
    ready = _server_ready(request)
    status = "draining" if draining else "ok" if ready else "loading"
    body: JsonObject = {"status": status}
    if is_authorized(request, request.app[keys.API_KEYS]):
        body["models"] = {model.name: model.engine.state.value for model in models}
    return json_response(body, status=200 if ready else 503)


# A scrape waits at most this long for fresh engine counters, then reports the last ones.
_STATS_WAIT_S = 0.5


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format (prometheus-client). Engine counters are refreshed first, each engine
    given at most half a second: a stuck engine shows as an old ``ovserve_engine_report_age_seconds``,
    never as a slow or empty scrape."""
    models = [model for model in request.app[keys.MODELS] if model.engine.ready]
    await asyncio.gather(*(model.engine.refresh_report(_STATS_WAIT_S) for model in models))
    body = generate_latest(request.app[keys.METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
