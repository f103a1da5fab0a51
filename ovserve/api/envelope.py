"""The one request envelope: how every route that touches a model is answered, whatever its dialect.

A route declares a :class:`Way` (its metrics label, how its body is read, how it is parsed into
the dialect's request model, its endpoint, how its stream is framed) and :func:`serve` does the
rest, in this order and nowhere else:

1. read the body within ``--body_timeout`` and ``--max_request_mb``: JSON (:func:`read_json_object`),
   a multipart form (:func:`read_form`), or none (the path names the model);
2. parse it once into the dialect's request model (a 400 in the dialect's shape);
3. ``prepare``: the dialect's endpoint turns it into a call, raising every 4xx/503 it can before any
   engine work (authentication already happened in the auth middleware, before the body was read);
4. admit the call's work (a 429 when its model's queue is full), then hold the model's engine,
   loading it first when it was unloaded (``ovserve.core.engine_work``);
5. answer within ``--request_timeout`` (event-loop deadline from the request's arrival): the unary
   answer, or the stream's events through the route's writer; an error after a stream's first
   byte is the dialect's failure event, an error before it the usual error answer;
6. count the request once in ``/metrics`` with its outcome (its finish reason, its error type, or
   ``disconnected``: 499 for a unary request whose client left);
7. release the admission and the engine, however it ended.

:func:`answer_body` runs steps 2 to 7 for a body that came without HTTP (a batch's line), at the
batch's priority.

Errors are raised, never written here: the error middleware (``ovserve.app``) answers them in the
route's dialect (``ovserve.api.table``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy, MultiMapping
from pydantic import BaseModel, ValidationError

from ovserve.api import keys
from ovserve.api.json_body import parse_json_object
from ovserve.api.sse import SSEWriter, dumps
from ovserve.dialects.endpoint import Answer, Call, Endpoint, RawBody
from ovserve.dialects.openai.responses.store import OPEN_OWNER
from ovserve.errors import (
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

log = logging.getLogger(__name__)

# curl -d sends form-urlencoded by default: accept it as JSON rather than fail users of the docs.
_JSON_CONTENT_TYPES = {
    "application/json",
    "application/x-www-form-urlencoded",
    "application/octet-stream",
    "",
}

Form = MultiDictProxy[Any]
Payload = JsonObject | Form | None
BodyKind = Literal["json", "form", "none"]
ModelT = TypeVar("ModelT", bound=BaseModel)


def json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(payload), status=status, content_type="application/json")


def answer_response(answer: Answer) -> web.Response:
    """A unary answer: JSON of a response model, or a raw body with its own content type."""
    if isinstance(answer, RawBody):
        return web.Response(body=answer.data, headers={"Content-Type": answer.content_type, **answer.headers})
    return json_response(answer)


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


async def read_form(request: web.Request) -> Form:
    """The multipart form, whole, within --body_timeout and --max_request_mb (aiohttp's
    ``client_max_size`` bounds ``post()``, files included)."""
    if request.content_type != "multipart/form-data":
        raise UnsupportedMediaTypeError(f"expected 'multipart/form-data' (a file upload), got '{request.content_type}'")
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


async def _read(request: web.Request, kind: BodyKind) -> Payload:
    if kind == "json":
        return await read_json_object(request)
    if kind == "form":
        return await read_form(request)
    return None


def validated(model: type[ModelT], payload: Any) -> ModelT:
    """``payload`` as the dialect's request ``model``; a validation error is a 400 naming the field."""
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise bad_request(exc) from None


def caller_of(request: web.Request) -> str:
    """Whose stored state this request may create, read, continue and delete: the digest of the API
    key it presented, or the open owner on a server without keys. A request the auth middleware
    did not let through has no caller: KeyError (a 500), never someone else's rows."""
    caller = request[keys.CALLER]
    return OPEN_OWNER if caller is None else caller


def deadline_of(request: web.Request) -> float | None:
    """The event-loop time by which the request must be answered (``--request_timeout``), from now."""
    timeout = request.app[keys.SETTINGS].request_timeout
    return asyncio.get_running_loop().time() + timeout if timeout is not None else None


