"""Devstral, Magistral, Mistral-Small-3.2 and other models of Mistral's v11+ tokenizers
(``devstral``): ``[TOOL_CALLS]NAME[ARGS]{json arguments}`` per call, optionally
``NAME[CALL_ID]ID[ARGS]`` (v13+).

The calls decode as :mod:`ovserve.parsers.mistral` decodes them (it reads both Mistral forms);
what differs is the form a forced call is written in: the v11 form these models were trained on,
not v3's JSON list. Sources: OVMS ``src/llm/io_processing/devstral/tool_parser.cpp`` (name
``devstral``; it parses one call, this parser all of them) and vLLM
``vllm/entrypoints/openai/tool_parsers/mistral_tool_parser.py`` (v11+: ``[TOOL_CALLS]name[ARGS]{...}``, optional
``[CALL_ID]``).
"""

from __future__ import annotations

from typing import Any

from ovserve.parsers import mistral
from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import nine_alphanumerics
from ovserve.parsers.schemas import SchemaRegex, regex_literal


def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
    return f"{regex_literal(f'{mistral.MARKER}{name}{mistral.ARGS}')}({schema_regex(parameters)})"


FORMAT = ToolCallFormat(
    name="devstral",
    starts=(mistral.MARKER,),
    end=None,
    decode=mistral.decode,
    call_regex=call_regex,
    special_tokens=(mistral.MARKER, mistral.ARGS, mistral.CALL_ID),
    call_id=nine_alphanumerics,
)
