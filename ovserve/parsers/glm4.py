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
schema (:func:`~ovserve.parsers.schemas.typed_value`). An ``</arg_value>`` closes the value only where
the next ``<arg_key>`` or the end of the call follows, so a value may contain that text. Between
the tags whitespace and a literal ``\\n`` (vLLM's GLM-4.7 parser tolerates it) are skipped.

A ``</tool_call>`` met while a value is open (the last ``<arg_value>`` not yet closed) is text
of the value. Limit: a value that contains ``</arg_value>`` and then ``</tool_call>`` still cuts
the call short (the block comes back as content).
"""

from __future__ import annotations

import dataclasses

from ovserve.json_types import JsonObject
from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import CallRegex, ToolSchemas, property_schema, tagged_call, typed_value
from ovserve.parsers.segments import expect, inside_value, name_in_tag, value_end

START, END = "<tool_call>", "</tool_call>"
KEY, KEY_END = "<arg_key>", "</arg_key>"
VALUE, VALUE_END = "<arg_value>", "</arg_value>"


def _skip_separators(text: str, position: int) -> int:
    while position < len(text):
        if text[position].isspace():
            position += 1
        elif text.startswith("\\n", position):
            position += 2
        else:
            break
    return position


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    head = payload.partition(KEY)[0]
    name = name_in_tag(head.strip(), "function")
    arguments: JsonObject = {}
    position = _skip_separators(payload, len(head))
    while position < len(payload):
        key_start = expect(payload, position, KEY)
        key_end = payload.find(KEY_END, key_start)
        if key_end == -1:
            raise PayloadError(f"missing {KEY_END}")
        key = payload[key_start:key_end].strip()
        if not key or "<" in key:
            raise PayloadError(f"invalid argument name {key!r}")
        value_start = expect(payload, _skip_separators(payload, key_end + len(KEY_END)), VALUE)
        end = value_end(payload, value_start, VALUE_END, KEY, _skip_separators)
        arguments[key] = typed_value(payload[value_start:end], property_schema(tools, name, key))
        position = _skip_separators(payload, end + len(VALUE_END))
    return [ToolCall(name=name, arguments=arguments)]


def open_payload(payload: str) -> bool:
    """Whether the payload stops inside a value (the end marker is the value's text)."""
    return inside_value(payload, VALUE, VALUE_END)


def _call_regex(separator: str) -> CallRegex:
    """The call as the template writes it, ``separator`` after the name and after each tag (string
    values cannot contain ``<``: see ``text_value_regex``)."""
    return tagged_call(
        lambda name: f"{START}{name}{separator}",
        lambda key: (f"{KEY}{key}{KEY_END}{separator}{VALUE}", f"{VALUE_END}{separator}"),
        END,
    )


FORMAT = ToolCallFormat(
    name="glm45",
    starts=(START,),
    end=END,
    decode=decode,
    call_regex=_call_regex("\n"),
    special_tokens=(START, END, KEY, KEY_END, VALUE, VALUE_END),
    open_payload=open_payload,
)
# GLM-4.7: the same calls, forced without the newlines.
FORMAT_47 = dataclasses.replace(FORMAT, name="glm47", call_regex=_call_regex(""))
