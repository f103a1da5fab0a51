"""The OpenAPI 3.1 document of the POST endpoints and the model list, served at ``GET /openapi.json``.

Every POST route the server registers is described once, under its ``/v3`` path (except Ollama's
``/api/*``, described in docs/ollama.md and not yet here): the ``/v1`` and
unprefixed paths are aliases served by the same handlers and are not repeated
(``tests/unit/test_openapi.py`` walks a built app's router to keep it so). The operations are the
generation endpoints (chat, completions, responses) and the retrieval ones (embeddings, rerank,
tokenize, detokenize), and two GETs: ``/v3/models`` and ``/v3/models/{name}`` (OpenAI's model
objects with ovserve's ``ovserve`` extension: the parsers each model's output goes through).

The request bodies are the JSON schemas of the very pydantic models the routes validate with
(:mod:`ovserve.dialects.openai.request`), so the document cannot drift from what the server accepts; it is what
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

The success bodies are the serialization schemas of the response models the endpoints answer
with (``ovserve.dialects``: :class:`~ovserve.dialects.body.Body` and its subclasses), so they cannot
drift either: what a schema requires is what every body carries, and no body has a key its schema
does not list (but for the request settings a response echoes as the client sent them). A streamed
answer (``text/event-stream``) is described by the schema of each event's ``data``: a union of the
events (chat and completions: chunks, or the error that ends a failed stream, then ``[DONE]``; the
Responses API and Anthropic's Messages API: their events, told apart by ``type``).
``tests/fast/test_openapi_bodies.py`` and ``tests/e2e/test_retrieval.py`` check real answers against
this document. Every error is OpenAI's shape (``ErrorBody``) but on the Messages routes, which answer
in Anthropic's (``ErrorResponse``); each operation lists the statuses it can answer.

The request bodies stay open (``additionalProperties: true``): other servers' fields are mapped,
ignored or refused by :mod:`ovserve.api.field_policy`, and unknown ones are accepted and logged.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode

from ovserve import __version__
from ovserve.api import keys
from ovserve.dialects.anthropic.request import MessagesRequest, PromptRequest
from ovserve.dialects.anthropic.response import ErrorResponse, Message, StreamEvent, TokenCount
from ovserve.dialects.body import Body
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.chat.response import ChatCompletion, ChatCompletionStreamEvent
from ovserve.dialects.openai.common import ErrorBody
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.completions.response import Completion, CompletionStreamEvent
from ovserve.dialects.openai.models import ModelList, ModelObject
from ovserve.dialects.openai.request import MAX_STOP_SEQUENCES, SamplingRequest
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.dialects.openai.responses.response import Response, ResponseStreamEvent
from ovserve.dialects.openai.retrieval.request import (
    DetokenizeRequest,
    EmbeddingRequest,
    RerankRequest,
    TokenizeRequest,
)
from ovserve.dialects.openai.retrieval.response import (
    DetokenizeResponse,
    EmbeddingResponse,
    RerankResponse,
    TokenizeResponse,
)

_REF = "#/components/schemas/{model}"

# What each documented error status means here; the body is always ErrorBody.
_ERRORS = {
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
_GENERATION_ERRORS = ("400", "404", "413", "415", "422", "429", "503")
# Embeddings and rerank: admitted by tokens (429/503), bounded by --request_timeout (504); no Azure dialect.
_RETRIEVAL_ERRORS = ("400", "404", "413", "415", "429", "503", "504")
# Tokenize/detokenize need only the tokenizer (in this process): they answer while the engine loads.
_TOKENIZER_ERRORS = ("400", "404", "413", "415")
# Anthropic's Messages API: its own error shape, and 529 where the others answer 503.
_MESSAGES_ERRORS = ("400", "404", "413", "415", "429", "529")
_COUNT_ERRORS = ("400", "404", "413", "415", "529")

_STREAMED = "The answer, or server-sent events when 'stream' is true"


@dataclass(frozen=True)
class _Operation:
    path: str
    model: type[BaseModel]  # the request body
    summary: str
    answer: type[Body]  # the JSON answer
    description: str  # what the answer is
    errors: tuple[str, ...]
    # The schema name and type of each server-sent event's data when "stream" is true; None: no stream.
    events: tuple[str, Any] | None = None
    # The task a model must serve (its "model" enum lists those models); None: any served model.
    task: str | None = None
    error: type[Body] = ErrorBody  # the error body of this dialect


# /v1 and the bare paths are aliases of /v3 and are not repeated.
_OPERATIONS: tuple[_Operation, ...] = (
    _Operation(
        "/v3/chat/completions",
        ChatCompletionRequest,
        "Create a chat completion",
        ChatCompletion,
        _STREAMED,
        _GENERATION_ERRORS,
        events=("ChatCompletionStreamEvent", ChatCompletionStreamEvent),
    ),
    _Operation(
        "/v3/completions",
        CompletionRequest,
        "Create a text completion (legacy, no chat template)",
        Completion,
        _STREAMED,
        _GENERATION_ERRORS,
        events=("CompletionStreamEvent", CompletionStreamEvent),
    ),
    _Operation(
        "/v3/responses",
        ResponsesRequest,
        "Create a model response (OpenAI's Responses API)",
        Response,
        _STREAMED + " (each named by an 'event:' line, no [DONE])",
        _GENERATION_ERRORS,
        events=("ResponseStreamEvent", ResponseStreamEvent),
    ),
    _Operation(
        "/v3/messages",
        MessagesRequest,
        "Create a message (Anthropic's Messages API; also /v1/messages)",
        Message,
        _STREAMED + " (each named by an 'event:' line: Anthropic's message events, ping, error)",
        _MESSAGES_ERRORS,
        events=("MessageStreamEvent", StreamEvent),
        task="text_generation",
        error=ErrorResponse,
    ),
    _Operation(
        "/v3/messages/count_tokens",
        PromptRequest,
        "Count the tokens of a message's prompt (Anthropic's Messages API)",
        TokenCount,
        "The prompt's tokens with the model's template and tools",
        _COUNT_ERRORS,
        task="text_generation",
        error=ErrorResponse,
    ),
    _Operation(
        "/v3/embeddings",
        EmbeddingRequest,
        "Create embeddings (OpenAI's shape)",
        EmbeddingResponse,
        "One embedding per input, in input order",
        _RETRIEVAL_ERRORS,
        task="embeddings",
    ),
    _Operation(
        "/v3/rerank",
        RerankRequest,
        "Score documents against a query (OVMS's and Cohere's shape)",
        RerankResponse,
        "The documents by relevance, highest first",
        _RETRIEVAL_ERRORS,
        task="rerank",
    ),
    _Operation(
        "/v3/tokenize",
        TokenizeRequest,
        "Tokenize text, or chat messages rendered with the chat template (llama.cpp's shape)",
        TokenizeResponse,
        "The token ids, with their pieces when 'with_pieces' is true",
        _TOKENIZER_ERRORS,
    ),
    _Operation(
        "/v3/detokenize",
        DetokenizeRequest,
        "Decode token ids to text (llama.cpp's shape)",
        DetokenizeResponse,
        "The decoded text",
        _TOKENIZER_ERRORS,
    ),
)


@dataclass(frozen=True)
class _Read:
    """A documented GET: no body; ``{name}`` in the path is a served model's name."""

    path: str
    operation_id: str
    summary: str
    answer: type[Body]
    description: str  # what the answer is


