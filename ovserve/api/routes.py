"""Thin HTTP handlers: parse -> service -> JSON or SSE. Errors are raised, never built here."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from typing import Any, Literal, Protocol, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from multidict import MultiDictProxy
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError

from ovserve.api import keys
from ovserve.api.auth import is_authorized
from ovserve.api.field_policy import Endpoint, apply_field_policy, parse_extra_parameters
from ovserve.api.json_body import parse_json_object
from ovserve.api.sse import SSEWriter, dumps
from ovserve.core.engine_work import admitted, leased
from ovserve.core.job import Job
from ovserve.dialects.anthropic import response as anthropic
from ovserve.dialects.body import Body as BodyModel
from ovserve.dialects.body import EncodedBody
from ovserve.dialects.openai.audio.adapter import AudioJob, AudioService
from ovserve.dialects.openai.audio.request import parse_form
from ovserve.dialects.openai.audio.response import delta_event as audio_delta_event
from ovserve.dialects.openai.audio.response import done_event as audio_done_event
from ovserve.dialects.openai.audio.response import render as render_transcript
from ovserve.dialects.openai.audio.speech import Speech, SpeechRequest
from ovserve.dialects.openai.chat.adapter import ChatEndpoint
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.completions.adapter import CompletionEndpoint
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.models import ModelList, ModelObject
from ovserve.dialects.openai.request import SamplingRequest
from ovserve.dialects.openai.responses.store import OPEN_OWNER
from ovserve.dialects.openai.retrieval.request import (
    DetokenizeRequest,
    EmbeddingRequest,
    RerankRequest,
    TokenizeRequest,
)
from ovserve.engine.messages import TranscribeResult
from ovserve.errors import (
    AZURE,
    BadRequestError,
    DeadlineExceededError,
    OvserveError,
    PayloadTooLargeError,
    RequestTimeoutError,
    UnsupportedMediaTypeError,
    bad_request,
)
from ovserve.json_types import JsonObject
from ovserve.metrics import RequestRecorder
from ovserve.models.admission import Ticket
from ovserve.models.served import ServedModel

log = logging.getLogger(__name__)

# curl -d sends form-urlencoded by default: accept it as JSON rather than fail users of the docs.
_JSON_CONTENT_TYPES = {
    "application/json",
    "application/x-www-form-urlencoded",
    "application/octet-stream",
    "",
}


def json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(payload), status=status, content_type="application/json")


async def read_json_object(request: web.Request) -> JsonObject:
    content_type = request.content_type
    if content_type not in _JSON_CONTENT_TYPES and not content_type.endswith("+json"):
        raise UnsupportedMediaTypeError(f"expected 'application/json', got '{content_type}'")
    # The whole body within --body_timeout: a client dripping bytes would otherwise hold the
    # connection (and a file descriptor) for as long as it likes.
    body_timeout = request.app[keys.SETTINGS].body_timeout_s
    try:
        async with asyncio.timeout(body_timeout):
            body = await request.read()
    except TimeoutError:
        raise RequestTimeoutError(f"the request body was not received within {body_timeout:g} s") from None
    return parse_json_object(body)


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


def request_dialect(request: web.Request) -> str | None:
    """Azure AI Foundry clients always send ``?api-version=``; its contract has its own 422s."""
    return AZURE if "api-version" in request.query else None


def parse_request(
    request: web.Request, payload: JsonObject, endpoint: Endpoint, model: type[RequestModel]
) -> RequestModel:
    """Field policy (other servers' fields, Azure's extra-parameters header), then pydantic."""
    mode = parse_extra_parameters(request.headers.get("extra-parameters"))
    models = request.app[keys.MODELS]
    if request_dialect(request) == AZURE and "model" not in payload and len(models) == 1:
        # Azure AI Foundry: "model ... is ignored if the endpoint serves only one model".
        payload = {**payload, "model": next(iter(models)).name}
    cleaned, dropped = apply_field_policy(payload, endpoint, frozenset(model.model_fields), mode)
    try:
        parsed = model.model_validate(cleaned)
    except ValidationError as exc:
        raise bad_request(exc) from None
    ignored = sorted({*dropped, *parsed.unknown_fields()})
    if ignored:
        log.info("%s request to %r: ignoring fields %s", endpoint.value, parsed.model, ignored)
    return parsed


class Call(Protocol):
    """One request prepared by a dialect: its core job, and whether it streams."""

    @property
    def job(self) -> Job: ...

    @property
    def streaming(self) -> bool: ...


# What a dialect's adapter answers with: one of its response models (a stream's event may come
# already encoded from one: EncodedBody).
Answer = BodyModel | EncodedBody
CallT = TypeVar("CallT", bound=Call)
ParsedT = TypeVar("ParsedT", contravariant=True)


class GenerationEndpoint(Protocol[ParsedT, CallT]):
    """A dialect's adapter, as :func:`generate` drives it (``ovserve.dialects``)."""

    async def prepare(self, request: ParsedT, caller: str, /) -> CallT:
        """The call for a validated request; every 4xx/503 is raised here, before any engine work."""

    async def complete(self, call: CallT, /) -> Answer:
        """The unary answer."""

    def stream(self, call: CallT, /) -> AsyncIterator[Answer]:
        """The stream's events, in order."""

    def failure_event(self, call: CallT, error: OvserveError, /) -> Answer:
        """The last event of a stream that failed after its first byte."""