def deadline_error(request: web.Request) -> DeadlineExceededError:
    return _timeout_error(request.app)


class EventWriter(SSEWriter):
    """Server-sent events without the ``[DONE]`` line (OpenAI's audio streams end with their ``.done`` event)."""

    async def done(self) -> None:
        await self.response.write_eof()


class RawWriter(SSEWriter):
    """A raw body written chunk by chunk (speech as it is made). The headers wait for the first
    chunk, which carries the content type: a failure before it is the route's usual error answer.
    A :class:`RawBody` with ``cut`` ends the transfer without its last chunk."""

    def __init__(self, request: web.Request) -> None:
        super().__init__(request)
        self._cut = False

    async def open(self) -> None:
        """Nothing yet: the first chunk opens the response."""

    async def send(self, payload: Any) -> None:
        assert isinstance(payload, RawBody)
        if payload.cut:
            self._cut = True
            if self._request.transport is not None:
                self._request.transport.close()
            return
        if not self.response.prepared:
            self.response.headers.update({"Content-Type": payload.content_type, **payload.headers})
            self.response.headers.pop("Cache-Control", None)
            await self.response.prepare(self._request)
        await self.response.write(payload.data)

    async def done(self) -> None:
        if not self._cut:
            await self.response.write_eof()


class RequestView(Protocol):
    """What a route's parser may read of its request: the application, the headers, the query and
    the path's parameters. An HTTP request is one; so is :class:`_Headless`."""

    @property
    def app(self) -> web.Application: ...

    @property
    def headers(self) -> CIMultiDictProxy[str]: ...

    @property
    def query(self) -> MultiMapping[str]: ...

    @property
    def match_info(self) -> Mapping[str, str]: ...


# A dialect's endpoint, checked against the protocol where a Way names it.
EndpointT = TypeVar("EndpointT", bound=Endpoint[Any, Any])


@dataclass(frozen=True)
class Way(Generic[EndpointT]):
    """How one route comes in: see the module doc. ``parse`` validates the payload (None when the
    route takes no body) into the dialect's request model; ``endpoint`` is the application key of
    the dialect's endpoint; ``writer`` frames its streams."""

    name: str  # the route's ``endpoint`` label in /metrics
    parse: Callable[[RequestView, Any], Any]
    endpoint: web.AppKey[EndpointT]
    body: BodyKind = "json"
    writer: type[SSEWriter] = SSEWriter

    def handler(self) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await serve(request, self)

        handle.__name__ = handle.__qualname__ = f"serve_{self.name.replace('/', '_')}"
        return handle


async def serve(request: web.Request, way: Way[Any]) -> web.StreamResponse:
    """Answer ``request`` the way ``way`` says (see the module doc)."""
    recorder = request.app[keys.METRICS].recorder(way.name)
    deadline = deadline_of(request)
    endpoint = request.app[way.endpoint]
    # The client went away before a unary answer (aiohttp cancels the handler): 499, as nginx logs it.
    async with _accounted(recorder, cancelled="disconnected") as held:
        parsed = way.parse(request, await _read(request, way.body))
        call = held.call = await _prepare(request.app, endpoint, parsed, caller_of(request), deadline)
        await _hold(call, recorder, deadline, batch=False)
        if call.streaming:
            return await _stream(request, endpoint, call, recorder, deadline, way.writer(request))
        answer = await _complete(request.app, endpoint, call, deadline)
        recorder.finished(call.job.outcome, 200)
        return answer_response(answer)


