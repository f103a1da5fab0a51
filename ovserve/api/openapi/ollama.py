"""Ollama's native API (``/api/*``, :mod:`ovserve.api.ollama`) in the OpenAPI document.

Contract: :func:`components` are its schemas for a server serving ``served`` (model name -> task),
:func:`paths` its path items.

Ollama's API (``/api/chat``, ``generate``, ``embed``, ``embeddings``, ``show``; GET ``tags``, ``ps``,
``version``) is described the same way from :mod:`ovserve.dialects.ollama`'s request and response
models, its components named ``Ollama`` + the class name (``OllamaChatRequest``: the dialects share
class names). ``null`` on a top-level field is "not sent" there too (``RequestBody``), and ``model``
is an enum of the served names, each also with ``:latest`` (Ollama's untagged name, read as the
served one): for chat and generate every served model (the unload request works for any; to
generate, another task's model is a 400), for embed and embeddings the embeddings models (as
above); ``/api/show`` needs ``model``, or ``name`` when ``model`` is not sent. Chat and
generate stream by default: their 200 is ``application/x-ndjson`` (each line's schema: a piece of
output, the last line with its statistics, or the error line a failed stream ends with) unless
``stream`` is false, and ``application/json`` then, and for the load and unload answers (no
messages, no prompt) whatever ``stream`` says. Every error is Ollama's ``{"error": "..."}``
(``OllamaErrorResponse``), a full queue a 503 as Ollama answers. ``/api/pull``, ``push``,
``create``, ``copy`` and DELETE ``/api/delete`` are listed with the one answer they give, a 400
saying how to export a model, whatever their body. Generate's refusals are stated (``suffix``,
``template`` and ``context`` only empty; ``raw`` without ``images``, ``format`` or ``think``, by an
``if``/``then``); left out, the document accepting more than the server: ``tool_choice`` forcing a
call needs ``tools`` naming it (or naming the call ``required``), and what depends on the model
rather than the body (``think`` needs a reasoning format, ``tools`` a tool-call format, images a
VLM, ``dimensions`` a Matryoshka model; prompts within its context).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from ovserve.api.openapi.schema import (
    ERRORS,
    REF,
    Schema,
    SchemaInput,
    generate,
    json_content,
    member,
    nullable,
    ref,
    request_schema,
)
from ovserve.dialects.body import Body
from ovserve.dialects.ollama import request as ollama_request
from ovserve.dialects.ollama import response as ollama_response
from ovserve.dialects.ollama.models import LATEST
from ovserve.json_types import JsonValue

# Its components are generated apart and named "Ollama" + the class name: its ChatRequest, Message,
# ErrorResponse... would otherwise meet the OpenAI and Anthropic models of those names.
_OLLAMA = "Ollama"
_OLLAMA_ERROR = _OLLAMA + ollama_response.ErrorResponse.__name__
_OLLAMA_REF = REF.format(model=_OLLAMA + "{model}")
_NDJSON = "application/x-ndjson"  # what ovserve.api.ollama.NDJSONWriter sends

# What each documented status means on these routes; the body is always OllamaErrorResponse.
_OLLAMA_ERRORS = {
    **ERRORS,
    "404": "'model' names no model served here ('x:latest' names a served 'x')",
    "409": "The unload request (keep_alive 0, nothing to generate) names a pinned model",
    "503": "The model could not be loaded (in time), or its queue is full (Ollama's 'server busy')",
}
_OLLAMA_GENERATION_ERRORS = ("400", "404", "409", "413", "415", "503", "504")
_OLLAMA_EMBEDDING_ERRORS = ("400", "404", "413", "415", "503", "504")
_OLLAMA_SHOW_ERRORS = ("400", "404", "413", "415")

_OLLAMA_STREAMED = (
    "application/x-ndjson (Ollama streams unless 'stream' is false): one JSON object per line, a line "
    "per piece of output ('done' false), then the last line ('done' true, with done_reason and the "
    "statistics); a stream that fails after its first line ends with an error line instead. "
    "application/json: the answer when 'stream' is false, or when there is nothing to generate (the "
    "model loaded or unloaded: done_reason 'load' or 'unload')"
)


@dataclass(frozen=True)
class _OllamaOperation:
    method: Literal["get", "post"]
    path: str
    operation_id: str
    summary: str
    answer: type[Body]
    description: str  # what the answer is
    request: type[BaseModel] | None = None  # the body; None: a GET
    errors: tuple[str, ...] = ()
    # The schema name of each NDJSON line when "stream" is not false; None: no stream.
    stream_line: str | None = None
    # The task a model must serve (its "model" enum lists those models); None: any served model.
    task: str | None = None


_OLLAMA_OPERATIONS: tuple[_OllamaOperation, ...] = (
    _OllamaOperation(
        "post",
        "/api/chat",
        "ollamaChat",
        "Chat (Ollama's API); without messages, load the model (or unload it with keep_alive 0)",
        ollama_response.ChatResponse,
        _OLLAMA_STREAMED,
        ollama_request.ChatRequest,
        _OLLAMA_GENERATION_ERRORS,
        stream_line="ChatStreamLine",
    ),
    _OllamaOperation(
        "post",
        "/api/generate",
        "ollamaGenerate",
        "Generate from a prompt (Ollama's API); without prompt, load the model (or unload it with keep_alive 0)",
        ollama_response.GenerateResponse,
        _OLLAMA_STREAMED,
        ollama_request.GenerateRequest,
        _OLLAMA_GENERATION_ERRORS,
        stream_line="GenerateStreamLine",
    ),
    _OllamaOperation(
        "post",
        "/api/embed",
        "ollamaEmbed",
        "Create embeddings (Ollama's API)",
        ollama_response.EmbedResponse,
        "One embedding per input, in input order",
        ollama_request.EmbedRequest,
        _OLLAMA_EMBEDDING_ERRORS,
        task="embeddings",
    ),
    _OllamaOperation(
        "post",
        "/api/embeddings",
        "ollamaEmbeddings",
        "Create one embedding (Ollama's older API)",
        ollama_response.EmbeddingsResponse,
        "The prompt's embedding",
        ollama_request.EmbeddingsRequest,
        _OLLAMA_EMBEDDING_ERRORS,
        task="embeddings",
    ),
    _OllamaOperation(
        "post",
        "/api/show",
        "ollamaShow",
        "Describe a served model (Ollama's API)",
        ollama_response.ShowResponse,
        "Its chat template, sampling defaults, family and capabilities",
        ollama_request.ShowRequest,
        _OLLAMA_SHOW_ERRORS,
    ),
    _OllamaOperation(
        "get", "/api/tags", "ollamaTags", "List the served models (Ollama's API)", ollama_response.TagsResponse,
        "Every served model",
    ),
    _OllamaOperation(
        "get", "/api/ps", "ollamaPs", "List the loaded models (Ollama's API)", ollama_response.ProcessResponse,
        "The models whose engine is loaded, the one that stays longest first",
    ),
    _OllamaOperation(
        "get", "/api/version", "ollamaVersion", "The Ollama API level these routes speak",
        ollama_response.VersionResponse, "The Ollama release whose API this matches",
    ),
)  # fmt: skip

# Ollama's model store: ovserve serves models exported ahead of time, so each answers a 400 whose
# error says how (``ovserve.api.ollama.model_store``), whatever the body; the body is not read.
_MODEL_STORE = (("post", "pull"), ("post", "push"), ("post", "create"), ("post", "copy"), ("delete", "delete"))
_MODEL_STORE_ERROR = "Always: ovserve has no model store; the error says how to export a model and serve it"

# Options._not_zero: -1 and -2 mean "up to the context", 0 is refused.
_NUM_PREDICT: Schema = {
    "title": "Num Predict",
    "anyOf": [{"type": "integer", "minimum": -2, "not": {"const": 0}}, {"type": "null"}],
}


def _stream_line(answer: str) -> Schema:
    """A line of an Ollama stream (``ovserve.dialects.ollama.adapter.OllamaEndpoint.stream`` and
    ``failure_event``): a piece of output without statistics, the last line with all of them (its
    done_reason "stop" or "length"), or the error line a failed stream ends with."""
    statistics: list[JsonValue] = list(ollama_response.Stats.model_fields)
    piece: Schema = {"properties": {"done": {"const": False}, **dict.fromkeys(map(str, statistics), False)}}
    last: Schema = {
        "properties": {"done": {"const": True}, "done_reason": {"enum": ["stop", "length"]}},
        "required": statistics,
    }
    answer_ref = ref(_OLLAMA + answer)
    return {"anyOf": [{"allOf": [answer_ref, piece]}, {"allOf": [answer_ref, last]}, ref(_OLLAMA_ERROR)]}


@functools.cache
def _schemas() -> dict[str, Schema]:
    """The Ollama request models (validation) and answers and error body (serialization), each
    named ``Ollama`` + its class name, and the line of each stream. Built once; callers copy it."""
    inputs: list[SchemaInput] = []
    for operation in _OLLAMA_OPERATIONS:
        if operation.request is not None:
            inputs.append((operation.request.__name__, "validation", operation.request.__pydantic_core_schema__))
        inputs.append((operation.answer.__name__, "serialization", operation.answer.__pydantic_core_schema__))
    error = ollama_response.ErrorResponse
    inputs.append((error.__name__, "serialization", error.__pydantic_core_schema__))
    _, definitions = generate(inputs, _OLLAMA_REF)
    schemas = {_OLLAMA + name: schema for name, schema in definitions.items()}
    for operation in _OLLAMA_OPERATIONS:
        if operation.stream_line is not None:
            schemas[_OLLAMA + operation.stream_line] = _stream_line(operation.answer.__name__)
    member(schemas[_OLLAMA + ollama_request.Options.__name__], "properties")["num_predict"] = _NUM_PREDICT
    return schemas


# GenerateRequest._supported: Go templates, fill-in-the-middle and an earlier answer's context are
# refused unless empty; a raw prompt skips the chat template, so images, format and think (which
# need it) are refused with it unless empty.
_NOT_SUPPORTED = "Not supported here: only an empty value is accepted (docs/ollama.md)"
_EMPTY_TEXT: Schema = {"anyOf": [{"type": "string", "maxLength": 0}, {"type": "null"}]}
_EMPTY_LIST: Schema = {"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]}
_RAW_RULE: Schema = {
    "if": {"required": ["raw"], "properties": {"raw": {"const": True}}},
    "then": {"properties": {"images": _EMPTY_LIST, "format": {"enum": ["", None]}, "think": {"enum": [False, None]}}},
}


def _generate_schema(schema: Schema) -> Schema:
    properties = dict(member(schema, "properties"))
    for name, empty in (("suffix", _EMPTY_TEXT), ("template", _EMPTY_TEXT), ("context", _EMPTY_LIST)):
        title = member(properties, name).get("title")
        properties[name] = {"title": title, "description": _NOT_SUPPORTED, **empty}
    return {**schema, "properties": properties, **_RAW_RULE}


def _show_schema(schema: Schema, names: list[str]) -> Schema:
    """ShowRequest: ``model``, else ``name`` (older clients), must name a served model; null is
    "not sent" on every field. ``name`` is not read when ``model`` is sent, so it is free then."""
    given = member(schema, "properties")
    properties: Schema = {name: nullable(member(given, name)) for name in given}
    enum: list[JsonValue] = list(names)
    served: Schema = {"enum": enum}
    model = {key: value for key, value in member(properties, "model").items() if key != "anyOf"}
    properties["model"] = {**model, "anyOf": [served, {"type": "null"}]}
    named: list[JsonValue] = [
        {"required": ["model"], "properties": {"model": {"type": "string"}}},
        {"required": ["name"], "properties": {"name": served, "model": {"type": "null"}}},
    ]
    return {**schema, "properties": properties, "anyOf": named}


def components(served: Mapping[str, str]) -> dict[str, Schema]:
    """The Ollama components with the served names in each request's ``model`` enum: a served name
    or that name with ``:latest`` (``ovserve.dialects.ollama.models.served_name``)."""
    schemas = copy.deepcopy(_schemas())
    for operation in _OLLAMA_OPERATIONS:
        if operation.request is None:
            continue
        served_names = sorted(served)
        if operation.task is not None:
            # No model serves the task: every served name, each answered with wrong_model_task's 400.
            served_names = [name for name in served_names if served[name] == operation.task] or served_names
        names = sorted({*served_names, *(name + LATEST for name in served_names)})
        name = _OLLAMA + operation.request.__name__
        if operation.request is ollama_request.ShowRequest:
            schemas[name] = _show_schema(schemas[name], names)
        else:
            schemas[name] = request_schema(schemas[name], names)
    generate_request = _OLLAMA + ollama_request.GenerateRequest.__name__
    schemas[generate_request] = _generate_schema(schemas[generate_request])
    return schemas


def _operation(operation: _OllamaOperation) -> Schema:
    error = json_content(ref(_OLLAMA_ERROR))
    content = json_content(ref(_OLLAMA + operation.answer.__name__))
    if operation.stream_line is not None:
        content[_NDJSON] = {"schema": ref(_OLLAMA + operation.stream_line)}
    responses: Schema = {"200": {"description": operation.description, "content": content}}
    responses.update({status: {"description": _OLLAMA_ERRORS[status], "content": error} for status in operation.errors})
    described: Schema = {"summary": operation.summary, "operationId": operation.operation_id}
    if operation.request is not None:
        body = json_content(ref(_OLLAMA + operation.request.__name__))
        described["requestBody"] = {"required": True, "content": body}
    return {**described, "responses": responses}


def paths() -> Schema:
    described: Schema = {operation.path: {operation.method: _operation(operation)} for operation in _OLLAMA_OPERATIONS}
    error = json_content(ref(_OLLAMA_ERROR))
    for method, name in _MODEL_STORE:
        described[f"/api/{name}"] = {
            method: {
                "summary": f"Ollama's /api/{name}: not supported (ovserve serves models exported ahead of time)",
                "operationId": f"ollama{name.capitalize()}",
                "requestBody": {"required": False, "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {"400": {"description": _MODEL_STORE_ERROR, "content": error}},
            }
        }
    return described
