"""The OpenAPI 3.1 document of the generation endpoints, served at ``GET /openapi.json``.

The request bodies are the JSON schemas of the very pydantic models the routes validate with
(:mod:`ovserve.protocol`), so the document cannot drift from what the server accepts; it is what
schemathesis fuzzes against (``scripts/fuzz_api.py``). Two things pydantic's schema cannot know are
added here:

- ``null`` on any optional top-level field means "not sent" (``SamplingRequest._null_means_not_sent``
  drops it before validation), so every optional property also allows ``null``;
- ``model`` must name a model this server serves (any other name is a 404), so it is an ``enum`` of
  the served names;
- rules the models check in validators rather than in field types (a message's ``content`` is
  required unless an assistant message carries ``tool_calls``; at most four non-empty ``stop``
  sequences). Cross-field rules JSON Schema cannot state simply (``stream_options`` only with
  ``stream``, ``best_of >= n``...) are left out: the document accepts a little more than the server.

The bodies stay open (``additionalProperties: true``): other servers' fields are mapped, ignored or
refused by :mod:`ovserve.api.field_policy`, and unknown ones are accepted and logged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ovserve import __version__
from ovserve.api import keys
from ovserve.protocol import MAX_STOP_SEQUENCES, ChatCompletionRequest, CompletionRequest
from ovserve.protocol_responses import ResponsesRequest

_REF = "#/components/schemas/{model}"

# Path, request model, summary. /v1 and the bare paths are aliases of /v3 and are not repeated.
_OPERATIONS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("/v3/chat/completions", ChatCompletionRequest, "Create a chat completion"),
    ("/v3/completions", CompletionRequest, "Create a text completion (legacy, no chat template)"),
    ("/v3/responses", ResponsesRequest, "Create a model response (OpenAI's Responses API)"),
)

# What each documented error status means here; the body is always ErrorResponse.
_ERRORS = {
    "400": "The body is not valid JSON or not a valid request, or asks for something unsupported",
    "404": "'model' names no model served here",
    "413": "The body is larger than --max_request_mb",
    "415": "The Content-Type is not JSON",
    "422": "Azure AI Foundry dialect (?api-version=): a valid request the model cannot honour",
    "429": "Too many requests",
    "503": "The model is loading, restarting or out of KV cache",
}

_ERROR_SCHEMA: dict[str, Any] = {
    "title": "ErrorResponse",
    "description": "OpenAI's error shape.",
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "code": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            "required": ["message", "type", "param", "code"],
        }
    },
    "required": ["error"],
}

_ANNOTATIONS = ("title", "description", "default", "examples")

# ChatMessage._content_required: content (non-null) unless the assistant calls tools.
_MESSAGE_CONTENT_RULE: list[dict[str, Any]] = [
    {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
    {
        "required": ["role", "tool_calls"],
        "properties": {"role": {"const": "assistant"}, "tool_calls": {"type": "array", "minItems": 1}},
    },
]

# SamplingRequest._stop_list.
_STOP_SEQUENCE: dict[str, Any] = {"type": "string", "minLength": 1}
_STOP: dict[str, Any] = {
    "title": "Stop",
    "anyOf": [
        _STOP_SEQUENCE,
        {"type": "array", "items": _STOP_SEQUENCE, "maxItems": MAX_STOP_SEQUENCES},
        {"type": "null"},
    ],
}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null, keeping the annotations on the outside."""
    if any(option.get("type") == "null" for option in schema.get("anyOf", [])):
        return schema
    outer = {key: value for key, value in schema.items() if key in _ANNOTATIONS}
    inner = {key: value for key, value in schema.items() if key not in _ANNOTATIONS}
    return {**outer, "anyOf": [inner, {"type": "null"}]}


def _request_schema(schema: dict[str, Any], model_names: list[str]) -> dict[str, Any]:
    required = set(schema.get("required", []))
    properties = {
        name: prop if name in required else _nullable(prop) for name, prop in schema.get("properties", {}).items()
    }
    properties["model"] = {**properties["model"], "enum": model_names}
    properties["stop"] = _STOP
    return {**schema, "properties": properties}


def _operation(model: type[BaseModel], summary: str) -> dict[str, Any]:
    error = {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")}}}
    responses: dict[str, Any] = {
        "200": {
            "description": "The completion (JSON), or server-sent events when 'stream' is true",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        }
    }
    responses.update({status: {"description": why, "content": error} for status, why in _ERRORS.items()})
    return {
        "summary": summary,
        "operationId": model.__name__,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}},
        },
        "responses": responses,
    }


def openapi_document(model_names: Iterable[str]) -> dict[str, Any]:
    """The OpenAPI 3.1 document for a server serving ``model_names``."""
    names = sorted(model_names)
    models = [model for _, model, _ in _OPERATIONS]
    _, top = models_json_schema([(model, "validation") for model in models], ref_template=_REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    for model in models:
        schemas[model.__name__] = _request_schema(schemas[model.__name__], names)
    schemas["ChatMessage"] = {**schemas["ChatMessage"], "anyOf": _MESSAGE_CONTENT_RULE}
    schemas["ErrorResponse"] = _ERROR_SCHEMA
    return {
        "openapi": "3.1.0",
        "info": {"title": "ovserve", "version": __version__},
        "paths": {path: {"post": _operation(model, summary)} for path, model, summary in _OPERATIONS},
        "components": {"schemas": schemas},
    }


async def openapi_json(request: web.Request) -> web.Response:
    document = openapi_document(model.name for model in request.app[keys.MODELS])
    return web.json_response(document)
