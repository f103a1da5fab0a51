"""Reading a call block written as markers around names and arguments: JSON arguments (DeepSeek's
``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``, Kimi's
``<|tool_call_begin|>ID<|tool_call_argument_begin|>{...}<|tool_call_end|>``: :func:`marked_calls`), or XML-style tags
around each value written as text (GLM's ``<arg_value>``, Qwen3-Coder's ``<parameter=...>``,
MiniCPM5's ``<param name=...>``: :func:`value_end`, :func:`inside_value`).

Positions walk forward through one payload; every helper raises
:class:`~ovserve.parsers.calls.PayloadError` when the text is not what the format writes there, so
a malformed block goes back to the client as content. Arguments are read with a JSON decoder
rather than cut at the next marker, so marker text inside an argument string is just text.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ovserve.json_types import JsonObject
from ovserve.parsers.calls import PayloadError, ToolCall

_DECODER = json.JSONDecoder()
# Characters no function or parameter name has: their presence means stray markup or template text.
_NOT_IN_NAMES = frozenset("{}<>\"' \t\r\n")


def skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def expect(text: str, position: int, marker: str) -> int:
    """The position after ``marker``, which must come next (after whitespace)."""
    position = skip_space(text, position)
    if not text.startswith(marker, position):
        raise PayloadError(f"expected {marker!r} at {text[position : position + 20]!r}")
    return position + len(marker)


def until(text: str, position: int, marker: str) -> tuple[str, int]:
    """The text from ``position`` to the next ``marker`` (stripped), and the position after it."""
    found = text.find(marker, position)
    if found == -1:
        raise PayloadError(f"expected {marker!r}")
    return text[position:found].strip(), found + len(marker)


def name_in_tag(text: str, what: str) -> str:
    """``text``, a function's or an argument's name written inside the markup, if it is one."""
    if not text or any(char in _NOT_IN_NAMES for char in text):
        raise PayloadError(f"invalid {what} name {text!r}")
    return text


def arguments_at(text: str, position: int) -> tuple[JsonObject, int]:
    """The JSON object starting at ``position`` (after whitespace), and the position after it."""
    position = skip_space(text, position)
    try:
        value, end = _DECODER.raw_decode(text, position)
    except (ValueError, RecursionError) as exc:  # too deep to decode: the model's text, not a crash
        raise PayloadError(f"arguments are not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise PayloadError("arguments must be a JSON object")
    return value, end


def marked_calls(
    payload: str, begin: str, separator: str, end: str, call: Callable[[str, JsonObject], ToolCall]
) -> list[ToolCall]:
    """The calls of a section, one or more ``begin HEAD separator {JSON arguments} end`` (space
    between them is layout); ``call(HEAD, arguments)`` reads each, raising when HEAD names no tool."""
    calls: list[ToolCall] = []
    position = 0
    while (position := skip_space(payload, position)) < len(payload):
        position = expect(payload, position, begin)
        head, position = until(payload, position, separator)
        if begin in head or end in head:
            raise PayloadError(f"a call's markers before {separator!r}: {head[:40]!r}")
        arguments, position = arguments_at(payload, position)
        position = expect(payload, position, end)
        calls.append(call(head, arguments))
    if not calls:
        raise PayloadError("no call in the section")
    return calls


def value_end(text: str, start: int, close: str, follows: str, skip: Callable[[str, int], int] = skip_space) -> int:
    """Where the text value from ``start`` ends: at the first ``close`` after which (past what
    ``skip`` skips) the block ends or ``follows`` opens the next argument, so that a value may
    contain ``close`` itself."""
    search = start
    while (found := text.find(close, search)) != -1:
        after = skip(text, found + len(close))
        if after == len(text) or text.startswith(follows, after):
            return found
        search = found + 1
    raise PayloadError(f"missing {close}")


def inside_value(payload: str, opening: str, closing: str) -> bool:
    """Whether ``payload`` stops inside a value (its last ``opening`` not closed): the block's end
    marker met there is the value's text (``ToolCallFormat.open_payload``)."""
    return payload.rfind(opening) > payload.rfind(closing)
