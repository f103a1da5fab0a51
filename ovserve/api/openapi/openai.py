"""The OpenAI-shaped operations of the OpenAPI document (and Anthropic's Messages API beside them):
chat, completions, Responses (and reading back and deleting a stored response), messages, embeddings,
rerank, tokenize, detokenize, the model list, the audio routes and the image routes.

Contract: :func:`components` are the schemas of these operations for a server serving ``served``
(model name -> task); :func:`paths` their path items. Each POST route is described once, under
its ``/v3`` path (``/v1`` and the bare paths are aliases served by the same handlers).

What pydantic's schema cannot know is added here: ``model`` must name a model this server serves
(any other name is a 404), so it is an ``enum`` of the served names; for embeddings and rerank, of
the models serving that task (another served model is a 400, ``wrong_model_task``), or of every
served name when none does (every request is then that 400; an empty enum would leave the
operation no valid call). Rules the models check in validators rather than in field types: a
message's ``content`` is required unless an assistant message carries ``tool_calls``; at most four
non-empty ``stop`` sequences; tokenize takes exactly one of ``content`` and ``messages``.
Cross-field rules JSON Schema cannot state simply (``stream_options`` only with ``stream``,
``best_of >= n``...) are left out: the document accepts a little more than the server.

A streamed answer (``text/event-stream``) is described by the schema of each event's ``data``: a
union of the events (chat and completions: chunks, or the error that ends a failed stream, then
``[DONE]``; the Responses API and Anthropic's Messages API: their events, told apart by ``type``).
Every error is OpenAI's shape (``ErrorBody``) but on the Messages routes, which answer in
Anthropic's (``ErrorResponse``). The audio uploads are multipart forms written here (they are not
pydantic models); their JSON answers and stream events are the response models.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter

from ovserve.api.openapi.images import image_edit_path
from ovserve.api.openapi.schema import ERRORS, Schema, SchemaInput, generate, json_content, ref, request_schema
from ovserve.dialects.anthropic.request import MessagesRequest, PromptRequest
from ovserve.dialects.anthropic.response import ErrorResponse, Message, StreamEvent, TokenCount
from ovserve.dialects.body import Body
from ovserve.dialects.openai.audio import response as audio_response
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.chat.response import ChatCompletion, ChatCompletionStreamEvent
from ovserve.dialects.openai.common import ErrorBody
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.completions.response import Completion, CompletionStreamEvent
from ovserve.dialects.openai.images.request import ImageGenerationRequest
from ovserve.dialects.openai.images.response import ImagesResponse, ImageStreamEvent
from ovserve.dialects.openai.models import ModelList, ModelObject
from ovserve.dialects.openai.request import MAX_STOP_SEQUENCES, SamplingRequest
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.dialects.openai.responses.response import Response, ResponseDeleted, ResponseStreamEvent
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
from ovserve.json_types import JsonValue

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
    _Operation(
        "/v3/images/generations",
        ImageGenerationRequest,
        "Create images from a prompt (OpenAI's shape, OVMS's extras; partial images with stream)",
        ImagesResponse,
        _STREAMED + " (each named by an 'event:' line: image_generation.partial_image, .completed, error)",
        _RETRIEVAL_ERRORS,
        events=("ImageGenerationStreamEvent", ImageStreamEvent),
        task="image_generation",
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

# GET and DELETE /v3/responses/{response_id}: a response kept by the store (store.py), read back
# through the model it was created as; another key's is the same 404 as an unknown id.
_STORED_RESPONSE = "/v3/responses/{response_id}"
_NO_SUCH_RESPONSE = (
    "'response_id' names no response stored for this API key (never stored, deleted, evicted, "
    "--responses_store none, or another key's)"
)
_STORE_FAULT = "The response store cannot be used now (a disk or database fault, logged on the server); Retry-After"

# The audio routes' JSON answers and stream events (their forms are written below).
_TRANSCRIPT_ANSWERS = (audio_response.Transcription, audio_response.VerboseTranscription)
_TRANSCRIPT_EVENTS = ("TranscriptStreamEvent", audio_response.TranscriptTextDelta | audio_response.TranscriptTextDone)

# ChatMessage._content_required: content (non-null) unless the assistant calls tools.
_MESSAGE_CONTENT_RULE: list[JsonValue] = [
    {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
    {
        "required": ["role", "tool_calls"],
        "properties": {"role": {"const": "assistant"}, "tool_calls": {"type": "array", "minItems": 1}},
    },
]

# TokenizeRequest._one_source: exactly one of them, non-null.
_TOKENIZE_SOURCE_RULE: list[JsonValue] = [
    {"required": ["content"], "properties": {"content": {"type": "string"}}},
    {"required": ["messages"], "properties": {"messages": {"type": "array"}}},
]

# SamplingRequest._stop_list.
_STOP_SEQUENCE: Schema = {"type": "string", "minLength": 1}
_STOP: Schema = {
    "title": "Stop",
    "anyOf": [
        _STOP_SEQUENCE,
        {"type": "array", "items": _STOP_SEQUENCE, "maxItems": MAX_STOP_SEQUENCES},
        {"type": "null"},
    ],
}


def _operation(operation: _Operation) -> Schema:
    content = json_content(ref(operation.answer.__name__))
    if operation.events is not None:
        content["text/event-stream"] = {"schema": ref(operation.events[0])}
    error = json_content(ref(operation.error.__name__))
    responses: Schema = {"200": {"description": operation.description, "content": content}}
    responses.update({status: {"description": ERRORS[status], "content": error} for status in operation.errors})
    name = operation.model.__name__
    return {
        "summary": operation.summary,
        "operationId": name,
        "requestBody": {"required": True, "content": json_content(ref(name))},
        "responses": responses,
    }


def _read_operation(read: _Read, model_names: list[str]) -> Schema:
    responses: Schema = {"200": {"description": read.description, "content": json_content(ref(read.answer.__name__))}}
    operation: Schema = {"summary": read.summary, "operationId": read.operation_id, "responses": responses}
    if "{name}" in read.path:
        # Any other name is the 404 (an empty enum would leave the operation no valid call).
        names: list[JsonValue] = list(model_names)
        name: Schema = {"type": "string", "enum": names} if model_names else {"type": "string"}
        operation["parameters"] = [{"name": "name", "in": "path", "required": True, "schema": name}]
        responses["404"] = {"description": _NO_SUCH_MODEL, "content": json_content(ref(ErrorBody.__name__))}
    return operation


@functools.cache
def _schemas() -> dict[str, Schema]:
    """The request models (validation) and the answers, stream events and error bodies
    (serialization), with every model they use, as one set of components. A stream's union of
    events is a component of its own. Built once (pydantic takes tens of milliseconds, on the
    event loop); callers copy it."""
    inputs: list[SchemaInput] = []
    unions = [operation.events for operation in _OPERATIONS if operation.events is not None] + [_TRANSCRIPT_EVENTS]
    for operation in _OPERATIONS:
        inputs.append((operation.model.__name__, "validation", operation.model.__pydantic_core_schema__))
        inputs.append((operation.answer.__name__, "serialization", operation.answer.__pydantic_core_schema__))
    for name, events in unions:
        inputs.append((name, "serialization", TypeAdapter(events).core_schema))
    answers = [read.answer for read in _READS] + [ResponseDeleted, ErrorBody, ErrorResponse, *_TRANSCRIPT_ANSWERS]
    inputs.extend((answer.__name__, "serialization", answer.__pydantic_core_schema__) for answer in answers)
    own, schemas = generate(inputs)
    schemas.update({name: own[name] for name, _ in unions})
    return schemas


def components(served: Mapping[str, str]) -> dict[str, Schema]:
    """The components, each request's ``model`` an enum of the served names that can answer it."""
    names = sorted(served)
    schemas = copy.deepcopy(_schemas())
    for operation in _OPERATIONS:
        name = operation.model.__name__
        for_task = [model for model in names if served[model] == operation.task]
        # No model serves the task: every served name, each answered with wrong_model_task's 400.
        enum = for_task or names if operation.task is not None else names
        sampling = issubclass(operation.model, SamplingRequest)
        schemas[name] = request_schema(schemas[name], enum, stop=_STOP if sampling else None)
    schemas["ChatMessage"] = {**schemas["ChatMessage"], "anyOf": _MESSAGE_CONTENT_RULE}
    schemas["TokenizeRequest"] = {**schemas["TokenizeRequest"], "oneOf": _TOKENIZE_SOURCE_RULE}
    return schemas