async def answer_body(app: web.Application, way: Way[Any], payload: JsonObject, caller: str) -> Answer:
    """One JSON body answered for ``way`` without HTTP, as a batch request (a line of a batch,
    ``ovserve.api.batches``): steps 2 to 7 of :func:`serve` (parse, prepare, admit, lease,
    ``--request_timeout``, metrics, release), admitted with ``batch=True`` (never a 429, never
    counted against ``--max_queued_requests``: ``ovserve.models.admission``). The body must not
    ask for a stream (the batch's validation refuses one). Errors are raised as in :func:`serve`;
    cancelling the call cancels the engine work."""
    recorder = app[keys.METRICS].recorder(way.name)
    timeout = app[keys.SETTINGS].request_timeout
    deadline = asyncio.get_running_loop().time() + timeout if timeout is not None else None
    endpoint = app[way.endpoint]
    async with _accounted(recorder, cancelled="cancelled") as held:
        parsed = way.parse(_Headless(app), payload)
        call = held.call = await _prepare(app, endpoint, parsed, caller, deadline)
        if call.streaming:
            raise BadRequestError("a batch request cannot stream", param="stream")
        await _hold(call, recorder, deadline, batch=True)
        answer = await _complete(app, endpoint, call, deadline)
        recorder.finished(call.job.outcome, 200)
        return answer


@dataclass
class _Held:
    """The call a request holds once prepared: its admission and engine lease are released on the way out."""

    call: Call | None = None


@contextlib.asynccontextmanager
async def _accounted(recorder: RequestRecorder, *, cancelled: str) -> AsyncIterator[_Held]:
    """Steps 6 and 7 of the module doc for whatever the body does: an error counted once with its
    type and status, a cancellation with ``cancelled`` and 499, and the call released however it
    ended. A success is counted by the body (a stream counts itself as it ends)."""
    held = _Held()
    try:
        yield held
    except OvserveError as exc:
        recorder.finished(exc.error_type, exc.status)
        raise
    except asyncio.CancelledError:
        recorder.finished(cancelled, 499)
        raise
    finally:
        if held.call is not None:
            held.call.job.release()


class _Headless:
    """A :class:`RequestView` for a body that came without a request (a batch line): no headers,
    no query, no path parameters."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
        self.query: MultiDictProxy[str] = MultiDictProxy(MultiDict())
        self.match_info: Mapping[str, str] = {}


def _timeout_error(app: web.Application) -> DeadlineExceededError:
    timeout = app[keys.SETTINGS].request_timeout
    return DeadlineExceededError(f"the request took longer than --request_timeout ({timeout:g} s); it was cancelled")


async def _prepare(
    app: web.Application, endpoint: Endpoint[Any, Any], parsed: Any, caller: str, deadline: float | None
) -> Call:
    try:
        async with asyncio.timeout_at(deadline):  # rendering and counting count towards it
            call: Call = await endpoint.prepare(parsed, caller)
            return call
    except TimeoutError:
        raise _timeout_error(app) from None


async def _hold(call: Call, recorder: RequestRecorder, deadline: float | None, *, batch: bool) -> None:
    job = call.job
    recorder.model = job.model.name
    job.admit(recorder, batch=batch)
    await job.take_engine(deadline)


async def _complete(app: web.Application, endpoint: Endpoint[Any, Any], call: Call, deadline: float | None) -> Answer:
    try:
        async with asyncio.timeout_at(deadline):
            answer: Answer = await endpoint.complete(call)
            return answer
    except TimeoutError:
        raise _timeout_error(app) from None


async def _stream(
    request: web.Request,
    endpoint: Endpoint[Any, Any],
    call: Call,
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
                    raise deadline_error(request) from None
                outcome = job.outcome
            except OvserveError as exc:
                if not writer.response.prepared:
                    raise  # nothing was sent: the route's usual error answer (serve counts it)
                # Headers are gone: the failure travels as the dialect's last event.
                log.warning("stream of %s failed: %s", job.model.name, exc.message)
                outcome = exc.error_type
                await writer.send(endpoint.failure_event(call, exc))
            await writer.done()
        except ConnectionResetError:
            # A write found the connection gone before aiohttp cancelled this handler. An
            # ordinary event: one line, no traceback (aiohttp would log one for an escaping error).
            log.info("stream of %s: the client disconnected", job.model.name)
        finally:
            if writer.response.prepared:
                recorder.finished(outcome, 200)
    return writer.response
