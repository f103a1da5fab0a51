"""Qwen3-Coder, Qwen3.5 / Qwen3.6 (and MiniCPM-V 4.6, built on Qwen3.5): XML-style calls.

One call per block, several blocks for parallel calls::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Sources: the published chat templates (Qwen/Qwen3-Coder-30B-A3B-Instruct and Qwen3.5
``chat_template.jinja``: strings written as they are, other values ``| tojson``, Qwen3.5's
scalars ``| string``, hence ``True``/``None``), vLLM ``vllm/tool_parsers/qwen3coder_tool_parser.py``
and OVMS ``src/llm/io_processing/qwen3coder/qwen3coder_tool_parser.cpp``.

A value is the text between ``<parameter=ARG>`` and ``</parameter>`` without the one newline the
template writes on each side, typed by the tool's schema (:func:`~ovserve.parsers.schemas.typed_value`).
A ``</parameter>`` closes the value only where another ``<parameter=`` or the end of the function
follows, and a ``<parameter=`` on a new line inside a value opens a nested pair, so a value may
contain the markup (code or docs about this format); a value whose ``</parameter>`` is missing
runs to the next ``<parameter=`` on a new line (vLLM reads it so too; the last value must be
closed). A ``</tool_call>`` met while a value is open (the last ``<parameter=`` not closed, no
``</function>`` before it) is text of the value, as in vLLM's structural reading.

Limits: a value that contains ``</parameter>`` or ``</function>`` and then ``</tool_call>`` is
cut short there, and the block comes back as content; a bare ``<function=...>`` without
``<tool_call>`` (OVMS tolerates it) is not a call here.
"""

from __future__ import annotations

from collections.abc import Iterator

from ovserve.json_types import JsonObject
from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import PayloadError, ToolCall
from ovserve.parsers.schemas import ToolSchemas, property_schema, tagged_call, typed_value
from ovserve.parsers.segments import inside_value, name_in_tag, skip_space

START, END = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"


def _value_end(body: str, start: int) -> tuple[int, int]:
    """(end of the value starting at ``start``, where the next parameter may start). A
    ``<parameter=`` on a new line inside the value opens a nested pair whose ``</parameter>``
    is not the value's (vLLM counts them so too)."""
    depth, search = 0, start
    while (close := body.find(PARAMETER_END, search)) != -1:
        opening = body.find("\n" + PARAMETER, search)
        if opening != -1 and opening < close:
            depth, search = depth + 1, opening + 1 + len(PARAMETER)
            continue
        search = close + len(PARAMETER_END)
        if depth:
            depth -= 1
            continue
        after = body[search:].lstrip()
        if not after or after.startswith(PARAMETER):
            return close, search
    implicit = body.find("\n" + PARAMETER, start)
    if implicit == -1:
        # Reading to </function> (as vLLM does) would turn a value cut short into a wrong call.
        raise PayloadError(f"missing {PARAMETER_END}")
    return implicit + 1, implicit + 1


def _parameters(body: str) -> Iterator[tuple[str, str]]:
    position = 0
    while (position := skip_space(body, position)) < len(body):
        if not body.startswith(PARAMETER, position):
            raise PayloadError(f"expected {PARAMETER}ARG> or {FUNCTION_END}")
        close = body.find(">", position)
        if close == -1:
            raise PayloadError("unterminated parameter tag")
        argument = name_in_tag(body[position + len(PARAMETER) : close], "parameter")
        end, position = _value_end(body, close + 1)
        yield argument, body[close + 1 : end]


def _without_delimiting_newlines(text: str) -> str:
    text = text[1:] if text.startswith("\n") else text
    return text[:-1] if text.endswith("\n") else text


def decode(payload: str, tools: ToolSchemas) -> list[ToolCall]:
    if not payload.startswith(FUNCTION):
        raise PayloadError(f"expected {FUNCTION}NAME>")
    close = payload.find(">")
    if close == -1:
        raise PayloadError("unterminated function tag")
    name = name_in_tag(payload[len(FUNCTION) : close], "function")
    if not payload.endswith(FUNCTION_END):
        raise PayloadError(f"missing {FUNCTION_END}")
    arguments: JsonObject = {}
    for argument, text in _parameters(payload[close + 1 : -len(FUNCTION_END)]):
        arguments[argument] = typed_value(_without_delimiting_newlines(text), property_schema(tools, name, argument))
    return [ToolCall(name=name, arguments=arguments)]


def open_payload(payload: str) -> bool:
    """Whether the payload stops inside a parameter value (the end marker is the value's text):
    the last ``<parameter=`` is not closed and no ``</function>`` closed the call."""
    text = payload.strip()
    return (
        text.startswith(FUNCTION) and inside_value(text, PARAMETER, PARAMETER_END) and not text.endswith(FUNCTION_END)
    )


# One call as the template writes it (string values cannot contain ``<``: see ``text_value_regex``).
call_regex = tagged_call(
    lambda name: f"{START}\n{FUNCTION}{name}>\n",
    lambda argument: (f"{PARAMETER}{argument}>\n", f"\n{PARAMETER_END}\n"),
    f"{FUNCTION_END}\n{END}",
)


FORMAT = ToolCallFormat(
    name="qwen3coder",
    starts=(START,),
    end=END,
    decode=decode,
    call_regex=call_regex,
    special_tokens=(START, END),
    open_payload=open_payload,
)
