"""Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (v3 tokenizers) or
``[TOOL_CALLS]name[ARGS]{...}`` repeated (v11+ tokenizers)."""

from __future__ import annotations

from ovserve.parsers.base import (
    PayloadError,
    ToolCall,
    ToolCallFormat,
    ToolSchemas,
    call_from_object,
    decode_json,
    json_object_call,
)

MARKER = "[TOOL_CALLS]"
ARGS = "[ARGS]"


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    if payload.startswith("["):
        items = decode_json(payload)
        if not isinstance(items, list) or not items:
            raise PayloadError("expected a non-empty list of calls")
        return [call_from_object(item) for item in items]
    calls = []
    for part in payload.split(MARKER):
        name, separator, arguments = part.partition(ARGS)
        if not separator:
            raise PayloadError(f"expected name{ARGS}{{...}}")
        calls.append(call_from_object({"name": name.strip(), "arguments": decode_json(arguments.strip())}))
    return calls


FORMAT = ToolCallFormat(
    name="mistral",
    starts=(MARKER,),
    end=None,
    decode=decode,
    call_regex=json_object_call(f"{MARKER}[", "]"),
    special_tokens=(MARKER, ARGS),
)
