"""A tool call as the core carries it: the name and the arguments as a JSON object.

Every dialect takes the object (Anthropic's ``tool_use.input``, Ollama's ``function.arguments``,
the chat template's ``tool_calls[].function.arguments``); only OpenAI's API writes arguments as a
string, and it is made in one place (:func:`arguments_json`), so its bytes are the same in chat,
Responses and ``ovserve parse``.

Arguments that arrive as text (OpenAI chat's and Responses' earlier calls sent back in a
conversation) are read by one function for every dialect (:func:`read_arguments`), with one
fallback for text that is not a JSON object.

Contract of the parsers: a call they emit has a JSON object of arguments (plain JSON values: no
tuples, no non-string keys, no NaN from a Python literal: :func:`json_value`); text that does
not decode to one is no call (:class:`PayloadError`, the text stays content).
"""

from __future__ import annotations

import json
import secrets
import string
import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ovserve.json_types import JsonObject, JsonValue

# The key the fallback keeps unreadable argument text under (read_arguments).
UNREADABLE_KEY = "arguments"


@dataclass(frozen=True)
class ToolCall:
    """A call the model made, parsed from its output."""

    name: str
    arguments: JsonObject
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")


class PayloadError(ValueError):
    """The text between the markers is not a tool call of this format."""


def arguments_json(arguments: JsonObject) -> str:
    """OpenAI's ``function.arguments`` string (chat, Responses, ``ovserve parse``).

    ``json.dumps`` with its default separators (``", "``, ``": "``) and ``ensure_ascii=False``
    (non-ASCII text as it is, not ``\\u`` escapes): the bytes OpenAI clients got when the parsers
    wrote the string themselves, kept so a streamed or stored answer does not change.
    """
    return json.dumps(arguments, ensure_ascii=False)


class ReadArguments(NamedTuple):
    value: JsonObject  # what every dialect and chat template gets
    unreadable: str | None  # the text as sent, when it is not a JSON object (value is the fallback)


def read_arguments(text: str) -> ReadArguments:
    """Arguments sent as text (OpenAI chat's ``function.arguments``, a Responses
    ``function_call``'s ``arguments``) -> the object the core carries.

    JSON text of an object is that object. The fallback, the same for every dialect: blank text is
    ``{}`` (a call without arguments; clients send ``""`` for one), and any other text that is not
    a JSON object (not JSON, ``NaN``/``Infinity``, a JSON array, string or number, nesting too
    deep to read) is ``{"arguments": <the text>}``: kept whole, not dropped and not an error, since
    a conversation is replayed as its client sent it. The text itself is returned beside it.
    """
    if not text.strip():
        return ReadArguments({}, text)
    try:
        value = json.loads(text, parse_constant=reject_json_constant)
    except (ValueError, RecursionError):
        return ReadArguments({UNREADABLE_KEY: text}, text)
    if not isinstance(value, dict):
        return ReadArguments({UNREADABLE_KEY: text}, text)
    return ReadArguments(value, None)


def json_value(value: object) -> JsonValue:
    """A Python value read from a model's literal (``ast.literal_eval``) as the JSON value
    ``json.dumps`` writes for it: tuples become lists, int/float/bool/None keys their JSON text.
    ``ValueError``/``TypeError`` when it has none (sets, bytes, complex, NaN)."""
    decoded: JsonValue = json.loads(json.dumps(value, allow_nan=False))
    return decoded


def reject_json_constant(name: str) -> Any:
    """``json.loads``' ``parse_constant`` that refuses ``NaN``/``Infinity`` (not JSON, though Python reads them)."""
    raise ValueError(f"{name} is not JSON")  # NaN/Infinity: json.loads accepts them, clients would not


def call_from_object(item: Any, *, arguments_keys: tuple[str, ...] = ("arguments", "parameters")) -> ToolCall:
    """``{"name": ..., "arguments": {...}}`` (arguments may also be a JSON string) -> ToolCall."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        raise PayloadError("a tool call needs a 'name'")
    arguments: Any = {}
    for key in arguments_keys:
        if key in item:
            arguments = item[key]
            break
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            raise PayloadError(f"arguments are not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise PayloadError("arguments must be a JSON object")
    return ToolCall(name=item["name"], arguments=arguments)


def decode_json(payload: str) -> Any:
    """``payload`` as JSON, else :class:`PayloadError` (nesting past the decoder's depth too: the
    model's text, not a crashed request)."""
    try:
        return json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"not JSON: {exc}") from exc


def call_list(payload: str, tools: object = None) -> list[ToolCall]:
    """A JSON list of ``{"name": ..., "arguments": {...}}`` calls (Mistral v3, Granite 3, Phi-4-mini):
    a ``ToolCallFormat.decode`` (the tools' schemas do not matter: JSON values are typed already)."""
    items = decode_json(payload)
    if not isinstance(items, list) or not items:
        raise PayloadError("expected a non-empty JSON list of calls")
    return [call_from_object(item) for item in items]


def nine_alphanumerics() -> str:
    """A tool-call id as Mistral's chat templates demand it (and vLLM and OVMS generate it)."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
