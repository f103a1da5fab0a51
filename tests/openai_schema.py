"""Validators for OpenAI's response schemas.

The schemas come from a subset of OpenAI's OpenAPI spec vendored in tests/fixtures/openai (the
components the chat and completions responses reference, and everything ``Response`` and
``ResponseStreamEvent`` reference for the Responses API; MIT-licensed, see the LICENSE file there),
so the suite runs on a clean clone; OVSERVE_OPENAI_SPEC points at a full spec instead.
"""

from __future__ import annotations

import copy
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.conftest import ROOT

SPEC = Path(
    os.environ.get("OVSERVE_OPENAI_SPEC", str(ROOT / "tests" / "fixtures" / "openai" / "openai-openapi.subset.json"))
)
_BASE = "urn:openai-openapi"


@cache
def spec() -> dict[str, Any]:
    return json.loads(SPEC.read_text(encoding="utf-8"))


@cache
def _registry() -> Registry:
    document = copy.deepcopy(spec())
    schemas = document["components"]["schemas"]
    # OpenAI streams legacy completions with finish_reason null until the last chunk, and usage
    # null before the usage chunk (include_usage), though the spec's one shape for both says
    # string and object: a derived schema allows null there for chunks.
    chunk = copy.deepcopy(schemas["CreateCompletionResponse"])
    finish = chunk["properties"]["choices"]["items"]["properties"]["finish_reason"]
    chunk["properties"]["choices"]["items"]["properties"]["finish_reason"] = {"anyOf": [finish, {"type": "null"}]}
    chunk["properties"]["usage"] = {"anyOf": [chunk["properties"]["usage"], {"type": "null"}]}
    schemas["CreateCompletionStreamChunk"] = chunk
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    return Registry().with_resource(_BASE, resource)


def validate(instance: Any, schema_name: str) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``instance`` matches ``components.schemas[schema_name]``."""
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"{_BASE}#/components/schemas/{schema_name}"}, registry=_registry()
    )
    validator.validate(instance)
