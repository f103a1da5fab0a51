"""Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (v3 tokenizers) or
``[TOOL_CALLS]name[ARGS]{...}`` repeated (v11+ tokenizers), where v13+ may put the model's call
id between the name and the arguments, ``name[CALL_ID]id[ARGS]{...}`` (vLLM
``vllm/entrypoints/openai/tool_parsers/mistral_tool_parser.py`` skips that id and gives the call its own; so does
this parser). Magistral's reasoning, ``[THINK]...[/THINK]`` at the start of the output (vLLM
``vllm/reasoning/mistral_reasoning_parser.py``), is the reasoning format ``mistral``. All these
markers are control tokens of Mistral's tokenizers (``special_tokens``)."""

from __future__ import annotations

from ovserve.parsers.base import ReasoningFormat, ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall, call_from_object, call_list, decode_json, nine_alphanumerics
from ovserve.parsers.schemas import ToolSchemas, json_object_call

MARKER = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
THINK = "[THINK]"
THINK_END = "[/THINK]"


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    if payload.startswith("["):
        return call_list(payload)
    calls = []
    for part in payload.split(MARKER):
        head, separator, arguments = part.partition(ARGS)
        if not separator:
            raise PayloadError(f"expected name{ARGS}{{...}}")
        name = head.partition(CALL_ID)[0].strip()
        calls.append(call_from_object({"name": name, "arguments": decode_json(arguments.strip())}))
    return calls


FORMAT = ToolCallFormat(
    name="mistral",
    starts=(MARKER,),
    end=None,
    decode=decode,
    call_regex=json_object_call(f"{MARKER}[", "]"),
    special_tokens=(MARKER, ARGS, CALL_ID),
    call_id=nine_alphanumerics,
)

REASONING_FORMAT = ReasoningFormat(name="mistral", start=THINK, end=THINK_END, special_tokens=(THINK, THINK_END))
