"""JSON as plain data: what a client sent before a request model validated it, a JSON Schema, a
chat template's input. Typed as JSON (pydantic's ``JsonValue``), so code that reads it narrows
what it finds instead of trusting ``Any``."""

from __future__ import annotations

from typing import TypeAlias

from pydantic import JsonValue

JsonObject: TypeAlias = dict[str, JsonValue]

__all__ = ["JsonObject", "JsonValue"]
