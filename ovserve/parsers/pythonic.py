"""Pythonic tool calls (``pythonic``, ``llama4_pythonic``, ``lfm2``): a Python list of calls,
``[get_weather(city="SF", days=3), get_time()]``, with keyword arguments whose values are Python
literals. The list is read with :mod:`ast`, never evaluated.

Where the list stands:

- bare, as the whole output (Llama 3.2 / Llama 4 pythonic, ToolACE). Like llama3's bare JSON it
  counts only at the start of the output, so an answer that merely begins with ``[`` is held
  back until the output ends and then given back whole as content;
- after ``<|python_start|>`` (Llama 4), to the end of the output, ``<|python_end|>`` dropped;
- between ``<|tool_call_start|>`` and ``<|tool_call_end|>`` (LFM2), anywhere; text around it is
  content.

Sources: vLLM ``vllm/entrypoints/openai/tool_parsers/pythonic_tool_parser.py`` and
``llama4_pythonic_tool_parser.py`` (names ``pythonic``, ``llama4_pythonic``); OVMS
``src/llm/io_processing/lfm2/lfm2_tool_parser.cpp`` (name ``lfm2``) and LFM2's chat template
(ggml-org/llama.cpp ``models/templates/llama-cpp-lfm2.jinja`` writes the tagged list, content
after it).

Values: str, int, float, True/False/None, lists and tuples (JSON arrays), dicts with string keys;
a negative number is a number; JSON's ``true``/``false``/``null`` are read as the Python
constants (OVMS reads them so for LFM2; forced calls write them, see :func:`call_regex`).
Refused, so the text stays content: positional or ``**`` arguments (vLLM silently drops them),
a callee that is not a plain name, any other expression, non-finite floats, lone surrogates.
"""

from __future__ import annotations

import ast
import keyword
import math
from typing import Any

from ovserve.errors import BadRequestError
from ovserve.json_types import JsonObject, JsonValue
from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import SchemaRegex, ToolSchemas

BARE = "["
PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
CALL_START = "<|tool_call_start|>"
CALL_END = "<|tool_call_end|>"

_JSON_CONSTANTS = {"true": True, "false": False, "null": None}


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    source = payload.removesuffix(PYTHON_END).strip()
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise PayloadError(f"not a Python expression: {exc}") from exc
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        raise PayloadError("expected a non-empty list of calls")
    return [_call(node) for node in tree.body.elts]


def _call(node: ast.expr) -> ToolCall:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise PayloadError("each item must be a call of a tool by name")
    if node.args:
        raise PayloadError(f"{node.func.id}: positional arguments have no parameter names")
    arguments: JsonObject = {}
    for argument in node.keywords:
        if argument.arg is None:
            raise PayloadError(f"{node.func.id}: ** arguments are not literals")
        arguments[argument.arg] = _value(argument.value)
    return ToolCall(name=node.func.id, arguments=arguments)


def _value(node: ast.expr) -> JsonValue:
    match node:
        case ast.Constant(value=str() as text):
            return _text(text)
        case ast.Constant(value=bool() | int() | None as constant):
            return constant
        case ast.Constant(value=float() as number):
            return _finite(number)
        case ast.UnaryOp(op=ast.USub() | ast.UAdd() as sign, operand=ast.Constant(value=int() | float() as number)) if (
            not isinstance(number, bool)
        ):
            return _finite(-number if isinstance(sign, ast.USub) else number)
        case ast.Name(id=name) if name in _JSON_CONSTANTS:
            return _JSON_CONSTANTS[name]
        case ast.List(elts=items) | ast.Tuple(elts=items):
            return [_value(item) for item in items]
        case ast.Dict(keys=keys, values=values):
            result: JsonObject = {}
            for key, item in zip(keys, values, strict=True):
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    raise PayloadError("dict keys must be strings")
                result[_text(key.value)] = _value(item)
            return result
    raise PayloadError(f"argument values must be literals, got {ast.dump(node)[:60]}")


def _finite(number: float) -> float:
    if isinstance(number, float) and not math.isfinite(number):
        raise PayloadError("numbers must be finite (JSON has no inf/nan)")
    return number


def _text(text: str) -> str:
    # "\ud83d\ude00" in a Python literal is two surrogates; JSON reads it as one character.
    try:
        return text.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError as exc:
        raise PayloadError("a string holds a lone surrogate") from exc


# outlines-core's JSON string escapes include "\/", which JSON reads as "/" but Python keeps as
# two characters; forced values leave it out (tests/unit/parsers/test_pythonic.py checks the
# compiled regex still contains the class this replaces).
JSON_STRING_ESCAPES = r'\\["\\/bfnrt]'
PYTHON_STRING_ESCAPES = r'\\["\\bfnrt]'
# Keywords of a tool's parameters schema that the keyword-argument regex honours or may ignore.
_OBJECT_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "title",
        "description",
        "$defs",
        "definitions",
        "$schema",
    }
)


def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
    """One bare call, ``[NAME(key=value, ...)]``: the declared properties in order, the required
    ones always, each value the compact JSON its schema allows (JSON literals are Python ones but
    for true/false/null, which :func:`decode` reads). Tools this cannot write exactly are refused:
    a name or property that is not a Python identifier, a schema that is not a plain object of
    properties (``anyOf``, ``patternProperties``... at the top)."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise BadRequestError(f"the tool name '{name}' cannot be written as a Python call (pythonic tool format)")
    if not isinstance(parameters, dict) or not set(parameters) <= _OBJECT_KEYWORDS:
        raise BadRequestError(
            f"the parameters of tool '{name}' cannot be written as Python keyword arguments: only an object "
            "schema of 'properties' can (pythonic tool format)"
        )
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    definitions = {key: parameters[key] for key in ("$defs", "definitions") if key in parameters}
    items = []
    for key, schema in properties.items():
        if not key.isidentifier() or keyword.iskeyword(key):
            raise BadRequestError(
                f"the parameter '{key}' of tool '{name}' cannot be written as a Python keyword argument "
                "(pythonic tool format)"
            )
        value = schema_regex({**schema, **definitions} if isinstance(schema, dict) else schema)
        items.append((f"{key}=({value.replace(JSON_STRING_ESCAPES, PYTHON_STRING_ESCAPES)})", key in required))
    return rf"\[{name}\({_keywords(items)}\)\]"


def _keywords(items: list[tuple[str, bool]], start: int = 0) -> str:
    """``key=value`` regexes joined by ", ", each optional one free to be left out."""

    def following(index: int) -> str:
        return "".join(f", {item}" if needed else f"(, {item})?" for item, needed in items[index:])

    if start == len(items):
        return ""
    item, needed = items[start]
    if needed:
        return item + following(start + 1)
    rest = _keywords(items, start + 1)
    return f"({item}{following(start + 1)}|{rest})" if rest else f"({item}{following(start + 1)})?"


FORMAT = ToolCallFormat(
    name="pythonic",
    starts=(CALL_START, PYTHON_START),
    end=None,
    block_ends=((CALL_START, CALL_END),),
    decode=decode,
    start_of_output_only=(BARE,),
    marker_in_payload=(BARE,),
    call_regex=call_regex,
    special_tokens=(CALL_START, CALL_END, PYTHON_START, PYTHON_END),
)
