"""What the offered tools' parameter schemas decide in a parser: argument values a model writes
as text, typed by their property's schema (:func:`typed_value`), and the regexes a grammar forces
a whole call with (:data:`CallRegex`, :func:`text_value_regex`, :func:`json_object_call`).

Contract: :func:`typed_value` reads back as the same value whatever :func:`text_value_regex`
admits, and every value it returns is a plain JSON value (the core's arguments are JSON objects,
``ovserve.parsers.calls``).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ovserve.parsers.calls import json_value, reject_json_constant

# Tool name -> its ``parameters`` JSON schema (``{}`` when the tool declared none), for formats
# whose argument values are text typed by the schema (Qwen3-Coder's XML, GLM's arg_value).
ToolSchemas = Mapping[str, Any]
NO_TOOLS: ToolSchemas = {}
# A JSON schema -> the regex of its compact JSON (``ovserve.core.guided.schema_regex``).
SchemaRegex = Callable[[Any], str]
# (tool name, parameters schema, schema_regex) -> the regex of one whole call in a format,
# markers included: what a grammar forces for ``tool_choice`` required / named.
CallRegex = Callable[[str, Any, SchemaRegex], str]


def regex_literal(text: str) -> str:
    """``text`` as a regex matching itself; a newline is written ``\\n`` (the engine's regex dialect)."""
    return re.escape(text).replace("\\\n", "\\n")


def json_object_call(begin: str, end: str, *, arguments_key: str = "arguments") -> CallRegex:
    """The :data:`CallRegex` of formats that write one call as ``begin{"name": ..., "arguments": {...}}end``."""

    def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
        schema = {
            "type": "object",
            "properties": {"name": {"const": name}, arguments_key: parameters},
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
        return f"{regex_literal(begin)}({schema_regex(schema)}){regex_literal(end)}"

    return call_regex


# -- arguments written as text (XML-style formats: Qwen3-Coder, GLM, MiniCPM5) -------------------

_NOT_DECODED = object()
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),  # before int: a bool is an int in Python
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "unknown")


