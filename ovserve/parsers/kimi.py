"""Kimi K2 (``kimi_k2``)::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>
    <|tool_call_begin|>...<|tool_call_end|><|tool_calls_section_end|>

Sources: vLLM ``vllm/entrypoints/openai/tool_parsers/kimi_k2_tool_parser.py`` (some checkpoints
write the section markers singular, ``<|tool_call_section_begin|>``/``<|tool_call_section_end|>``;
vLLM's later parser accepts both, so does this one) and the chat template of
moonshotai/Kimi-K2-Thinking (ggml-org/llama.cpp ``models/templates/moonshotai-Kimi-K2-Thinking.jinja``).

The call id: ``functions.NAME:IDX`` is the model's own id, IDX counting calls across the
conversation, and the template writes a past call back as ``<|tool_call_begin|>{{ id }}`` and its
result as ``## Return of {{ tool_call_id }}``. So the call's ``id`` is the model's id, as vLLM
returns it; a client that echoes it keeps the conversation in the form the model was trained on.
The name is the id without the ``functions.`` prefix and the ``:IDX`` suffix (a dotted tool name
stays whole). Text after the section is content (vLLM drops it).
"""

from __future__ import annotations

import re
from typing import Any

from ovserve.json_types import JsonObject
from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import SchemaRegex, ToolSchemas, regex_literal
from ovserve.parsers.segments import marked_calls

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
SECTION_BEGIN_SINGULAR = "<|tool_call_section_begin|>"
SECTION_END_SINGULAR = "<|tool_call_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENTS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"

_CALL_ID = re.compile(r"(?P<name>.+):(?P<index>\d+)", re.DOTALL)
_PREFIX = "functions."


def _call(call_id: str, arguments: JsonObject) -> ToolCall:
    match = _CALL_ID.fullmatch(call_id)
    if match is None:
        raise PayloadError(f"expected functions.NAME:IDX before {ARGUMENTS_BEGIN!r}, got {call_id[:40]!r}")
    name = match["name"].removeprefix(_PREFIX)
    if not name:
        raise PayloadError("empty tool name")
    return ToolCall(name=name, arguments=arguments, id=call_id)


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    return marked_calls(payload, CALL_BEGIN, ARGUMENTS_BEGIN, CALL_END, _call)


def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
    # The model numbers its calls across the conversation; bounded (a weak model given "[0-9]+"
    # writes digits until max_tokens).
    begin = (
        regex_literal(f"{SECTION_BEGIN}{CALL_BEGIN}{_PREFIX}{name}:") + "[0-9]{1,4}" + regex_literal(ARGUMENTS_BEGIN)
    )
    return f"{begin}({schema_regex(parameters)}){regex_literal(CALL_END + SECTION_END)}"


FORMAT = ToolCallFormat(
    name="kimi_k2",
    starts=(SECTION_BEGIN, SECTION_BEGIN_SINGULAR),
    end=SECTION_END,
    block_ends=((SECTION_BEGIN_SINGULAR, SECTION_END_SINGULAR),),
    decode=decode,
    call_regex=call_regex,
    special_tokens=(
        SECTION_BEGIN,
        SECTION_END,
        SECTION_BEGIN_SINGULAR,
        SECTION_END_SINGULAR,
        CALL_BEGIN,
        ARGUMENTS_BEGIN,
        CALL_END,
    ),
)