async def chat_completions(request: web.Request) -> web.StreamResponse:
    def parse(payload: JsonObject) -> ChatCompletionRequest:
        return parse_request(request, payload, Endpoint.CHAT, ChatCompletionRequest)

    endpoint: ChatEndpoint = request.app[keys.CHAT]
    return await generate(request, Endpoint.CHAT.value, parse, endpoint)


async def completions(request: web.Request) -> web.StreamResponse:
    def parse(payload: JsonObject) -> CompletionRequest:
        return parse_request(request, payload, Endpoint.COMPLETIONS, CompletionRequest)

    endpoint: CompletionEndpoint = request.app[keys.COMPLETIONS]
    return await generate(request, Endpoint.COMPLETIONS.value, parse, endpoint)


async def generate(
    request: web.Request,
    endpoint_name: str,
    parse: Callable[[JsonObject], BaseModel],
    endpoint: GenerationEndpoint[Any, CallT],
    *,
    writer: type[SSEWriter] = SSEWriter,
) -> web.StreamResponse:
    """Validate, prepare, admit (429 when the model's queue is full), then answer within
    ``--request_timeout``; every request is counted once in ``/metrics`` with its outcome.

    ``parse`` validates the body into the dialect's request model; ``endpoint`` is the dialect's
    adapter; ``writer`` is how its stream is framed.
    """
    settings = request.app[keys.SETTINGS]
    recorder = request.app[keys.METRICS].recorder(endpoint_name)
    timeout = settings.request_timeout
    deadline = asyncio.get_running_loop().time() + timeout if timeout is not None else None
    call: CallT | None = None
    try:
        parsed = parse(await read_json_object(request))
        call = await endpoint.prepare(parsed, caller_of(request))
        job = call.job
        recorder.model = job.model.name
        job.admit(recorder)
        await job.take_engine(deadline)
        if call.streaming:
            return await _stream(request, endpoint, call, recorder, deadline, writer(request))
        try:
            async with asyncio.timeout_at(deadline):
                body = await endpoint.complete(call)
        except TimeoutError:
            raise _deadline_error(timeout) from None
        recorder.finished(job.outcome, 200)
        return json_response(body)
    except OvserveError as exc:
        recorder.finished(exc.error_type, exc.status)
        raise
    except asyncio.CancelledError:
        # The client went away before a unary answer (aiohttp cancels the handler); 499 as nginx logs it.
        recorder.finished("disconnected", 499)
        raise
    finally:
        if call is not None:
            call.job.release()


def caller_of(request: web.Request) -> str:
    """Whose stored state this request may create, read, continue and delete: the digest of the API
    key it presented, or the open owner on a server without keys. A request the auth middleware
    did not let through has no caller: KeyError (a 500), never someone else's rows."""
    caller = request[keys.CALLER]
    return OPEN_OWNER if caller is None else caller


def _deadline_error(timeout: float | None) -> DeadlineExceededError:
    return DeadlineExceededError(f"the request took longer than --request_timeout ({timeout:g} s); it was cancelled")