_READS: tuple[_Read, ...] = (
    _Read(
        "/v3/models",
        "listModels",
        "List the served models",
        ModelList,
        "The served models, each with the parsers its output goes through ('ovserve', an extension)",
    ),
    _Read(
        "/v3/models/{name}",
        "retrieveModel",
        "Retrieve a served model",
        ModelObject,
        "The model, with the parsers its output goes through ('ovserve', an extension)",
    ),
)
_NO_SUCH_MODEL = "'name' names no model served here"

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


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


def _operation(operation: _Operation) -> dict[str, Any]:
    error = {"application/json": {"schema": _ref(operation.error.__name__)}}
    content = {"application/json": {"schema": _ref(operation.answer.__name__)}}
    if operation.events is not None:
        content["text/event-stream"] = {"schema": _ref(operation.events[0])}
    responses: dict[str, Any] = {"200": {"description": operation.description, "content": content}}
    responses.update({status: {"description": _ERRORS[status], "content": error} for status in operation.errors})
    name = operation.model.__name__
    return {
        "summary": operation.summary,
        "operationId": name,
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(name)}}},
        "responses": responses,
    }


def _read_operation(read: _Read, model_names: list[str]) -> dict[str, Any]:
    error = {"application/json": {"schema": _ref(ErrorBody.__name__)}}
    content = {"application/json": {"schema": _ref(read.answer.__name__)}}
    operation: dict[str, Any] = {
        "summary": read.summary,
        "operationId": read.operation_id,
        "responses": {"200": {"description": read.description, "content": content}},
    }
    if "{name}" in read.path:
        # Any other name is the 404 (an empty enum would leave the operation no valid call).
        name: dict[str, Any] = {"type": "string", "enum": model_names} if model_names else {"type": "string"}
        operation["parameters"] = [{"name": "name", "in": "path", "required": True, "schema": name}]
        operation["responses"]["404"] = {"description": _NO_SUCH_MODEL, "content": error}
    return operation


