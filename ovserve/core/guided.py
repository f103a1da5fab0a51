"""Guided generation: response_format and forced tool calls -> an engine grammar.

JSON schemas are compiled to a whitespace-free regular expression with outlines-core before they
reach the engine: openvino_genai's JSON-schema grammar allows arbitrary whitespace between
tokens, and a weak model then fills max_tokens with spaces. Compact JSON is also what clients
expect in ``function.arguments``. The engine receives ``{"regex": ...}``; a schema that cannot be
compiled is the client's 400 (OVMS silently runs unconstrained instead).

Contract: a keyword is either enforced by the grammar or refused with a 400 naming it and its
JSON pointer; never silently dropped. outlines-core 0.2 ignores some keywords (see
``UNENFORCED_KEYWORDS``; ``tests/unit/test_guided.py`` proves each one still is). Integer bounds
(``minimum``/``maximum``/``exclusive*``) are enforced here: the bounded integer is swapped for a
placeholder before compiling, and the placeholder for a range regex after. Bounds on non-integer
numbers cannot be written as a regex exactly and are refused. Pure annotations (``title``,
``description``, ``default``, ``examples``, ...) are ignored, as JSON Schema says they may be.
"""

from __future__ import annotations

import functools
import json
import math
import secrets
from typing import Any

from outlines_core.json_schema import build_regex_from_schema

from ovserve.core.conversation import (
    JsonSchemaFormat,
    OutputFormat,
    RegexFormat,
    Tool,
)
from ovserve.errors import BadRequestError
from ovserve.parsers.base import ToolCallFormat

# Engine grammar spec carried in GenerationParams.structured_output (plain data: it is pickled
# to the engine process): {"regex": ...} for the whole output, or {"trigger", "begin", "regex",
# "end"} for a grammar that applies only once the model writes the trigger (a tool call).
GrammarSpec = dict[str, str]


# Assertion keywords outlines-core compiles to nothing (the output is not constrained by them).
UNENFORCED_KEYWORDS = frozenset(
    {
        "multipleOf",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "minProperties",
        "maxProperties",
        "patternProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedItems",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
    }
)
BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# outlines-core honours only one of these per string schema: the length wins, pattern/format go.
_LENGTH_KEYWORDS = ("minLength", "maxLength")
# Sibling keywords outlines-core drops next to a combinator (it compiles only the combinator).
_COMBINATORS = ("anyOf", "oneOf", "allOf")
# Keywords whose value is a schema, a list of schemas, or a name -> schema map.
_SCHEMA_KEYWORDS = ("additionalProperties", "items")
_SCHEMA_LIST_KEYWORDS = ("prefixItems", "anyOf", "oneOf", "allOf")
_SCHEMA_MAP_KEYWORDS = ("properties", "$defs", "definitions")


def schema_regex(schema: Any, *, param: str) -> str:
    ranges: dict[str, str] = {}
    prepared = _prepare(schema, "", ranges, param)
    try:
        regex = str(build_regex_from_schema(json.dumps(prepared), whitespace_pattern=""))
    except (ValueError, TypeError) as exc:
        raise BadRequestError(f"the JSON schema cannot be compiled to a grammar: {exc}", param=param) from exc
    for token, range_regex in ranges.items():
        regex = regex.replace(f'"{token}"', f"({range_regex})")
    return regex


def _pointer(path: str, key: str) -> str:
    return f"{path}/{key.replace('~', '~0').replace('/', '~1')}"


def _refuse(path: str, keyword: str, param: str, why: str = "") -> BadRequestError:
    where = _pointer(path, keyword)
    return BadRequestError(
        f"the JSON schema keyword '{keyword}' at {where} cannot be enforced by ovserve's grammar"
        f"{why}; remove it or check it after generation",
        param=param,
    )


