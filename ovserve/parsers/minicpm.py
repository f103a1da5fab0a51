"""MiniCPM3 / MiniCPM4 (MiniCPM4-MCP): Python calls in a fenced block between markers.

After an optional thought (``<|thought_start|>...<|thought_end|>``: the ``minicpm`` reasoning
parser), one call per line::

    <|tool_call_start|>
    ```python
    get_weather(city="Paris",unit="celsius")
    ```
    <|tool_call_end|>
    Text for the user may follow.

Sources: the published chat template (OpenBMB/MiniCPM
``demo/minicpm3/function_call/minicpm_chat_template_with_tool.jinja``: ``name(k=v|tojson,...)``,
the format MiniCPM4-MCP's data and ``demo/minicpm4/MCP/generate_example.py`` use) and vLLM's
``minicpm`` parser (OpenBMB/MiniCPM ``demo/minicpm3/function_call/minicpm_tool_parser.py``).

A value is JSON (what the template writes), else a Python literal (``'single'`` quotes, ``True``;
JSON's ``true``/``false``/``null`` inside Python containers are read too). Keyword arguments that
are Python keywords (``from=``) are accepted. Positional arguments, variables, expressions or a
line that is not one call make the block content.

Other MiniCPM releases write other formats: MiniCPM5 (and MiniCPM4's later template, per SGLang's
``minicpm4_xml_detector.py``) ``<function name=...><param name=...>`` (``minicpm5``); MiniCPM-V
4.5 is built on Qwen3 (``hermes3``), MiniCPM-V 4.6 on Qwen3.5 (``qwen3coder``).
"""

from __future__ import annotations

import ast
import io
import itertools
import json
import keyword
import re
import tokenize
from typing import Any

from ovserve.json_types import JsonObject
from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall, json_value, reject_json_constant
from ovserve.parsers.schemas import SchemaRegex, ToolSchemas, regex_literal, schema_arguments

START, END = "<|tool_call_start|>", "<|tool_call_end|>"
FENCE = "```"
_CALL = re.compile(r"([A-Za-z_][\w.\-]*)\((.*)\)\s*;?")
_JSON_NAMES = {"true": True, "false": False, "null": None}
# Appended to keyword-named arguments so Python parses them (``from=`` -> ``from__kw=``).
_KEYWORD_SUFFIX = "__kw"


class _JsonNames(ast.NodeTransformer):
    """JSON's ``true``/``false``/``null`` written inside a Python literal -> their constants."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _JSON_NAMES:
            return ast.copy_location(ast.Constant(_JSON_NAMES[node.id]), node)
        return node


def _keyword_names_renamed(source: str) -> str:
    """``source`` (one line) with keyword arguments named like Python keywords renamed."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise PayloadError(f"not a Python call: {exc}") from exc
    significant = [token for token in tokens if token.type not in (tokenize.NL, tokenize.NEWLINE)]
    renamed = source
    for token, following in reversed(list(itertools.pairwise(significant))):
        if token.type == tokenize.NAME and keyword.iskeyword(token.string) and following.string == "=":
            column = token.end[1]
            renamed = renamed[:column] + _KEYWORD_SUFFIX + renamed[column:]
    return renamed


def _value(source: str, node: ast.expr) -> Any:
    segment = ast.get_source_segment(source, node) or ""
    try:
        return json.loads(segment, parse_constant=reject_json_constant)
    except (ValueError, RecursionError):
        pass
    try:
        # As JSON writes it (a tuple a list); sets, bytes, complex, nan have no JSON value.
        value = json_value(ast.literal_eval(_JsonNames().visit(node)))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise PayloadError(f"argument {segment!r} is not a literal") from exc
    return value


def _arguments(text: str) -> JsonObject:
    source = _keyword_names_renamed(f"f({text})")
    try:
        call = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise PayloadError(f"not a Python call: {exc}") from exc
    if not isinstance(call, ast.Call) or call.args:
        raise PayloadError("arguments must all be keyword arguments")
    arguments: JsonObject = {}
    for argument in call.keywords:
        if argument.arg is None:
            raise PayloadError("**kwargs is not an argument")
        name = argument.arg
        if name.endswith(_KEYWORD_SUFFIX) and keyword.iskeyword(name[: -len(_KEYWORD_SUFFIX)]):
            name = name[: -len(_KEYWORD_SUFFIX)]
        arguments[name] = _value(source, argument.value)
    return arguments


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    code = payload
    if code.startswith(FENCE):
        code = code.partition("\n")[2]  # the fence line names the language (python)
        code = code.rstrip().removesuffix(FENCE)
    calls = []
    for line in code.splitlines():
        if not line.strip():
            continue
        match = _CALL.fullmatch(line.strip())
        if match is None:
            raise PayloadError(f"not a call: {line!r}")
        calls.append(ToolCall(name=match[1], arguments=_arguments(match[2])))
    if not calls:
        raise PayloadError("no call")
    return calls


def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
    """One call as the template writes it: ``name(k=JSON,...)`` with the declared arguments in
    schema order, the required ones mandatory. Argument names that are not Python identifiers
    cannot be written in this format (a forced call of such a tool comes back as content)."""
    items = [
        (f"{regex_literal(argument)}=({schema_regex(schema)})", required)
        for argument, schema, required in schema_arguments(parameters)
    ]
    # Commas go between the arguments written: ``first`` admits the arguments from the i-th on
    # when none was written before, ``rest`` when one was (each then opens with a comma).
    rest, first = "", ""
    for item, required in reversed(items):
        first = f"{item}{rest}" if required else f"({item}{rest}|{first})"
        rest = f",{item}{rest}" if required else f"(,{item})?{rest}"
    opening = regex_literal(f"{START}\n{FENCE}python\n{name}(")
    closing = regex_literal(f")\n{FENCE}\n{END}")
    return f"{opening}{first}{closing}"


FORMAT = ToolCallFormat(
    name="minicpm",
    starts=(START,),
    end=END,
    decode=decode,
    call_regex=call_regex,
    special_tokens=(START, END),
)