@functools.cache
def _schemas() -> dict[str, Any]:
    """The request models (validation) and the answers, stream events and error body (serialization),
    with every model they use, as one set of components. A stream's union of events is a component
    of its own. Built once (pydantic takes tens of milliseconds, on the event loop); callers copy it."""
    inputs: list[tuple[str, JsonSchemaMode, Any]] = []
    for operation in _OPERATIONS:
        inputs.append((operation.model.__name__, "validation", operation.model.__pydantic_core_schema__))
        inputs.append((operation.answer.__name__, "serialization", operation.answer.__pydantic_core_schema__))
        if operation.events is not None:
            name, events = operation.events
            inputs.append((name, "serialization", TypeAdapter(events).core_schema))
    for read in _READS:
        inputs.append((read.answer.__name__, "serialization", read.answer.__pydantic_core_schema__))
    for error in (ErrorBody, ErrorResponse):
        inputs.append((error.__name__, "serialization", error.__pydantic_core_schema__))
    generated, definitions = GenerateJsonSchema(ref_template=_REF).generate_definitions(inputs)
    schemas: dict[str, Any] = {str(name): schema for name, schema in definitions.items()}
    for operation in _OPERATIONS:
        if operation.events is not None:
            name = operation.events[0]
            schemas[name] = generated[(name, "serialization")]
    return schemas


_AUDIO_ERRORS = ("400", "404", "413", "415", "503", "504")


def _audio_form(names: list[str], *, translation: bool) -> dict[str, Any]:
    """The multipart form of /audio/transcriptions and /audio/translations (written here: it is not
    a pydantic model; ``ovserve.dialects.openai.audio.request.parse_form`` reads it)."""
    properties: dict[str, Any] = {
        "file": {"type": "string", "contentMediaType": "application/octet-stream",
                 "description": "wav, flac, mp3, ogg, webm or mp4/m4a audio, at most --max_audio_seconds"},
        "model": {"type": "string", "enum": names},
        "prompt": {"type": "string", "maxLength": 4096},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "response_format": {"enum": ["json", "text", "srt", "verbose_json", "vtt"]},
    }  # fmt: skip
    if not translation:
        properties["language"] = {"type": "string", "pattern": "^[a-z]{2,3}$"}
        properties["timestamp_granularities[]"] = {
            "type": "array",
            "items": {"enum": ["segment", "word"]},
            "description": "with verbose_json; word: a model served with --enable_word_timestamps",
        }
        properties["stream"] = {"type": "boolean"}
    return {"type": "object", "required": ["file", "model"], "properties": properties}


