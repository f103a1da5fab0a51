"""What every part of the OpenAPI document shares: JSON Schema as typed JSON, references to the
components, and the rewriting of a request model's schema into what the server really accepts.

Contract: a schema is a :data:`Schema` (a JSON object); :func:`generate` turns pydantic models into
components (requests in validation mode, answers in serialization mode); :func:`request_schema`
makes every optional top-level property nullable ("not sent": the request models drop a null
before validation) and ``model`` an enum of the served names; :func:`member` reads a schema's
sub-object and fails loudly when the generated schema is not the shape this code was written for
(a pydantic upgrade, a model changed without this module).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode

from ovserve.json_types import JsonObject, JsonValue

Schema = JsonObject

REF = "#/components/schemas/{model}"

# What each documented error status means; a dialect's operations say which they answer.
ERRORS = {
    "400": "The body is not valid JSON or not a valid request, or asks for something unsupported",
    "404": "'model' names no model served here",
    "413": "The body is larger than --max_request_mb",
    "415": "The Content-Type is not JSON",
    "422": "Azure AI Foundry dialect (?api-version=): a valid request the model cannot honour",
    "429": "Too many requests",
    "503": "The model is loading, restarting or out of KV cache",
    "504": "No answer within --request_timeout",
    "529": "Anthropic's 'overloaded_error': the model is loading, restarting or out of KV cache",
}

_ANNOTATIONS = ("title", "description", "default", "examples")

# One model's schema to generate: (its name, the mode, its pydantic core schema).
SchemaInput = tuple[str, JsonSchemaMode, Any]


def ref(name: str, template: str = REF) -> Schema:
    return {"$ref": template.format(model=name)}


def json_content(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}}


def member(schema: Schema, key: str) -> Schema:
    """``schema[key]``, a JSON object by construction of the generated schemas."""
    value = schema[key]
    if not isinstance(value, dict):
        raise TypeError(f"expected an object at {key!r} of a generated schema, found {type(value).__name__}")
    return value


def generate(inputs: Iterable[SchemaInput], template: str = REF) -> tuple[dict[str, Schema], dict[str, Schema]]:
    """pydantic's schemas of ``inputs``: (each input's own schema by name, every component by name)."""
    generated, definitions = GenerateJsonSchema(ref_template=template).generate_definitions(list(inputs))
    own = {name: schema for (name, _), schema in generated.items()}
    return own, {str(name): schema for name, schema in definitions.items()}


def nullable(schema: Schema) -> Schema:
    """``schema`` or null, keeping the annotations on the outside."""
    options = schema.get("anyOf")
    if isinstance(options, list) and any(isinstance(o, dict) and o.get("type") == "null" for o in options):
        return schema
    outer = {key: value for key, value in schema.items() if key in _ANNOTATIONS}
    inner = {key: value for key, value in schema.items() if key not in _ANNOTATIONS}
    return {**outer, "anyOf": [inner, {"type": "null"}]}


def request_schema(schema: Schema, model_names: list[str], *, stop: Schema | None = None) -> Schema:
    """A request model's schema as the server reads it: optional properties nullable, ``model`` an
    enum of ``model_names`` (optional when the model says so: tokenize with one model served), and
    ``stop`` replaced by ``stop`` when given (a rule the model checks in a validator)."""
    required = schema.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    properties = {
        name: prop if name in required_names else nullable(_object(prop))
        for name, prop in member(schema, "properties").items()
    }
    model = {key: value for key, value in _object(properties["model"]).items() if key != "anyOf"}
    names: list[JsonValue] = list(model_names)
    if "model" in required_names:
        properties["model"] = {**model, "enum": names}
    else:
        properties["model"] = {**model, "anyOf": [{"enum": names}, {"type": "null"}]}
    if stop is not None:
        properties["stop"] = stop
    return {**schema, "properties": properties}


def _object(value: JsonValue) -> Schema:
    if not isinstance(value, dict):
        raise TypeError(f"expected a schema object, found {type(value).__name__}")
    return value