def _prepare(node: Any, path: str, ranges: dict[str, str], param: str) -> Any:
    """``node`` with bounded integers replaced by placeholders; raises on unenforceable keywords."""
    if not isinstance(node, dict):
        return node
    for keyword in node:
        if keyword in UNENFORCED_KEYWORDS and not (keyword == "uniqueItems" and node[keyword] is False):
            raise _refuse(path, keyword, param)
    if isinstance(node.get("allOf"), list) and len(node["allOf"]) > 1:
        raise _refuse(path, "allOf", param, " with more than one schema (outlines-core concatenates them)")
    combinator = next((key for key in _COMBINATORS if key in node), None)
    if combinator is not None:
        for sibling in ("type", "properties", "items", "enum", "const", *_LENGTH_KEYWORDS, "pattern", "format"):
            if sibling in node:
                raise _refuse(path, sibling, param, f" next to '{combinator}' (move it into each alternative)")
    if any(key in node for key in _LENGTH_KEYWORDS):
        for dropped in ("pattern", "format"):
            if dropped in node:
                raise _refuse(path, dropped, param, " together with minLength/maxLength")
    if any(key in node for key in BOUND_KEYWORDS):
        return _bounded_integer(node, path, ranges, param)
    prepared = dict(node)
    for key in _SCHEMA_KEYWORDS:
        if isinstance(node.get(key), dict):
            prepared[key] = _prepare(node[key], _pointer(path, key), ranges, param)
    for key in _SCHEMA_LIST_KEYWORDS:
        if isinstance(node.get(key), list):
            base = _pointer(path, key)
            prepared[key] = [_prepare(item, f"{base}/{i}", ranges, param) for i, item in enumerate(node[key])]
    for key in _SCHEMA_MAP_KEYWORDS:
        if isinstance(node.get(key), dict):
            base = _pointer(path, key)
            prepared[key] = {
                name: _prepare(sub, _pointer(base, name), ranges, param) for name, sub in node[key].items()
            }
    return prepared


def _bounded_integer(node: dict[str, Any], path: str, ranges: dict[str, str], param: str) -> dict[str, Any]:
    """An integer schema with bounds -> a placeholder const that schema_regex swaps for a range regex."""
    bound = next(key for key in BOUND_KEYWORDS if key in node)
    types = node.get("type")
    type_list = types if isinstance(types, list) else [types]
    if "integer" not in type_list or "number" in type_list:
        raise _refuse(path, bound, param, " on a schema that is not an integer (fractional bounds are not regular)")
    for other in ("enum", "const"):
        if other in node:
            raise _refuse(path, bound, param, f" together with '{other}'")
    low, high = _integer_bounds(node, path, param)
    if low is not None and high is not None and low > high:
        raise BadRequestError(f"no integer satisfies the bounds at {path or '/'}", param=param)
    token = f"ovserveint{secrets.token_hex(8)}"
    ranges[token] = integer_range_regex(low, high)
    placeholder = {"const": token}
    others = [kind for kind in type_list if kind != "integer"]
    if not others:
        return placeholder
    rest = {key: value for key, value in node.items() if key not in BOUND_KEYWORDS}
    return {"anyOf": [placeholder, _prepare({**rest, "type": others}, path, ranges, param)]}


def _integer_bounds(node: dict[str, Any], path: str, param: str) -> tuple[int | None, int | None]:
    def number(key: str) -> float | None:
        value = node.get(key)
        if value is None or isinstance(value, bool):
            return None
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise BadRequestError(f"{_pointer(path, key)} must be a finite number", param=param)
        return value

    low: int | None = None
    high: int | None = None
    if (minimum := number("minimum")) is not None:
        # Draft 4 spelled exclusivity as a boolean next to the bound.
        low = math.floor(minimum) + 1 if node.get("exclusiveMinimum") is True else math.ceil(minimum)
    if (maximum := number("maximum")) is not None:
        high = math.ceil(maximum) - 1 if node.get("exclusiveMaximum") is True else math.floor(maximum)
    if (exclusive_min := number("exclusiveMinimum")) is not None:
        low = max(low if low is not None else -math.inf, math.floor(exclusive_min) + 1)  # type: ignore[assignment]
    if (exclusive_max := number("exclusiveMaximum")) is not None:
        high = min(high if high is not None else math.inf, math.ceil(exclusive_max) - 1)  # type: ignore[assignment]
    return low, high


def integer_range_regex(low: int | None, high: int | None) -> str:
    """A regex matching exactly the JSON integers in [low, high] (None: unbounded), no "-0"."""
    parts = []
    if low is None or low < 0:
        # Negative n in [low, high] <=> -n in [max(1, -high), -low]
        magnitude_low = 1 if high is None or high >= 0 else -high
        magnitude_high = None if low is None else -low
        parts.append(f"-({_natural_range(magnitude_low, magnitude_high)})")
    if high is None or high >= 0:
        parts.append(_natural_range(max(low or 0, 0), high))
    return "|".join(f"({part})" for part in parts)


