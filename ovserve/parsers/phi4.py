"""Phi-4-mini: ``functools[{"name": ..., "arguments": {...}}, ...]``."""

from __future__ import annotations

from ovserve.parsers.base import ToolCallFormat
from ovserve.parsers.calls import call_list
from ovserve.parsers.schemas import json_object_call

FORMAT = ToolCallFormat(
    name="phi4", starts=("functools",), end=None, decode=call_list, call_regex=json_object_call("functools[", "]")
)