async def _stream(
    request: web.Request,
    endpoint: GenerationEndpoint[Any, CallT],
    call: CallT,
    recorder: RequestRecorder,
    deadline: float | None,
    writer: SSEWriter,
) -> web.StreamResponse:
    outcome = "disconnected"  # unless the stream ends, or fails, below
    job = call.job
    # aclosing: however the loop ends, the generator's cleanup (cancelling the engine request)
    # runs now, not whenever the abandoned generator is garbage-collected.
    async with contextlib.aclosing(endpoint.stream(call)) as events:  # type: ignore[type-var]
        try:
            await writer.open()
            try:
                try:
                    async with asyncio.timeout_at(deadline):
                        async for event in events:
                            await writer.send(event)
                except TimeoutError:
                    raise _deadline_error(request.app[keys.SETTINGS].request_timeout) from None
                outcome = job.outcome
            except OvserveError as exc:
                # Headers are gone: the failure travels as an error event, then the stream ends normally.
                log.warning("stream %s failed: %s", job.id, exc.message)
                outcome = exc.error_type
                await writer.send(endpoint.failure_event(call, exc))
            await writer.done()
        except ConnectionResetError:
            # A write found the connection gone before aiohttp cancelled this handler. An
            # ordinary event: one line, no traceback (aiohttp would log one for an escaping error).
            log.info("stream %s: the client disconnected", job.id)
        finally:
            recorder.finished(outcome, 200)
    return writer.response


Body = TypeVar("Body", bound=BaseModel)


def _parse_body(payload: JsonObject, model: type[Body]) -> Body:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise bad_request(exc) from None


async def embeddings(request: web.Request) -> web.Response:
    service = request.app[keys.RETRIEVAL]
    return await _retrieval(request, "embeddings", lambda payload, recorder, deadline: service.embed(
        _parse_body(payload, EmbeddingRequest), recorder, deadline))  # fmt: skip


async def rerank(request: web.Request) -> web.Response:
    service = request.app[keys.RETRIEVAL]
    return await _retrieval(request, "rerank", lambda payload, recorder, deadline: service.rerank(
        _parse_body(payload, RerankRequest), recorder, deadline))  # fmt: skip


async def _retrieval(request: web.Request, endpoint: str, work: Any) -> web.Response:
    """Parse and answer an embeddings or rerank request within ``--request_timeout`` (the service
    bounds its work by the deadline; a wait for its model's load ends in a 503 instead); counted
    once in ``/metrics`` with its outcome, as generation requests are."""
    timeout = request.app[keys.SETTINGS].request_timeout
    deadline = asyncio.get_running_loop().time() + timeout if timeout is not None else None
    recorder = request.app[keys.METRICS].recorder(endpoint)
    try:
        payload = await read_json_object(request)
        try:
            body = await work(payload, recorder, deadline)
        except TimeoutError:
            raise _deadline_error(timeout) from None
    except OvserveError as exc:
        recorder.finished(exc.error_type, exc.status)
        raise
    except asyncio.CancelledError:
        recorder.finished("disconnected", 499)
        raise
    recorder.finished("stop", 200)
    return json_response(body)


async def tokenize(request: web.Request) -> web.Response:
    parsed = _parse_body(await read_json_object(request), TokenizeRequest)
    return json_response(await request.app[keys.RETRIEVAL].tokenize(parsed))


async def detokenize(request: web.Request) -> web.Response:
    parsed = _parse_body(await read_json_object(request), DetokenizeRequest)
    return json_response(await request.app[keys.RETRIEVAL].detokenize(parsed))


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


async def load_model(request: web.Request) -> web.Response:
    """Load a model now (no request needed), within --request_timeout; its object once loaded."""
    model = request.app[keys.MODELS].get(request.match_info["name"])
    timeout = request.app[keys.SETTINGS].request_timeout
    deadline = asyncio.get_running_loop().time() + timeout if timeout is not None else None
    model.check_available()
    lease = await model.lease(deadline)
    lease.release()
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


async def audio_transcriptions(request: web.Request) -> web.StreamResponse:
    return await _audio(request, "transcribe")


async def audio_translations(request: web.Request) -> web.StreamResponse:
    return await _audio(request, "translate")


