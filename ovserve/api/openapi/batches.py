"""The OpenAPI description of OpenAI's Files and Batch APIs (``/v3/files...``, ``/v3/batches...``;
``/v1`` is the same handlers): what ``ovserve.api.files`` and ``ovserve.api.batches`` accept and answer.

Contract: :func:`components` are the schemas of their answers (``FileObject``, ``FileList``,
``FileDeleted``, ``Batch``, ``BatchList``: the very response models, in serialization mode) and of
the one JSON request (``CreateBatchRequest``, closed: the server refuses unknown fields there);
:func:`paths` their path items. The upload is a multipart form, written here (it is not a pydantic
model; the handler reads its parts as they stream in). None of these operations touches a model:
their 404 is an unknown (or another key's) file or batch, their 503 a fault of the files store.
"""

from __future__ import annotations

import functools

from ovserve.api.openapi.schema import Schema, SchemaInput, generate, json_content, ref
from ovserve.dialects.openai.batches.objects import Batch, BatchList, CreateBatchRequest
from ovserve.dialects.openai.common import ErrorBody
from ovserve.dialects.openai.files.objects import (
    EXPIRES_MAX_S,
    EXPIRES_MIN_S,
    UPLOAD_PURPOSES,
    FileDeleted,
    FileList,
    FileObject,
)
from ovserve.json_types import JsonValue

_STORE_FAULT = "The files store cannot be used now (a disk or database fault, logged on the server); Retry-After"
_UNKNOWN_FILE = "No such file for this API key (never uploaded, deleted, or another key's)"
_UNKNOWN_BATCH = "No such batch for this API key (never created, or another key's)"
_BAD_QUERY = "A query parameter out of its range"
_ANSWERS = (FileObject, FileList, FileDeleted, Batch, BatchList)


@functools.cache
def _schemas() -> dict[str, Schema]:
    inputs: list[SchemaInput] = [
        (answer.__name__, "serialization", answer.__pydantic_core_schema__) for answer in _ANSWERS
    ]
    inputs.append((CreateBatchRequest.__name__, "validation", CreateBatchRequest.__pydantic_core_schema__))
    _, schemas = generate(inputs)
    return schemas


def components() -> dict[str, Schema]:
    schemas = dict(_schemas())
    # Closed (extra="forbid"): an unknown field is a 400, unlike the generation requests.
    schemas[CreateBatchRequest.__name__] = {**schemas[CreateBatchRequest.__name__], "additionalProperties": False}
    return schemas


def _errors(**described: str) -> Schema:
    """Each status (``e400=...``) with its description, in OpenAI's error shape."""
    error = json_content(ref(ErrorBody.__name__))
    return {status.removeprefix("e"): {"description": text, "content": error} for status, text in described.items()}


def _answer(model: str, description: str) -> Schema:
    return {"200": {"description": description, "content": json_content(ref(model))}}


