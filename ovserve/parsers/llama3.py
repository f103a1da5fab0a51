"""Llama 3.1+ JSON tool calls: ``{"name": ..., "parameters": {...}}``, optionally after
``<|python_tag|>`` (a special token, gone when special tokens are skipped), several separated by
``;``. A bare JSON object only counts as a call at the very start of the output."""

from __future__ import annotations

import json

from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall, call_from_object
from ovserve.parsers.schemas import ToolSchemas, json_object_call


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    position = 0
    while position < len(payload):
        try:
            item, position = decoder.raw_decode(payload, position)
        except (ValueError, RecursionError) as exc:  # too deep to decode: the model's text, not a crash
            raise PayloadError(f"not JSON: {exc}") from exc
        calls.append(call_from_object(item))
        rest = payload[position:].lstrip()
        if not rest:
            break
        if not rest.startswith(";"):
            raise PayloadError("calls must be separated by ';'")
        position = len(payload) - len(rest) + 1
        while position < len(payload) and payload[position].isspace():
            position += 1
    if not calls:
        raise PayloadError("no call")
    return calls


FORMAT = ToolCallFormat(
    name="llama3",
    starts=("<|python_tag|>",),
    end=None,
    decode=decode,
    start_of_output_only=('{"name"',),
    marker_in_payload=('{"name"',),
    call_regex=json_object_call("", "", arguments_key="parameters"),
    special_tokens=("<|python_tag|>",),
)