def _schema_types(schema: Any) -> set[str] | None:
    """The JSON types a property schema admits; None when it does not say (no ``type``,
    ``enum``, ``const``, or an ``anyOf``/``oneOf`` of typed alternatives)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list) and kind and all(isinstance(name, str) for name in kind):
        return set(kind)
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return {_json_type(value) for value in schema["enum"]}
    if "const" in schema:
        return {_json_type(schema["const"])}
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            union: set[str] = set()
            for option in options:
                types = _schema_types(option)
                if types is None:
                    return None
                union |= types
            return union
    return None


def _decode_literal(text: str) -> Any:
    """``text`` as JSON, else as a Python literal (``True``, ``None``, ``{'k': 'v'}``: what
    templates that render values with ``| string`` teach); ``_NOT_DECODED`` when neither."""
    try:
        return json.loads(text, parse_constant=reject_json_constant)
    except (ValueError, RecursionError):
        pass
    try:
        value = ast.literal_eval(text)
        json.dumps(value, allow_nan=False)  # sets, bytes, complex, nan: not a JSON value
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_DECODED
    return value


def property_schema(tools: ToolSchemas, tool: str, argument: str) -> Any:
    """The schema of ``argument`` in ``tool``'s parameters; None when the tool was not offered or
    does not declare the property."""
    parameters = tools.get(tool)
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(properties, dict):
        return None
    return properties.get(argument)


def typed_value(text: str, schema: Any) -> Any:
    """An argument value the model wrote as text -> its JSON value, typed by the property's schema.

    A string property keeps the text as it is (a nullable one reads ``null``/``None`` as null; one
    that also admits other types takes the text's JSON value when it is one of them). Any other
    typed property is JSON-decoded, else read as a Python literal (``True``/``False``/``None``,
    single-quoted containers), else kept as the text. A property of unknown type (no schema, an
    undeclared argument, an unknown tool) is its JSON value when the text is JSON, else the text.
    Callers strip the format's own delimiters (Qwen3-Coder's newline around the value) first.
    """
    types = _schema_types(schema)
    if types is None:
        try:
            return json.loads(text, parse_constant=reject_json_constant)
        except (ValueError, RecursionError):
            return text
    if "string" in types:
        if "null" in types and text.strip().lower() in ("null", "none"):
            return None
        others = types - {"string", "null"}
        if others:
            value = _decode_literal(text.strip())
            kind = _json_type(value)
            if kind in others or (kind == "integer" and "number" in others):
                return json_value(value)  # a dict literal's non-string keys as JSON writes them
        return text
    if "boolean" in types and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    value = _decode_literal(text.strip())
    return text if value is _NOT_DECODED else json_value(value)  # a literal's tuples as JSON lists


def text_value_regex(schema: Any, schema_regex: SchemaRegex) -> str:
    """The regex of an argument value written as text, for the :data:`CallRegex` of XML-style
    formats; :func:`typed_value` reads what it admits back as the same value.

    A property that is only a string is raw text without ``<`` (the markup's delimiter: a forced
    string value cannot contain ``<``): its ``enum``/``const`` the literal texts, its ``pattern``
    or ``format`` the unquoted string regex, its length bounds a bounded repeat. A nullable or
    mixed string property is any such text. Every other property is its compact JSON
    (``schema_regex``, which also refuses keywords the grammar cannot enforce).
    """
    json_regex = schema_regex(schema)
    types = _schema_types(schema)
    if not types or "string" not in types:
        return json_regex
    if types != {"string"}:
        return "[^<]*"
    literals = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if "const" in schema:
        literals = [schema["const"]]
    if literals is not None:
        return "(" + "|".join(regex_literal(value) for value in literals) + ")"
    if "pattern" in schema or "format" in schema:
        # outlines-core writes these as '"regex"' or '("regex")': the quotes are JSON's, not the text's.
        inner = json_regex[2:-2] if json_regex.startswith('("') and json_regex.endswith('")') else json_regex[1:-1]
        return f"({inner})"
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) or isinstance(high, int):
        return f"[^<]{{{low if isinstance(low, int) else 0},{high if isinstance(high, int) else ''}}}"
    return "[^<]*"


def tagged_call(opening: Callable[[str], str], argument: Callable[[str], tuple[str, str]], closing: str) -> CallRegex:
    """The :data:`CallRegex` of an XML-style format: ``opening(name)``; the declared arguments in
    schema order, the required ones mandatory, each its text value (:func:`text_value_regex`)
    between the two tags ``argument(its name)`` gives; then ``closing``."""

    def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
        parts = [regex_literal(opening(name))]
        for key, schema, required in schema_arguments(parameters):
            before, after = argument(key)
            item = f"{regex_literal(before)}({text_value_regex(schema, schema_regex)}){regex_literal(after)}"
            parts.append(f"({item})" if required else f"({item})?")
        parts.append(regex_literal(closing))
        return "".join(parts)

    return call_regex


def schema_arguments(parameters: Any) -> list[tuple[str, Any, bool]]:
    """(name, schema, required) of each declared property of a tool's parameters schema, in the
    schema's order, for call regexes that write arguments one by one. The schema's ``$defs`` /
    ``definitions`` go along with each property so its ``$ref`` still resolve."""
    if not isinstance(parameters, dict) or not isinstance(parameters.get("properties"), dict):
        return []
    required: list[Any] = parameters["required"] if isinstance(parameters.get("required"), list) else []
    shared = {key: parameters[key] for key in ("$defs", "definitions") if key in parameters}
    arguments = []
    for name, schema in parameters["properties"].items():
        if shared and isinstance(schema, dict):
            schema = {**shared, **schema}
        arguments.append((name, schema, name in required))
    return arguments
