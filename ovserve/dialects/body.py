"""The base of every response model, whatever the dialect.

Response models are written with every always-present field required (``object`` included) and
every optional key defaulting to ``None``; :meth:`Body.encode` leaves out what was never set, so a
key is absent rather than null exactly where the dialect leaves it out (a chat delta's ``role``, a
usage's ``prompt_tokens_details``), and null where it sends null (``finish_reason``, ``logprobs``).
``/openapi.json`` describes every success body from these models (``ovserve.api.openapi``), in
serialization mode: what is required there is what every body carries.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

# A JSON object the client wrote and a body echoes (a tool's parameters schema, a JSON schema).
from ovserve.json_types import JsonObject

__all__ = ["Body", "EncodedBody", "JsonObject"]


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

    def encode(self) -> str:
        return self.text