def paths(served: Mapping[str, str]) -> Schema:
    names = sorted(served)
    return {
        **{operation.path: {"post": _operation(operation)} for operation in _OPERATIONS},
        **{read.path: {"get": _read_operation(read, names)} for read in _READS},
        _STORED_RESPONSE: _stored_response_item(),
        **_audio_paths(served),
        **image_edit_path(served),
    }


def _stored_response_item() -> Schema:
    """GET (the response as created, ``Response``) and DELETE (``ResponseDeleted``) of a stored
    response; /v1 and the bare path are aliases, as for the POST."""
    error = json_content(ref(ErrorBody.__name__))
    errors: Schema = {
        "404": {"description": _NO_SUCH_RESPONSE, "content": error},
        "503": {"description": _STORE_FAULT, "content": error},
    }
    parameter: Schema = {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}
    answers = (
        ("get", "retrieveResponse", "Retrieve a stored response", Response, "The response as it was created"),
        ("delete", "deleteResponse", "Delete a stored response", ResponseDeleted, "The response is deleted"),
    )
    return {
        method: {
            "summary": summary,
            "operationId": operation_id,
            "parameters": [parameter],
            "responses": {"200": {"description": description, "content": json_content(ref(answer.__name__))}, **errors},
        }
        for method, operation_id, summary, answer, description in answers
    }


