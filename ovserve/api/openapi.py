"""The OpenAPI 3.1 document of the POST endpoints and the model list, served at ``GET /openapi.json``.

Every POST route the server registers is described once, under its ``/v3`` path: the ``/v1`` and
unprefixed paths are aliases served by the same handlers and are not repeated
(``tests/unit/test_openapi.py`` walks a built app's router to keep it so). The operations are the
generation endpoints (chat, completions, responses) and the retrieval ones (embeddings, rerank,
tokenize, detokenize), and two GETs: ``/v3/models`` and ``/v3/models/{name}`` (OpenAI's model
objects with ovserve's ``ovserve`` extension: the parsers each model's output goes through).
Ollama's native API is here under its own paths (``/api/*``, :mod:`ovserve.api.ollama`; see below).

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
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode

from ovserve import __version__
from ovserve.api import keys
from ovserve.dialects.anthropic.request import MessagesRequest, PromptRequest
from ovserve.dialects.anthropic.response import ErrorResponse, Message, StreamEvent, TokenCount
from ovserve.dialects.body import Body
from ovserve.dialects.ollama import request as ollama_request
from ovserve.dialects.ollama import response as ollama_response
from ovserve.dialects.ollama.models import LATEST
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


# -- Ollama's native API (/api/*) -------------------------------------------------------------

# Its components are generated apart and named "Ollama" + the class name: its ChatRequest, Message,
# ErrorResponse... would otherwise meet the OpenAI and Anthropic models of those names.
_OLLAMA = "Ollama"
_OLLAMA_ERROR = _OLLAMA + ollama_response.ErrorResponse.__name__
_NDJSON = "application/x-ndjson"  # what ovserve.api.ollama.NDJSONWriter sends

# What each documented status means on these routes; the body is always OllamaErrorResponse.
_OLLAMA_ERRORS = {
    **_ERRORS,
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
_NUM_PREDICT: dict[str, Any] = {
    "title": "Num Predict",
    "anyOf": [{"type": "integer", "minimum": -2, "not": {"const": 0}}, {"type": "null"}],
}


def _ollama_stream_line(answer: str) -> dict[str, Any]:
    """A line of an Ollama stream (``ovserve.dialects.ollama.adapter.OllamaEndpoint.stream`` and
    ``failure_event``): a piece of output without statistics, the last line with all of them (its
    done_reason "stop" or "length"), or the error line a failed stream ends with."""
    statistics = list(ollama_response.Stats.model_fields)
    piece = {"properties": {"done": {"const": False}, **dict.fromkeys(statistics, False)}}
    last = {
        "properties": {"done": {"const": True}, "done_reason": {"enum": ["stop", "length"]}},
        "required": statistics,
    }
    answer_ref = _ref(_OLLAMA + answer)
    return {"anyOf": [{"allOf": [answer_ref, piece]}, {"allOf": [answer_ref, last]}, _ref(_OLLAMA_ERROR)]}


@functools.cache
def _ollama_schemas() -> dict[str, Any]:
    """The Ollama request models (validation) and answers and error body (serialization), each
    named ``Ollama`` + its class name, and the line of each stream. Built once; callers copy it."""
    inputs: list[tuple[str, JsonSchemaMode, Any]] = []
    for operation in _OLLAMA_OPERATIONS:
        if operation.request is not None:
            inputs.append((operation.request.__name__, "validation", operation.request.__pydantic_core_schema__))
        inputs.append((operation.answer.__name__, "serialization", operation.answer.__pydantic_core_schema__))
    error = ollama_response.ErrorResponse
    inputs.append((error.__name__, "serialization", error.__pydantic_core_schema__))
    generator = GenerateJsonSchema(ref_template=_REF.format(model=_OLLAMA + "{model}"))
    _, definitions = generator.generate_definitions(inputs)
    schemas: dict[str, Any] = {_OLLAMA + str(name): schema for name, schema in definitions.items()}
    for operation in _OLLAMA_OPERATIONS:
        if operation.stream_line is not None:
            schemas[_OLLAMA + operation.stream_line] = _ollama_stream_line(operation.answer.__name__)
    options = schemas[_OLLAMA + ollama_request.Options.__name__]
    options["properties"]["num_predict"] = _NUM_PREDICT
    return schemas


# GenerateRequest._supported: Go templates, fill-in-the-middle and an earlier answer's context are
# refused unless empty; a raw prompt skips the chat template, so images, format and think (which
# need it) are refused with it unless empty.
_NOT_SUPPORTED = "Not supported here: only an empty value is accepted (docs/ollama.md)"
_EMPTY_TEXT: dict[str, Any] = {"anyOf": [{"type": "string", "maxLength": 0}, {"type": "null"}]}
_EMPTY_LIST: dict[str, Any] = {"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]}
_RAW_RULE: dict[str, Any] = {
    "if": {"required": ["raw"], "properties": {"raw": {"const": True}}},
    "then": {"properties": {"images": _EMPTY_LIST, "format": {"enum": ["", None]}, "think": {"enum": [False, None]}}},
}


def _ollama_generate_schema(schema: dict[str, Any]) -> dict[str, Any]:
    properties = dict(schema["properties"])
    for name, empty in (("suffix", _EMPTY_TEXT), ("template", _EMPTY_TEXT), ("context", _EMPTY_LIST)):
        title = properties[name].get("title")
        properties[name] = {"title": title, "description": _NOT_SUPPORTED, **empty}
    return {**schema, "properties": properties, **_RAW_RULE}


def _ollama_show_schema(schema: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """ShowRequest: ``model``, else ``name`` (older clients), must name a served model; null is
    "not sent" on every field. ``name`` is not read when ``model`` is sent, so it is free then."""
    properties = {name: _nullable(prop) for name, prop in schema["properties"].items()}
    served: dict[str, Any] = {"enum": names}
    model = {key: value for key, value in properties["model"].items() if key != "anyOf"}
    properties["model"] = {**model, "anyOf": [served, {"type": "null"}]}
    named = [
        {"required": ["model"], "properties": {"model": {"type": "string"}}},
        {"required": ["name"], "properties": {"name": served, "model": {"type": "null"}}},
    ]
    return {**schema, "properties": properties, "anyOf": named}


def _ollama_components(served: Mapping[str, str]) -> dict[str, Any]:
    """The Ollama components with the served names in each request's ``model`` enum: a served name
    or that name with ``:latest`` (``ovserve.dialects.ollama.models.served_name``)."""
    schemas = copy.deepcopy(_ollama_schemas())
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
            schemas[name] = _ollama_show_schema(schemas[name], names)
        else:
            schemas[name] = _request_schema(schemas[name], names, sampling=False)
    generate = _OLLAMA + ollama_request.GenerateRequest.__name__
    schemas[generate] = _ollama_generate_schema(schemas[generate])
    return schemas


def _ollama_operation(operation: _OllamaOperation) -> dict[str, Any]:
    error = {"application/json": {"schema": _ref(_OLLAMA_ERROR)}}
    content = {"application/json": {"schema": _ref(_OLLAMA + operation.answer.__name__)}}
    if operation.stream_line is not None:
        content[_NDJSON] = {"schema": _ref(_OLLAMA + operation.stream_line)}
    responses: dict[str, Any] = {"200": {"description": operation.description, "content": content}}
    responses.update({status: {"description": _OLLAMA_ERRORS[status], "content": error} for status in operation.errors})
    described: dict[str, Any] = {"summary": operation.summary, "operationId": operation.operation_id}
    if operation.request is not None:
        body = {"application/json": {"schema": _ref(_OLLAMA + operation.request.__name__)}}
        described["requestBody"] = {"required": True, "content": body}
    return {**described, "responses": responses}


def _ollama_paths() -> dict[str, Any]:
    paths: dict[str, Any] = {
        operation.path: {operation.method: _ollama_operation(operation)} for operation in _OLLAMA_OPERATIONS
    }
    error = {"application/json": {"schema": _ref(_OLLAMA_ERROR)}}
    for method, name in _MODEL_STORE:
        paths[f"/api/{name}"] = {
            method: {
                "summary": f"Ollama's /api/{name}: not supported (ovserve serves models exported ahead of time)",
                "operationId": f"ollama{name.capitalize()}",
                "requestBody": {"required": False, "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {"400": {"description": _MODEL_STORE_ERROR, "content": error}},
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
    schemas.update(_ollama_components(served))
    return {
        "openapi": "3.1.0",
        "info": {"title": "ovserve", "version": __version__},
        "paths": {
            **{operation.path: {"post": _operation(operation)} for operation in _OPERATIONS},
            **{read.path: {"get": _read_operation(read, names)} for read in _READS},
            **_audio_paths(served),
            **_ollama_paths(),
        },
        "components": {"schemas": schemas},
    }


async def openapi_json(request: web.Request) -> web.Response:
    document = openapi_document({model.name: model.task for model in request.app[keys.MODELS]})
    return web.json_response(document)
