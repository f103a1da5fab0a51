"""JSON as plain data: what a client sent before a request model validated it, a JSON Schema, a
chat template's input, a model's own config files. Typed as JSON (pydantic's ``JsonValue``), so
code that reads it narrows what it finds instead of trusting ``Any``.

The readers below narrow a value of a file someone else wrote (``config.json``,
``preprocessor_config.json``...): a field of the wrong kind reads as absent, never as a
``TypeError`` at startup.
"""

from __future__ import annotations

from typing import TypeAlias

from pydantic import JsonValue

JsonObject: TypeAlias = dict[str, JsonValue]


def json_object(value: JsonValue | None) -> JsonObject:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def json_list(value: JsonValue | None) -> list[JsonValue]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def json_int(value: JsonValue | None) -> int | None:
    """``value`` as an integer: an integer, an integral number (``336.0``) or a decimal string
    (``"336"``); None for anything else (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdecimal():
        return int(value)
    return None


def without_nulls(data: object) -> object:
    """A request body with its ``null`` top-level fields left out: every dialect reads ``null`` as
    "not sent" (its request models' ``mode="before"`` validator); anything but an object as it is."""
    if isinstance(data, dict):
        return {key: value for key, value in data.items() if value is not None}
    return data


__all__ = ["JsonObject", "JsonValue", "json_int", "json_list", "json_object", "without_nulls"]
