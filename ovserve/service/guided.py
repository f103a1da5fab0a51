"""Guided generation: response_format and forced tool calls -> an engine grammar.

JSON schemas are compiled to a whitespace-free regular expression with outlines-core before they
reach the engine: openvino_genai's JSON-schema grammar allows arbitrary whitespace between
tokens, and a weak model then fills max_tokens with spaces. Compact JSON is also what clients
expect in ``function.arguments``. The engine receives ``{"regex": ...}``; a schema that cannot be
compiled is the client's 400 (OVMS silently runs unconstrained instead).
"""

from __future__ import annotations

import json
import re
from typing import Any

from outlines_core.json_schema import build_regex_from_schema

from ovserve.errors import BadRequestError
from ovserve.parsers.base import ToolCallFormat

# Engine grammar spec carried in GenerationParams.structured_output (plain data: it is pickled
# to the engine process): {"regex": ...} for the whole output, or {"trigger", "begin", "regex",
# "end"} for a grammar that applies only once the model writes the trigger (a tool call).
GrammarSpec = dict[str, str]


def schema_regex(schema: Any, *, param: str) -> str:
    try:
        return str(build_regex_from_schema(json.dumps(schema), whitespace_pattern=""))
    except (ValueError, TypeError) as exc:
        raise BadRequestError(f"the JSON schema cannot be compiled to a grammar: {exc}", param=param) from exc


def response_format_grammar(response_format: dict[str, Any] | None) -> GrammarSpec | None:
    """OpenAI's ``text`` / ``json_object`` / ``json_schema``, plus OVMS-style ``regex`` and ``const_string``."""
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"regex": schema_regex({"type": "object"}, param="response_format")}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise BadRequestError(
                "response_format.json_schema must be an object with a 'schema'", param="response_format"
            )
        return {"regex": schema_regex(spec.get("schema", {}), param="response_format.json_schema.schema")}
    if kind == "regex":
        pattern = response_format.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise BadRequestError("response_format of type 'regex' needs a 'pattern'", param="response_format")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise BadRequestError(
                f"response_format.pattern is not a valid regex: {exc}", param="response_format"
            ) from exc
        return {"regex": pattern}
    if kind == "const_string":
        value = response_format.get("value")
        if not isinstance(value, str):
            raise BadRequestError(
                "response_format of type 'const_string' needs a string 'value'", param="response_format"
            )
        return {"regex": re.escape(value)}
    raise BadRequestError(
        f"response_format type {kind!r} is not supported (text, json_object, json_schema, regex, const_string)",
        param="response_format.type",
    )


def tool_call_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The JSON a forced call of ``tool`` must be: its name, and arguments under its parameters schema."""
    function = tool["function"]
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, "arguments": parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _hermes_only(fmt: ToolCallFormat | None, what: str) -> None:
    if fmt is None or fmt.name != "hermes3":
        raise BadRequestError(
            f"{what} needs a model whose tool format ovserve can constrain (hermes3/qwen); "
            f"this model's format is {fmt.name if fmt else 'unknown'}",
            param="tool_choice",
        )


def _any_call_regex(tools: list[dict[str, Any]]) -> str:
    return "|".join(f"({schema_regex(tool_call_schema(tool), param='tools')})" for tool in tools)


def guided_tool_calls_grammar(fmt: ToolCallFormat | None, tools: list[dict[str, Any]]) -> GrammarSpec:
    """enable_tool_guided_generation with tool_choice auto: free text, but a call the model starts
    must be a valid call of one of ``tools`` (OVMS's structural tags, triggered by <tool_call>)."""
    _hermes_only(fmt, "enable_tool_guided_generation")
    return {
        "trigger": "<tool_call>",
        "begin": "<tool_call>\n",
        "regex": f"({_any_call_regex(tools)})",
        "end": "\n</tool_call>",
    }


def forced_tool_call_grammar(fmt: ToolCallFormat | None, tools: list[dict[str, Any]]) -> GrammarSpec:
    """A grammar that admits exactly one call of one of ``tools`` in the model's own format."""
    _hermes_only(fmt, "tool_choice 'required' or a named tool")
    return {"regex": f"<tool_call>\\n({_any_call_regex(tools)})\\n</tool_call>"}
