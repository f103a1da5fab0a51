"""The OpenAPI 3.1 document of the POST endpoints, served at ``GET /openapi.json``.

Every POST route the server registers is described once, under its ``/v3`` path: the ``/v1`` and
unprefixed paths are aliases served by the same handlers and are not repeated
(``tests/unit/test_openapi.py`` walks a built app's router to keep it so). The operations are the
generation endpoints (chat, completions, responses) and the retrieval ones (embeddings, rerank,
tokenize, detokenize).

The request bodies are the JSON schemas of the very pydantic models the routes validate with
(:mod:`ovserve.protocol`), so the document cannot drift from what the server accepts; it is what
schemathesis fuzzes against (``scripts/fuzz_api.py``). What pydantic's schema cannot know is added
here:

- ``null`` on any optional top-level field means "not sent" (``SamplingRequest._null_means_not_sent``
  and ``_RetrievalRequest._null_means_not_sent`` drop it before validation), so every optional
  property also allows ``null``;
- ``model`` must name a model this server serves (any other name is a 404), so it is an ``enum`` of
  the served names; for embeddings and rerank, of the models serving that task (another served
  model is a 400, ``wrong_model_task``), or of every served name when none does (every request is
  then that 400);
- rules the models check in validators rather than in field types (a message's ``content`` is
  required unless an assistant message carries ``tool_calls``; at most four non-empty ``stop``
  sequences; tokenize takes exactly one of ``content`` and ``messages``). Cross-field rules JSON
  Schema cannot state simply (``stream_options`` only with ``stream``, ``best_of >= n``...) are left
  out: the document accepts a little more than the server.

The success bodies of the retrieval endpoints are described here (their services build plain
dicts, not models); the generation endpoints' are left open (their shapes are OpenAI's, checked
against OpenAI's own document by the e2e tests). Every error is OpenAI's shape (``ErrorResponse``),
each operation listing the statuses it can answer.

The bodies stay open (``additionalProperties: true``): other servers' fields are mapped, ignored or
refused by :mod:`ovserve.api.field_policy`, and unknown ones are accepted and logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ovserve import __version__
from ovserve.api import keys
from ovserve.protocol import (
    MAX_STOP_SEQUENCES,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    RerankRequest,
    SamplingRequest,
    TokenizeRequest,
)
from ovserve.protocol_responses import ResponsesRequest

_REF = "#/components/schemas/{model}"

# What each documented error status means here; the body is always ErrorResponse.
_ERRORS = {
    "400": "The body is not valid JSON or not a valid request, or asks for something unsupported",
    "404": "'model' names no model served here",
    "413": "The body is larger than --max_request_mb",
    "415": "The Content-Type is not JSON",
    "422": "Azure AI Foundry dialect (?api-version=): a valid request the model cannot honour",
    "429": "Too many requests",
    "503": "The model is loading, restarting or out of KV cache",
    "504": "No answer within --request_timeout",
}
_GENERATION_ERRORS = ("400", "404", "413", "415", "422", "429", "503")
# Embeddings and rerank: admitted by tokens (429/503), bounded by --request_timeout (504); no Azure dialect.
_RETRIEVAL_ERRORS = ("400", "404", "413", "415", "429", "503", "504")
# Tokenize/detokenize need only the tokenizer (in this process): they answer while the engine loads.
_TOKENIZER_ERRORS = ("400", "404", "413", "415")

_GENERATION_200: dict[str, Any] = {
    "description": "The completion (JSON), or server-sent events when 'stream' is true",
    "content": {
        "application/json": {"schema": {"type": "object"}},
        "text/event-stream": {"schema": {"type": "string"}},
    },
}

_USAGE: dict[str, Any] = {
    "type": "object",
    "properties": {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}},
    "required": ["prompt_tokens", "total_tokens"],
}

# The success bodies RetrievalService builds (ovserve.dialects.openai.retrieval).
_RESPONSE_SCHEMAS: dict[str, dict[str, Any]] = {
    "EmbeddingResponse": {
        "type": "object",
        "properties": {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "object": {"const": "embedding"},
                        "index": {"type": "integer", "minimum": 0},
                        # "base64": the float32 values' little-endian bytes.
                        "embedding": {"anyOf": [{"type": "array", "items": {"type": "number"}}, {"type": "string"}]},
                    },
                    "required": ["object", "index", "embedding"],
                },
            },
            "model": {"type": "string"},
            "usage": _USAGE,
        },
        "required": ["object", "data", "model", "usage"],
    },
    "RerankResponse": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "model": {"type": "string"},
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "index": {"type": "integer", "minimum": 0},
                        "relevance_score": {"type": "number"},
                        "document": {
                            "type": "object",
                            "properties": {"text": {"type": "string"}},
                            "required": ["text"],
                        },
                    },
                    "required": ["index", "relevance_score"],
                },
            },
            "usage": _USAGE,
        },
        "required": ["id", "model", "results", "usage"],
    },
    "TokenizeResponse": {
        "type": "object",
        "properties": {
            "tokens": {
                "anyOf": [
                    {"type": "array", "items": {"type": "integer"}},
                    {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"id": {"type": "integer"}, "piece": {"type": "string"}},
                            "required": ["id", "piece"],
                        },
                    },
                ]
            }
        },
        "required": ["tokens"],
    },
    "DetokenizeResponse": {
        "type": "object",
        "properties": {"content": {"type": "string"}},
        "required": ["content"],
    },
}


def _json_200(description: str, schema_name: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(model=schema_name)}}},
    }


@dataclass(frozen=True)
class _Operation:
    path: str
    model: type[BaseModel]
    summary: str
    success: dict[str, Any]
    errors: tuple[str, ...]
    # The task a model must serve (its "model" enum lists those models); None: any served model.
    task: str | None = None


# /v1 and the bare paths are aliases of /v3 and are not repeated.
_OPERATIONS: tuple[_Operation, ...] = (
    _Operation(
        "/v3/chat/completions", ChatCompletionRequest, "Create a chat completion", _GENERATION_200, _GENERATION_ERRORS
    ),
    _Operation(
        "/v3/completions",
        CompletionRequest,
        "Create a text completion (legacy, no chat template)",
        _GENERATION_200,
        _GENERATION_ERRORS,
    ),
    _Operation(
        "/v3/responses",
        ResponsesRequest,
        "Create a model response (OpenAI's Responses API)",
        _GENERATION_200,
        _GENERATION_ERRORS,
    ),
    _Operation(
        "/v3/embeddings",
        EmbeddingRequest,
        "Create embeddings (OpenAI's shape)",
        _json_200("One embedding per input, in input order", "EmbeddingResponse"),
        _RETRIEVAL_ERRORS,
        task="embeddings",
    ),
    _Operation(
        "/v3/rerank",
        RerankRequest,
        "Score documents against a query (OVMS's and Cohere's shape)",
        _json_200("The documents by relevance, highest first", "RerankResponse"),
        _RETRIEVAL_ERRORS,
        task="rerank",
    ),
    _Operation(
        "/v3/tokenize",
        TokenizeRequest,
        "Tokenize text, or chat messages rendered with the chat template (llama.cpp's shape)",
        _json_200("The token ids, with their pieces when 'with_pieces' is true", "TokenizeResponse"),
        _TOKENIZER_ERRORS,
    ),
    _Operation(
        "/v3/detokenize",
        DetokenizeRequest,
        "Decode token ids to text (llama.cpp's shape)",
        _json_200("The decoded text", "DetokenizeResponse"),
        _TOKENIZER_ERRORS,
    ),
)

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

# TokenizeRequest._one_source: exactly one of them, non-null.
_TOKENIZE_SOURCE_RULE: list[dict[str, Any]] = [
    {"required": ["content"], "properties": {"content": {"type": "string"}}},
    {"required": ["messages"], "properties": {"messages": {"type": "array"}}},
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


def _request_schema(schema: dict[str, Any], model_names: list[str], sampling: bool) -> dict[str, Any]:
    required = set(schema.get("required", []))
    properties = {
        name: prop if name in required else _nullable(prop) for name, prop in schema.get("properties", {}).items()
    }
    model = {key: value for key, value in properties["model"].items() if key != "anyOf"}
    if "model" in required:
        properties["model"] = {**model, "enum": model_names}
    else:  # tokenize/detokenize: optional when the server serves one model
        properties["model"] = {**model, "anyOf": [{"enum": model_names}, {"type": "null"}]}
    if sampling:
        properties["stop"] = _STOP
    return {**schema, "properties": properties}


def _operation(operation: _Operation) -> dict[str, Any]:
    error = {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")}}}
    responses: dict[str, Any] = {"200": operation.success}
    responses.update({status: {"description": _ERRORS[status], "content": error} for status in operation.errors})
    name = operation.model.__name__
    return {
        "summary": operation.summary,
        "operationId": name,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _REF.format(model=name)}}},
        },
        "responses": responses,
    }


def openapi_document(served: Mapping[str, str]) -> dict[str, Any]:
    """The OpenAPI 3.1 document for a server serving ``served`` (model name -> task)."""
    names = sorted(served)
    models = [operation.model for operation in _OPERATIONS]
    _, top = models_json_schema([(model, "validation") for model in models], ref_template=_REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    for operation in _OPERATIONS:
        name = operation.model.__name__
        for_task = [model for model in names if served[model] == operation.task]
        # No model serves the task: every served name, each answered with wrong_model_task's 400
        # (an empty enum would make the operation unusable to a client generator or fuzzer).
        enum = for_task or names if operation.task is not None else names
        schemas[name] = _request_schema(schemas[name], enum, issubclass(operation.model, SamplingRequest))
    schemas["ChatMessage"] = {**schemas["ChatMessage"], "anyOf": _MESSAGE_CONTENT_RULE}
    schemas["TokenizeRequest"] = {**schemas["TokenizeRequest"], "oneOf": _TOKENIZE_SOURCE_RULE}
    schemas["ErrorResponse"] = _ERROR_SCHEMA
    schemas.update(_RESPONSE_SCHEMAS)
    return {
        "openapi": "3.1.0",
        "info": {"title": "ovserve", "version": __version__},
        "paths": {operation.path: {"post": _operation(operation)} for operation in _OPERATIONS},
        "components": {"schemas": schemas},
    }


async def openapi_json(request: web.Request) -> web.Response:
    document = openapi_document({model.name: model.task for model in request.app[keys.MODELS]})
    return web.json_response(document)
