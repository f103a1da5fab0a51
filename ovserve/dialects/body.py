"""The base of every response model, whatever the dialect.

Response models are written with every always-present field required (``object`` included) and
every optional key defaulting to ``None``; :meth:`Body.encode` leaves out what was never set, so a
key is absent rather than null exactly where the dialect leaves it out (a chat delta's ``role``, a
usage's ``prompt_tokens_details``), and null where it sends null (``finish_reason``, ``logprobs``).
``/openapi.json`` describes every success body from these models (``ovserve.api.openapi``), in
serialization mode: what is required there is what every body carries.

A stream's hot path (an event per token) skips the models: :class:`Template` is a body its model
encoded once per stream with holes where each event's values go, and :class:`EncodedBody` the
filled-in text, which is byte for byte the model's encoding of the same values (each dialect's
stream has a property test that compares the two: tests/unit/test_stream_templates.py,
tests/unit/test_chat_text_chunks.py). Every other event goes through the models.

Events a stream has at one moment (a response's opening events, the events that close it) travel
as one :class:`Burst`: the stream writer frames each as usual and writes them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from json.encoder import encode_basestring

from pydantic import BaseModel, ConfigDict

# A JSON object the client wrote and a body echoes (a tool's parameters schema, a JSON schema).
from ovserve.json_types import JsonObject

__all__ = ["NUMBER_HOLE", "Body", "Burst", "EncodedBody", "JsonObject", "Template", "json_string", "text_hole"]


class Body(BaseModel):
    """A response body or a piece of one."""

    model_config = ConfigDict(extra="forbid")

    def encode(self) -> str:
        """The JSON text sent to the client."""
        return self.model_dump_json(exclude_unset=True, by_alias=True)

    def dump(self) -> JsonObject:
        """The same JSON as plain data, for what stores it (``ovserve.dialects.openai.responses.store``)."""
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A body already encoded as JSON text, for a stream's hot path (an event per token): a dialect
    builds it around text its response model encoded once per stream, and it is byte for byte what
    the model would encode (each such path has a test that compares the two)."""

    text: str
    # The body's ``type`` field, where it has one: the event's name in a stream that names its
    # events (``event:`` lines: Responses, Anthropic; ``ovserve.api.sse.NamedEventWriter``).
    type: str | None = None

    def encode(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Burst:
    """Events a stream has at the same moment, written to the client in one write, each framed as
    if it came alone (the bytes on the wire are the same). A write is a system call and, on the
    client's side, a wake-up: a Responses stream wrote the eight events around its text one by one,
    and at 16 streams that was most of its CPU per token above chat's (docs/performance.md)."""

    events: tuple[Body | EncodedBody, ...]


def json_string(text: str) -> str:
    """``text`` as a JSON string, written as a response model writes it (non-ASCII as is, control
    characters escaped): json's own C encoder, without ``json.dumps``'s per-call encoder object."""
    return encode_basestring(text)


def text_hole(position: int) -> str:
    """A marker for a string field of a :class:`Template` (ASCII: its JSON is itself in quotes)."""
    return f"ovserve-hole-{position}-c41f"


# A marker for an integer field of a Template (a stream's event number): no real value is this large.
NUMBER_HOLE = 2**62 + 40_961


class Template:
    """A body encoded once by its model, with holes where each event's own values go.

    The model is built with markers in the fields that change from event to event
    (:func:`text_hole` in a string field, :data:`NUMBER_HOLE` in an integer one) and encoded once;
    :meth:`fill` splices each event's values into the holes, already written as JSON
    (:func:`json_string`, ``str`` of an int). The result is byte for byte the model's encoding of
    the same values: each dialect's stream has a property test that compares the two. A stream's
    token then costs a string format instead of two or three models built and serialized.
    """

    __slots__ = ("_format", "_type")

    def __init__(self, format_: str, type_: str | None) -> None:
        self._format = format_
        self._type = type_

    @classmethod
    def of(cls, body: Body, *markers: str | int) -> Template | None:
        """``body``'s encoding cut at ``markers`` (the values of its holes, in the order the model
        writes them); None when a marker is not written exactly once (a client's text that
        contains one): the caller then keeps building the models."""
        encoded = text = body.encode()
        pieces = []
        for marker in markers:
            written = json_string(marker) if isinstance(marker, str) else str(marker)
            head, found, text = text.partition(written)
            if not found or encoded.count(written) != 1:
                return None
            pieces.append(head)
        pieces.append(text)
        kind = getattr(body, "type", None)
        escaped = (piece.replace("{", "{{").replace("}", "}}") for piece in pieces)
        return cls("{}".join(escaped), kind if isinstance(kind, str) else None)

    def fill(self, *values: str) -> EncodedBody:
        """The body with ``values`` (JSON text, one per hole, in order) in its holes."""
        return EncodedBody(self._format.format(*values), self._type)