def _path_id(name: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _upload_form() -> Schema:
    purposes: list[JsonValue] = list(UPLOAD_PURPOSES)
    properties: Schema = {
        "file": {
            "type": "string",
            "minLength": 1,  # an empty file is a 400
            "contentMediaType": "application/octet-stream",
            "description": "the file: for 'batch', JSONL of requests; at most --max_file_mb and --max_file_lines",
        },
        "purpose": {"enum": purposes},
        # OpenAI's expires_after, both fields or neither: the file is a 404 once expired.
        "expires_after[anchor]": {"enum": ["created_at"]},
        "expires_after[seconds]": {"type": "integer", "minimum": EXPIRES_MIN_S, "maximum": EXPIRES_MAX_S},
    }
    both: Schema = {
        "expires_after[anchor]": ["expires_after[seconds]"],
        "expires_after[seconds]": ["expires_after[anchor]"],
    }
    return {"type": "object", "required": ["file", "purpose"], "properties": properties, "dependentRequired": both}


def paths() -> Schema:
    limit_files: Schema = {"type": "integer", "minimum": 1, "maximum": 10_000}
    purposes: list[JsonValue] = [*UPLOAD_PURPOSES, "batch_output"]
    file_id: list[JsonValue] = [_path_id("file_id")]
    batch_id: list[JsonValue] = [_path_id("batch_id")]
    unknown_file = _errors(e404=_UNKNOWN_FILE, e503=_STORE_FAULT)
    unknown_batch = _errors(e404=_UNKNOWN_BATCH, e503=_STORE_FAULT)
    return {
        "/v3/files": {
            "post": {
                "summary": "Upload a file (OpenAI's Files API), streamed to disk and checked as it comes",
                "operationId": "createFile",
                "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": _upload_form()}}},
                "responses": {
                    **_answer("FileObject", "The file, stored for this API key"),
                    **_errors(
                        e400="Not a readable form, no 'file', an empty file, more lines than --max_file_lines, "
                        "another 'purpose', or an expires_after out of its range",
                        e408="The upload stalled past --body_timeout",
                        e413="The file is larger than --max_file_mb",
                        e415="The Content-Type is not multipart/form-data",
                        e503=_STORE_FAULT,
                    ),
                },
            },
            "get": {
                "summary": "List this API key's files, newest first",
                "operationId": "listFiles",
                "parameters": [
                    _query("after", {"type": "string"}),
                    _query("limit", limit_files),
                    _query("order", {"enum": ["asc", "desc"]}),
                    _query("purpose", {"enum": purposes}),
                ],
                "responses": {
                    **_answer("FileList", "A page of files"),
                    **_errors(e400=_BAD_QUERY, e503=_STORE_FAULT),
                },
            },
        },
        "/v3/files/{file_id}": {
            "get": {
                "summary": "Retrieve a file's object",
                "operationId": "retrieveFile",
                "parameters": file_id,
                "responses": {**_answer("FileObject", "The file"), **unknown_file},
            },
            "delete": {
                "summary": "Delete a file",
                "operationId": "deleteFile",
                "parameters": file_id,
                "responses": {**_answer("FileDeleted", "The file is deleted"), **unknown_file},
            },
        },
        "/v3/files/{file_id}/content": {
            "get": {
                "summary": "Download a file's bytes",
                "operationId": "downloadFile",
                "parameters": file_id,
                "responses": {
                    "200": {
                        "description": "The file as uploaded (a batch's output: JSONL)",
                        "content": {"application/octet-stream": {"schema": {"type": "string"}}},
                    },
                    **unknown_file,
                },
            },
        },
        "/v3/batches": {
            "post": {
                "summary": "Create a batch on an uploaded JSONL file (OpenAI's Batch API)",
                "operationId": "createBatch",
                "requestBody": {"required": True, "content": json_content(ref(CreateBatchRequest.__name__))},
                "responses": {
                    **_answer("Batch", "The batch, validating: poll it until its status is final"),
                    **_errors(
                        e400="The body is not valid JSON or not a valid request, or the file is not for 'batch'",
                        e404="'input_file_id' names no file of this API key",
                        e408="The body was not received within --body_timeout",
                        e413="The body is larger than --max_request_mb",
                        e415="The Content-Type is not JSON",
                        e503=_STORE_FAULT,
                    ),
                },
            },
            "get": {
                "summary": "List this API key's batches, newest first",
                "operationId": "listBatches",
                "parameters": [
                    _query("after", {"type": "string"}),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
                ],
                "responses": {
                    **_answer("BatchList", "A page of batches, with live counts"),
                    **_errors(e400=_BAD_QUERY, e503=_STORE_FAULT),
                },
            },
        },
        "/v3/batches/{batch_id}": {
            "get": {
                "summary": "Retrieve a batch",
                "operationId": "retrieveBatch",
                "parameters": batch_id,
                "responses": {**_answer("Batch", "The batch, with live counts"), **unknown_batch},
            },
        },
        "/v3/batches/{batch_id}/cancel": {
            "post": {
                "summary": "Cancel a batch: cancelling at once, cancelled once its requests in flight stopped",
                "operationId": "cancelBatch",
                "parameters": batch_id,
                "responses": {
                    **_answer("Batch", "The batch, cancelling (or cancelled)"),
                    **unknown_batch,
                    **_errors(e409="The batch is finished already"),
                },
            },
        },
    }
