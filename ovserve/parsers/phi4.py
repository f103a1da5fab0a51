"""Phi-4-mini: ``functools[{"name": ..., "arguments": {...}}, ...]``."""

from __future__ import annotations

from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall, call_from_object, decode_json
from ovserve.parsers.schemas import ToolSchemas, json_object_call


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    items = decode_json(payload)
    if not isinstance(items, list) or not items:
        raise PayloadError("expected a non-empty list of calls")
    return [call_from_object(item) for item in items]


FORMAT = ToolCallFormat(
    name="phi4", starts=("functools",), end=None, decode=decode, call_regex=json_object_call("functools[", "]")
)