_AUDIO_ERRORS = ("400", "404", "413", "415", "503", "504")


def _audio_form(names: list[str], *, translation: bool) -> Schema:
    """The multipart form of /audio/transcriptions and /audio/translations (written here: it is not
    a pydantic model; ``ovserve.dialects.openai.audio.request.parse_form`` reads it)."""
    models: list[JsonValue] = list(names)
    properties: Schema = {
        "file": {"type": "string", "contentMediaType": "application/octet-stream",
                 "description": "wav, flac, mp3, ogg, webm or mp4/m4a audio, at most --max_audio_seconds"},
        "model": {"type": "string", "enum": models},
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


def _audio_paths(served: Mapping[str, str]) -> Schema:
    from ovserve.dialects.openai.audio.speech import SpeechRequest

    names = sorted(served)
    error = json_content(ref(ErrorBody.__name__))
    errors: Schema = {status: {"description": ERRORS[status], "content": error} for status in _AUDIO_ERRORS}
    errors["415"] = {"description": "The Content-Type is not multipart/form-data", "content": error}
    transcript: Schema = {
        # response_format json or verbose_json
        "application/json": {"schema": {"anyOf": [ref(answer.__name__) for answer in _TRANSCRIPT_ANSWERS]}},
        "text/plain": {"schema": {"type": "string"}},
        "text/vtt": {"schema": {"type": "string"}},
    }
    described: Schema = {}
    for path, summary, translation in (
        ("/v3/audio/transcriptions", "Transcribe audio (OpenAI's shape; SSE transcript.text.* with stream)", False),
        ("/v3/audio/translations", "Translate audio to English text (OpenAI's shape)", True),
    ):
        models = [name for name in names if served[name] == "speech_to_text"] or names
        content = dict(transcript)
        if not translation:
            content["text/event-stream"] = {"schema": ref(_TRANSCRIPT_EVENTS[0])}
        described[path] = {
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
    speech_schema: Schema = SpeechRequest.model_json_schema()
    speakers: list[JsonValue] = [name for name in names if served[name] == "text_to_speech"] or list(names)
    properties = speech_schema["properties"]
    assert isinstance(properties, dict)
    properties["model"] = {"type": "string", "enum": speakers}
    audio: Schema = {kind: {"schema": {"type": "string", "contentMediaType": kind}} for kind in
                     ("audio/mpeg", "audio/ogg", "audio/aac", "audio/flac", "audio/wav", "audio/pcm")}  # fmt: skip
    described["/v3/audio/speech"] = {
        "post": {
            "summary": "Speak text (OpenAI's shape) with a text-to-speech model and one of its voices",
            "operationId": "createSpeech",
            "requestBody": {"required": True, "content": json_content(speech_schema)},
            "responses": {"200": {"description": "The audio file in response_format", "content": audio}, **errors},
        }
    }
    return described
