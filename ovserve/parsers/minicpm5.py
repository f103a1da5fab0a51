"""MiniCPM5 (and MiniCPM4's later template): XML elements, several for parallel calls::

    <function name="get_weather"><param name="city">Paris</param></function>

Sources: OVMS ``src/llm/io_processing/minicpm5/minicpm5_tool_parser.cpp`` (the ``minicpm5``
tool_parser), vLLM ``vllm/tool_parsers/minicpm5xml_tool_parser.py`` and SGLang
``python/sglang/srt/function_call/minicpm5_detector.py`` (whose docstring calls it MiniCPM-4's
new template; OpenBMB/MiniCPM's README points MiniCPM5-1B at SGLang's ``minicpm5`` parser).

A value is the text between ``<param name="...">`` and ``</param>``, stripped of surrounding
whitespace (all three references strip it) or the inside of a ``<![CDATA[...]]>`` section, typed
by the tool's schema (:func:`~ovserve.parsers.schemas.typed_value`). A ``</param>`` closes the value
only where the next ``<param`` or the end of the function follows. XML entities are not decoded
(OVMS does not either; a model writing code writes ``&`` and ``<`` as they are). Names may be
quoted with ``"`` or ``'``.

A ``</function>`` met while a value is open (the last ``<param`` not yet closed) is text of the
value. Limit: a value that contains ``</param>`` and then ``</function>`` still cuts the call short
(the element comes back as content).
"""

from __future__ import annotations

from ovserve.json_types import JsonObject
from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import ToolSchemas, property_schema, tagged_call, typed_value
from ovserve.parsers.segments import inside_value, skip_space, value_end

START, END = "<function name=", "</function>"
PARAMETER, PARAMETER_END = "<param name=", "</param>"
CDATA, CDATA_END = "<![CDATA[", "]]>"


def _attribute(text: str, position: int) -> tuple[str, int]:
    """The quoted name at ``position`` and the position after the tag's ``>``."""
    quote = text[position : position + 1]
    if quote not in ('"', "'"):
        raise PayloadError("the name must be quoted")
    close = text.find(quote, position + 1)
    if close == -1 or not text.startswith(">", close + 1):
        raise PayloadError("unterminated name")
    name = text[position + 1 : close].strip()
    if not name or "<" in name or ">" in name:
        raise PayloadError(f"invalid name {name!r}")
    return name, close + 2


def _text(value: str) -> str:
    value = value.strip()
    if value.startswith(CDATA) and value.endswith(CDATA_END):
        return value[len(CDATA) : -len(CDATA_END)]
    return value


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    name, position = _attribute(payload, 0)
    arguments: JsonObject = {}
    while (position := skip_space(payload, position)) < len(payload):
        if not payload.startswith(PARAMETER, position):
            raise PayloadError(f"expected {PARAMETER}")
        argument, start = _attribute(payload, position + len(PARAMETER))
        end = value_end(payload, start, PARAMETER_END, PARAMETER)
        arguments[argument] = typed_value(_text(payload[start:end]), property_schema(tools, name, argument))
        position = end + len(PARAMETER_END)
    return [ToolCall(name=name, arguments=arguments)]


def open_payload(payload: str) -> bool:
    """Whether the payload stops inside a value (the end marker is the value's text)."""
    return inside_value(payload, PARAMETER, PARAMETER_END)


# One call, compact (string values cannot contain ``<`` and lose surrounding whitespace: see
# ``text_value_regex``).
call_regex = tagged_call(
    lambda name: f'{START}"{name}">', lambda argument: (f'{PARAMETER}"{argument}">', PARAMETER_END), END
)


FORMAT = ToolCallFormat(
    name="minicpm5", starts=(START,), end=END, decode=decode, call_regex=call_regex, open_payload=open_payload
)