def _audio_paths(served: Mapping[str, str]) -> dict[str, Any]:
    from ovserve.dialects.openai.audio.speech import SpeechRequest

    names = sorted(served)
    error = {"application/json": {"schema": _ref(ErrorBody.__name__)}}
    errors = {status: {"description": _ERRORS[status], "content": error} for status in _AUDIO_ERRORS}
    errors["415"] = {"description": "The Content-Type is not multipart/form-data", "content": error}
    transcript = {
        "application/json": {"schema": {"type": "object", "required": ["text"]}},
        "text/plain": {"schema": {"type": "string"}},
        "text/vtt": {"schema": {"type": "string"}},
    }
    paths: dict[str, Any] = {}
    for path, summary, translation in (
        ("/v3/audio/transcriptions", "Transcribe audio (OpenAI's shape; SSE transcript.text.* with stream)", False),
        ("/v3/audio/translations", "Translate audio to English text (OpenAI's shape)", True),
    ):
        models = [name for name in names if served[name] == "speech_to_text"] or names
        content = dict(transcript)
        if not translation:
            content["text/event-stream"] = {"schema": {"type": "object", "required": ["type"]}}
        paths[path] = {
            "post": {
                "summary": summary,
                "operationId": "createTranslation" if translation else "createTranscription",
                "requestBody": {
                    "required": True,
                    "content": {"multipart/form-data": {"schema": _audio_form(models, translation=translation)}},
                },
                "responses": {"200": {"description": "The text in response_format", "content": content}, **errors},
            }
        }
    speech_schema = SpeechRequest.model_json_schema()
    speakers = [name for name in names if served[name] == "text_to_speech"] or names
    speech_schema["properties"]["model"] = {"type": "string", "enum": speakers}
    audio = {kind: {"schema": {"type": "string", "contentMediaType": kind}} for kind in
             ("audio/mpeg", "audio/ogg", "audio/aac", "audio/flac", "audio/wav", "audio/pcm")}  # fmt: skip
    paths["/v3/audio/speech"] = {
        "post": {
            "summary": "Speak text (OpenAI's shape) with a text-to-speech model and one of its voices",
            "operationId": "createSpeech",
            "requestBody": {"required": True, "content": {"application/json": {"schema": speech_schema}}},
            "responses": {"200": {"description": "The audio file in response_format", "content": audio}, **errors},
        }
    }
    return paths


def openapi_document(served: Mapping[str, str]) -> dict[str, Any]:
    """The OpenAPI 3.1 document for a server serving ``served`` (model name -> task)."""
    names = sorted(served)
    schemas = copy.deepcopy(_schemas())
    for operation in _OPERATIONS:
        name = operation.model.__name__
        for_task = [model for model in names if served[model] == operation.task]
        # No model serves the task: every served name, each answered with wrong_model_task's 400
        # (an empty enum would make the operation unusable to a client generator or fuzzer).
        enum = for_task or names if operation.task is not None else names
        schemas[name] = _request_schema(schemas[name], enum, issubclass(operation.model, SamplingRequest))
    schemas["ChatMessage"] = {**schemas["ChatMessage"], "anyOf": _MESSAGE_CONTENT_RULE}
    schemas["TokenizeRequest"] = {**schemas["TokenizeRequest"], "oneOf": _TOKENIZE_SOURCE_RULE}
    return {
        "openapi": "3.1.0",
        "info": {"title": "ovserve", "version": __version__},
        "paths": {
            **{operation.path: {"post": _operation(operation)} for operation in _OPERATIONS},
            **{read.path: {"get": _read_operation(read, names)} for read in _READS},
            **_audio_paths(served),
        },
        "components": {"schemas": schemas},
    }


async def openapi_json(request: web.Request) -> web.Response:
    document = openapi_document({model.name: model.task for model in request.app[keys.MODELS]})
    return web.json_response(document)