def _natural_range(low: int, high: int | None) -> str:
    """Regex for the naturals in [low, high] written without leading zeros (high None: unbounded)."""
    parts = []
    digits = len(str(low))
    top = high if high is not None else 10**digits - 1
    for width in range(digits, len(str(top)) + 1):
        first = max(low, 10 ** (width - 1) if width > 1 else 0)
        last = min(top, 10**width - 1)
        if first <= last:
            parts.append(_same_width(str(first), str(last)))
    if high is None:
        parts.append(f"[1-9][0-9]{{{digits},}}")
    return "|".join(parts)


def _same_width(low: str, high: str) -> str:
    """Regex for the digit strings of one width between low and high inclusive."""
    if not low:
        return ""
    if low[0] == high[0]:
        inner = _same_width(low[1:], high[1:])
        return low[0] + (f"({inner})" if "|" in inner else inner)
    rest = len(low) - 1
    any_rest = f"[0-9]{{{rest}}}" if rest else ""
    if low[1:] == "0" * rest and high[1:] == "9" * rest:
        return f"[{low[0]}-{high[0]}]{any_rest}"
    parts = [f"{low[0]}({_same_width(low[1:], '9' * rest)})"]
    if int(high[0]) - int(low[0]) > 1:
        parts.append(f"[{int(low[0]) + 1}-{int(high[0]) - 1}]{any_rest}")
    parts.append(f"{high[0]}({_same_width('0' * rest, high[1:])})")
    return "|".join(parts)


def response_format_grammar(output_format: OutputFormat | None) -> GrammarSpec | None:
    """OpenAI's ``json_object`` / ``json_schema``, plus OVMS's ``regex`` and ``const_string``.

    The request model has validated the shapes (a regex compiles); only the JSON schema is
    checked here, as it is compiled.
    """
    match output_format:
        case JsonSchemaFormat(schema=schema, schema_origin=origin):
            return {"regex": schema_regex(schema, param=origin)}
        case RegexFormat(pattern=pattern):
            return {"regex": pattern}
    return None  # free text


def tool_call_schema(tool: Tool) -> dict[str, Any]:
    """The JSON a forced call of ``tool`` must be: its name, and arguments under its parameters schema."""
    parameters = tool.parameters or {"type": "object", "properties": {}}
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _call_wrap(fmt: ToolCallFormat | None, what: str, param: str) -> tuple[str, str]:
    """The text around one JSON call in ``fmt``, for the formats a grammar can guide once a call opens."""
    if fmt is None or fmt.json_call_wrap is None:
        raise BadRequestError(
            f"{what} needs a model whose tool format ovserve can guide (hermes3/qwen); "
            f"this model's format is {fmt.name if fmt else 'unknown'}",
            param=param,
        )
    return fmt.json_call_wrap


def _any_call_regex(tools: list[Tool]) -> str:
    return "|".join(f"({schema_regex(tool_call_schema(tool), param=tool.parameters_origin)})" for tool in tools)


def guided_tool_calls_grammar(fmt: ToolCallFormat | None, tools: list[Tool], *, param: str) -> GrammarSpec:
    """enable_tool_guided_generation with tool_choice auto: free text, but a call the model starts
    must be a valid call of one of ``tools`` (OVMS's structural tags, triggered by the call marker)."""
    begin, end = _call_wrap(fmt, "enable_tool_guided_generation", param)
    return {"trigger": begin.strip(), "begin": begin, "regex": f"({_any_call_regex(tools)})", "end": end}


def forced_tool_call_grammar(fmt: ToolCallFormat | None, tools: list[Tool], *, param: str) -> GrammarSpec:
    """A grammar that admits exactly one call of one of ``tools`` in the model's own format."""
    if fmt is None or fmt.call_regex is None:
        raise BadRequestError(
            "tool_choice 'required' or a named tool needs a model whose tool format ovserve can force; "
            f"this model's format is {fmt.name if fmt else 'unknown'} (see docs/tools.md)",
            param=param,
        )
    calls = []
    for tool in tools:
        parameters = tool.parameters or {"type": "object", "properties": {}}
        calls.append(
            fmt.call_regex(tool.name, parameters, functools.partial(schema_regex, param=tool.parameters_origin))
        )
    return {"regex": "|".join(f"({call})" for call in calls)}
