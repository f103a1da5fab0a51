"""What a dialect's endpoint is to the request envelope (``ovserve.api.envelope``), for every route
that touches a model: generation, retrieval, audio, tokenizer and model loads alike.

Contract: :meth:`Endpoint.prepare` turns a validated request into a :class:`Call` (its core
:class:`~ovserve.core.engine_work.ModelWork` and whether it streams), raising every 4xx/503 it
can before any engine work; the envelope then admits the work, holds the model's engine, and asks
:meth:`Endpoint.complete` for the unary answer or :meth:`Endpoint.stream` for the stream's events
(and :meth:`Endpoint.failure_event` for the last event of a stream that failed after its first
byte). An answer is one of the dialect's response models, a body already encoded from one
(:class:`~ovserve.dialects.body.EncodedBody`), or :class:`RawBody` for what is not JSON (audio,
subtitles, plain text); a stream may also yield a :class:`~ovserve.dialects.body.Burst`, events
written together. :class:`UnaryEndpoint` is the base of endpoints that never stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ovserve.core.engine_work import ModelWork
from ovserve.dialects.body import Body, Burst, EncodedBody
from ovserve.errors import OvserveError
from ovserve.models.served import ModelRegistry


@dataclass(frozen=True, slots=True)
class RawBody:
    """An answer (or a streamed chunk) that is not JSON: its bytes and content type. ``cut``: the
    last "event" of a raw stream that failed midway: the transfer is ended without its last chunk,
    so the client sees a broken body, not a shorter file."""

    data: bytes
    content_type: str
    headers: Mapping[str, str] = field(default_factory=dict)
    cut: bool = False


Answer = Body | EncodedBody | RawBody
StreamItem = Answer | Burst  # what a stream yields: one answer, or events written together
WorkT = TypeVar("WorkT", bound=ModelWork, covariant=True)


class Call(Protocol):
    """One request prepared by a dialect: its core work, and whether it streams."""

    @property
    def job(self) -> ModelWork: ...

    @property
    def streaming(self) -> bool: ...


RequestT = TypeVar("RequestT", covariant=True)


@dataclass(frozen=True, slots=True)
class WorkCall(Generic[WorkT, RequestT]):
    """A call that is its work and the validated request it came from."""

    job: WorkT
    request: RequestT
    streaming: bool = False


CallT = TypeVar("CallT", bound=Call)
ParsedT = TypeVar("ParsedT", contravariant=True)


class Endpoint(Protocol[ParsedT, CallT]):
    """A dialect's endpoint, as the envelope drives it (see the module doc)."""

    async def prepare(self, request: ParsedT, caller: str, /) -> CallT:
        """The call for a validated request; every 4xx/503 is raised here, before any engine work."""

    async def complete(self, call: CallT, /) -> Answer:
        """The unary answer."""

    def stream(self, call: CallT, /) -> AsyncIterator[StreamItem]:
        """The stream's events, in order."""

    def failure_event(self, call: CallT, error: OvserveError, /) -> Answer:
        """The last event of a stream that failed after its first byte."""


class UnaryEndpoint(Generic[CallT]):
    """The base of an endpoint whose calls never stream (``streaming`` is always False), over the
    served ``models``."""

    def __init__(self, models: ModelRegistry) -> None:
        self.models = models

    def stream(self, call: CallT, /) -> AsyncIterator[StreamItem]:
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def failure_event(self, call: CallT, error: OvserveError, /) -> Answer:
        raise NotImplementedError(f"{type(self).__name__} does not stream")