async def _read_form(request: web.Request) -> MultiDictProxy[Any]:
    """The multipart form, whole, within --body_timeout and --max_request_mb (aiohttp's
    ``client_max_size`` bounds ``post()``, files included)."""
    if request.content_type != "multipart/form-data":
        raise UnsupportedMediaTypeError(
            f"expected 'multipart/form-data' (an audio upload), got '{request.content_type}'"
        )
    settings = request.app[keys.SETTINGS]
    try:
        async with asyncio.timeout(settings.body_timeout_s):
            return await request.post()
    except TimeoutError:
        raise RequestTimeoutError(f"the request body was not received within {settings.body_timeout_s:g} s") from None
    except web.HTTPRequestEntityTooLarge:
        # post() raises aiohttp's 413 for a body over client_max_size and for a form over
        # client_max_fields, whatever its size: only the first is a body too large.
        if request.content.total_bytes > request.client_max_size:
            raise PayloadTooLargeError(
                f"the request body is larger than --max_request_mb ({settings.max_request_mb:g} MB)"
            ) from None
        raise BadRequestError(
            f"the multipart form has more than {request.client_max_fields} fields, the server's limit",
            code="too_many_form_fields",
        ) from None
    except LineTooLong as exc:  # a part's header line over the HTTP parser's max_field_size
        raise BadRequestError(
            f"a header line of the multipart form is longer than {exc.args[1]} bytes, the server's limit",
            code="form_header_too_long",
        ) from None
    except (ValueError, HttpProcessingError) as exc:  # a malformed multipart body (boundary, part headers)
        raise BadRequestError(f"the multipart form cannot be read: {exc}") from None


def _deadline(request: web.Request) -> float | None:
    """The event-loop time by which the request must be answered (``--request_timeout``)."""
    timeout = request.app[keys.SETTINGS].request_timeout
    return asyncio.get_running_loop().time() + timeout if timeout is not None else None


async def _audio(request: web.Request, task: Literal["transcribe", "translate"]) -> web.StreamResponse:
    """One transcription or translation: the whole text, or (``stream``) its deltas as SSE, within
    ``--request_timeout``; counted once in ``/metrics``. The upload is decoded inside the model's
    admission, and the model's engine is held (loaded for the request if need be) until the last
    byte, as for every request."""
    service = request.app[keys.AUDIO]
    timeout = request.app[keys.SETTINGS].request_timeout
    deadline = _deadline(request)
    recorder = request.app[keys.METRICS].recorder(
        "audio_transcriptions" if task == "transcribe" else "audio_translations"
    )
    try:
        parsed = parse_form(await _read_form(request), task)
        model = service.check(parsed)
        recorder.model = model.name
        with admitted(model, 0, recorder) as ticket:
            job = await service.decode(parsed, model)
            transcript = _Transcript(job, ticket, recorder)
            async with leased(model, deadline):
                if parsed.stream:
                    return await _audio_stream(request, service, transcript, deadline)
                try:
                    async with asyncio.timeout_at(deadline):
                        async for _ in transcript.items(service):
                            pass
                except TimeoutError:
                    raise _deadline_error(timeout) from None
        assert transcript.result is not None
        body, content_type = render_transcript(parsed, transcript.result, job.audio.seconds)
    except OvserveError as exc:
        recorder.finished(exc.error_type, exc.status)
        raise
    except asyncio.CancelledError:
        recorder.finished("disconnected", 499)
        raise
    recorder.finished("stop", 200)
    return web.Response(text=body, content_type=content_type)


class _Transcript:
    """A transcription's engine work: its items, its first one leaving the admission queue, and
    its audio metrics recorded once it has finished."""

    def __init__(self, job: AudioJob, ticket: Ticket, recorder: RequestRecorder) -> None:
        self.job, self._ticket, self.recorder = job, ticket, recorder
        self.result: TranscribeResult | None = None

    async def items(self, service: AudioService) -> AsyncIterator[str | TranscribeResult]:
        started = time.perf_counter()
        async for item in service.run(self.job):
            self._ticket.started()
            if isinstance(item, TranscribeResult):
                self.result = item
                seconds = self.job.audio.seconds
                self.recorder.audio(self.job.request.task, seconds, time.perf_counter() - started)
            yield item


