"""Hermes 3 / Qwen 2.5 / Qwen 3: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``."""

from __future__ import annotations

from ovserve.parsers.base import ToolCallFormat, inside_json_string
from ovserve.parsers.calls import ToolCall, call_from_object, decode_json
from ovserve.parsers.schemas import ToolSchemas, json_object_call


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    return [call_from_object(decode_json(payload))]


FORMAT = ToolCallFormat(
    name="hermes3",
    starts=("<tool_call>",),
    end="</tool_call>",
    decode=decode,
    json_call_wrap=("<tool_call>\n", "\n</tool_call>"),
    call_regex=json_object_call("<tool_call>\n", "\n</tool_call>"),
    open_payload=inside_json_string,
)
