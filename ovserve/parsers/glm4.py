"""GLM-4.5 / GLM-4.6 / GLM-4.7: the function name, then key/value pairs as XML-style tags.

GLM-4.5 and GLM-4.6 write a newline after the name and after each tag (:data:`FORMAT`)::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

GLM-4.7 writes the same without the newlines (:data:`FORMAT_47`)::

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

Sources: the published chat templates (zai-org/GLM-4.5 and GLM-4.7 ``chat_template.jinja``:
``<arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>``),
vLLM ``vllm/tool_parsers/glm4_moe_tool_parser.py`` and ``glm47_moe_tool_parser.py`` (vLLM and
SGLang name them ``glm45`` and ``glm47``). Both formats read both layouts; they differ in the call
a grammar forces.

A string property's value is the text as written; any other value is JSON, typed by the tool's
schema (:func:`~ovserve.parsers.base.typed_value`). An ``</arg_value>`` closes the value only where
the next ``<arg_key>`` or the end of the call follows, so a value may contain that text. Between
the tags whitespace and a literal ``\\n`` (vLLM's GLM-4.7 parser tolerates it) are skipped.

A ``</tool_call>`` met while a value is open (the last ``<arg_value>`` not yet closed) is text
of the value. Limit: a value that contains ``</arg_value>`` and then ``</tool_call>`` still cuts
the call short (the block comes back as content).
"""

from __future__ import annotations

from typing import Any

from ovserve.json_types import JsonObject
from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import (
    CallRegex,
    SchemaRegex,
    ToolSchemas,
    property_schema,
    regex_literal,
    schema_arguments,
    text_value_regex,
    typed_value,
)

START, END = "<tool_call>", "</tool_call>"
KEY, KEY_END = "<arg_key>", "</arg_key>"
VALUE, VALUE_END = "<arg_value>", "</arg_value>"
_NOT_IN_NAMES = frozenset("{}<>\"' \t\r\n")


def _skip_separators(text: str, position: int) -> int:
    while position < len(text):
        if text[position].isspace():
            position += 1
        elif text.startswith("\\n", position):
            position += 2
        else:
            break
    return position


def _expect(text: str, position: int, tag: str) -> int:
    if not text.startswith(tag, position):
        raise PayloadError(f"expected {tag} at {position}")
    return position + len(tag)


def _value_end(text: str, start: int) -> int:
    search = start
    while (found := text.find(VALUE_END, search)) != -1:
        after = _skip_separators(text, found + len(VALUE_END))
        if after == len(text) or text.startswith(KEY, after):
            return found
        search = found + 1
    raise PayloadError(f"missing {VALUE_END}")


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    head = payload.partition(KEY)[0]
    name = head.strip()
    if not name or any(char in _NOT_IN_NAMES for char in name):
        raise PayloadError(f"invalid function name {name!r}")
    arguments: JsonObject = {}
    position = _skip_separators(payload, len(head))
    while position < len(payload):
        key_start = _expect(payload, position, KEY)
        key_end = payload.find(KEY_END, key_start)
        if key_end == -1:
            raise PayloadError(f"missing {KEY_END}")
        key = payload[key_start:key_end].strip()
        if not key or "<" in key:
            raise PayloadError(f"invalid argument name {key!r}")
        value_start = _expect(payload, _skip_separators(payload, key_end + len(KEY_END)), VALUE)
        value_end = _value_end(payload, value_start)
        arguments[key] = typed_value(payload[value_start:value_end], property_schema(tools, name, key))
        position = _skip_separators(payload, value_end + len(VALUE_END))
    return [ToolCall(name=name, arguments=arguments)]


def open_payload(payload: str) -> bool:
    """Whether the payload stops inside a value (the end marker is the value's text)."""
    return payload.rfind(VALUE) > payload.rfind(VALUE_END)


def _call_regex(separator: str) -> CallRegex:
    """The call as the template writes it, ``separator`` after the name and after each tag: the
    declared arguments in schema order, the required ones mandatory (string values cannot contain
    ``<``: see ``text_value_regex``)."""

    def call_regex(name: str, parameters: Any, schema_regex: SchemaRegex) -> str:
        parts = [regex_literal(f"{START}{name}{separator}")]
        for argument, schema, required in schema_arguments(parameters):
            key = regex_literal(f"{KEY}{argument}{KEY_END}{separator}{VALUE}")
            item = f"{key}({text_value_regex(schema, schema_regex)}){regex_literal(VALUE_END + separator)}"
            parts.append(f"({item})" if required else f"({item})?")
        parts.append(regex_literal(END))
        return "".join(parts)

    return call_regex


_SPECIAL = (START, END, KEY, KEY_END, VALUE, VALUE_END)
FORMAT = ToolCallFormat(
    name="glm45",
    starts=(START,),
    end=END,
    decode=decode,
    call_regex=_call_regex("\n"),
    special_tokens=_SPECIAL,
    open_payload=open_payload,
)
FORMAT_47 = ToolCallFormat(
    name="glm47",
    starts=(START,),
    end=END,
    decode=decode,
    call_regex=_call_regex(""),
    special_tokens=_SPECIAL,
    open_payload=open_payload,
)