async def _audio_stream(
    request: web.Request, service: AudioService, transcript: _Transcript, deadline: float | None
) -> web.StreamResponse:
    """``transcript.text.delta`` events as the engine writes text, then ``transcript.text.done``.
    Once the headers are out a failure is an ``error`` event."""
    recorder, seconds = transcript.recorder, transcript.job.audio.seconds
    writer = SSEWriter(request)
    await writer.open()
    outcome = "stop"
    try:
        try:
            async with asyncio.timeout_at(deadline):
                async for item in transcript.items(service):
                    if isinstance(item, TranscribeResult):
                        await writer.send(audio_done_event(item.text, seconds))
                    else:
                        await writer.send(audio_delta_event(item))
        except TimeoutError:
            exc: OvserveError = _deadline_error(request.app[keys.SETTINGS].request_timeout)
            outcome = exc.error_type
            await writer.send({"type": "error", "error": exc.body()["error"]})
        except OvserveError as exc:
            outcome = exc.error_type
            await writer.send({"type": "error", "error": exc.body()["error"]})
        await writer.response.write_eof()
    except ConnectionResetError:
        log.info("audio stream: the client disconnected")
        outcome = "disconnected"
    finally:
        recorder.finished(outcome, 200)
    return writer.response


async def audio_speech(request: web.Request) -> web.StreamResponse:
    """Text to speech within ``--request_timeout``, the model's engine held (loaded for the request
    if need be) to the last byte; counted in ``/metrics``. ``pcm`` is streamed piece by piece (see
    :func:`_speech_stream`); the other formats are one whole file."""
    timeout = request.app[keys.SETTINGS].request_timeout
    deadline = _deadline(request)
    recorder = request.app[keys.METRICS].recorder("audio_speech")
    service = request.app[keys.SPEECH]
    try:
        parsed = _parse_body(await read_json_object(request), SpeechRequest)
        model = service.check(parsed)
        recorder.model = model.name
        with admitted(model, 0, recorder):
            async with leased(model, deadline):
                work = _SpeechWork(recorder, len(parsed.input), timeout)
                if parsed.response_format == "pcm":
                    return await _speech_stream(request, service.speak_pcm(parsed, model), work, deadline)
                try:
                    async with asyncio.timeout_at(deadline):
                        speech = await service.speak(parsed, model)
                except TimeoutError:
                    raise _deadline_error(timeout) from None
                work.done(speech.seconds)
    except OvserveError as exc:
        recorder.finished(exc.error_type, exc.status)
        raise
    except asyncio.CancelledError:
        recorder.finished("disconnected", 499)
        raise
    return web.Response(
        body=speech.data, content_type=speech.content_type, headers={"X-Sample-Rate": str(speech.sample_rate)}
    )


class _SpeechWork:
    """A speech request's metrics: the audio made, over the engine's time since the lease."""

    def __init__(self, recorder: RequestRecorder, characters: int, timeout: float | None) -> None:
        self.recorder, self.characters, self.timeout = recorder, characters, timeout
        self.started = time.perf_counter()

    def done(self, seconds: float) -> None:
        self.recorder.audio("speech", seconds, time.perf_counter() - self.started, self.characters)
        self.recorder.finished("stop", 200)


async def _speech_stream(
    request: web.Request, pieces: AsyncGenerator[Speech, None], work: _SpeechWork, deadline: float | None
) -> web.StreamResponse:
    """Raw ``pcm`` as each piece of the speech is made. The headers wait for the first piece, so a
    failure before any audio is the usual JSON error; after it, a failure (or the deadline) ends
    the response without its last chunk, which a client sees as a broken transfer."""
    async with contextlib.aclosing(pieces):
        try:
            async with asyncio.timeout_at(deadline):
                first = await anext(pieces)
        except TimeoutError:
            raise _deadline_error(work.timeout) from None
        headers = {"Content-Type": first.content_type, "X-Sample-Rate": str(first.sample_rate)}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        seconds = first.seconds
        try:
            await response.write(first.data)
            async with asyncio.timeout_at(deadline):
                async for piece in pieces:
                    await response.write(piece.data)
                    seconds += piece.seconds
        except (OvserveError, TimeoutError) as exc:
            error = exc if isinstance(exc, OvserveError) else _deadline_error(work.timeout)
            log.warning("speech stream failed after its first piece: %s", error.message)
            work.recorder.finished(error.error_type, 200)
            if request.transport is not None:
                request.transport.close()  # no last chunk: the client knows the file is cut short
            return response
        except ConnectionResetError:
            log.info("speech stream: the client disconnected")
            work.recorder.finished("disconnected", 200)
            return response
    await response.write_eof()
    work.done(seconds)
    return response
