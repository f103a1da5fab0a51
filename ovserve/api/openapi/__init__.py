"""The OpenAPI 3.1 document of the server's operations, served at ``GET /openapi.json``.

Contract: :func:`openapi_document` is the document for a server serving a set of models (name ->
task); every POST route the server registers is in it once, and every GET and DELETE of the API
(the model list, a stored response of the Responses API), each under ``/v3``
(``tests/unit/test_openapi.py`` walks a built app's router to keep it so): the OpenAI-shaped
operations and Anthropic's Messages API (:mod:`ovserve.api.openapi.openai`), OpenAI's Files and
Batch APIs (:mod:`ovserve.api.openapi.batches`), and Ollama's native API
(:mod:`ovserve.api.openapi.ollama`).

The request bodies are the JSON schemas of the very pydantic models the routes validate with, so
the document cannot drift from what the server accepts; it is what schemathesis fuzzes against
(``scripts/fuzz_api.py``). ``null`` on any optional top-level field means "not sent" (the request
models drop it before validation), so every optional property also allows ``null``
(:func:`~ovserve.api.openapi.schema.request_schema`). The request bodies stay open
(``additionalProperties: true``): other servers' fields are mapped, ignored or refused by
:mod:`ovserve.api.field_policy`, and unknown ones are accepted and logged.

The success bodies are the serialization schemas of the response models the endpoints answer
with (``ovserve.dialects``: :class:`~ovserve.dialects.body.Body` and its subclasses), so they cannot
drift either: what a schema requires is what every body carries, and no body has a key its schema
does not list (but for the request settings a response echoes as the client sent them).
``tests/fast/test_openapi_bodies.py`` and ``tests/e2e/test_retrieval.py`` check real answers
against this document. Each operation lists the error statuses it can answer, in its dialect's
error shape.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from ovserve import __version__
from ovserve.api import keys
from ovserve.api.openapi import batches, ollama, openai
from ovserve.api.openapi.schema import Schema


def openapi_document(served: Mapping[str, str]) -> Schema:
    """The OpenAPI 3.1 document for a server serving ``served`` (model name -> task)."""
    schemas: Schema = {**openai.components(served), **ollama.components(served), **batches.components()}
    return {
        "openapi": "3.1.0",
        "info": {"title": "ovserve", "version": __version__},
        "paths": {**openai.paths(served), **ollama.paths(), **batches.paths()},
        "components": {"schemas": schemas},
    }


async def openapi_json(request: web.Request) -> web.Response:
    models = request.app[keys.MODELS]
    # An image model's LoRA adapters are names a request may send as its model (GET /v3/models lists them).
    served = {name: model.task for model in models for name in (model.name, *model.spec.images.aliases)}
    document = openapi_document(served)
    return web.json_response(document)
