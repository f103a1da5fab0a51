"""Validators for Anthropic's Messages API shapes.

The schemas are vendored in tests/fixtures/anthropic (generated from the ``anthropic`` SDK's types
by ``vendor_schema.py`` there, every object closed), so the suite runs on a clean clone. A stream's
``ping`` and ``error`` events are not in the SDK's event union (its stream skips the one and raises
the other): :func:`validate_event` checks them as Anthropic documents them.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.conftest import ROOT

SCHEMA = ROOT / "tests" / "fixtures" / "anthropic" / "anthropic-messages.subset.json"
_BASE = "urn:anthropic-messages"


@cache
def _registry() -> Registry:
    document = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return Registry().with_resource(_BASE, Resource.from_contents(document, default_specification=DRAFT202012))


def validate(instance: Any, name: str) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``instance`` matches ``$defs[name]``
    (Message, MessageStreamEvent, MessageTokensCount, ModelInfo, ErrorResponse)."""
    validator = jsonschema.Draft202012Validator({"$ref": f"{_BASE}#/$defs/{name}"}, registry=_registry())
    validator.validate(instance)


def validate_event(event: Any) -> None:
    if event.get("type") == "ping":
        assert event == {"type": "ping"}, event
    elif event.get("type") == "error":
        validate(event, "ErrorResponse")
    else:
        validate(event, "MessageStreamEvent")
