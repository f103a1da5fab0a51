"""GET /openapi.json: a valid OpenAPI 3.1 document of what every POST endpoint accepts and answers.

Every POST route of a built app is in the document (under /v3, its aliases being the same handler;
Ollama's /api/* routes under their own paths, with their methods), so a new endpoint cannot escape
the fuzzer (scripts/fuzz_api.py) by being left out of it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from openapi_spec_validator import validate
from pydantic import BaseModel
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from ovserve.api import keys
from ovserve.api.openapi import openapi_document
from ovserve.api.table import ROUTES, add_routes
from ovserve.app import create_app
from ovserve.dialects.anthropic.request import MessagesRequest, PromptRequest
from ovserve.dialects.ollama import request as ollama
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.images.request import ImageGenerationRequest
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.dialects.openai.retrieval.request import (
    DetokenizeRequest,
    EmbeddingRequest,
    RerankRequest,
    TokenizeRequest,
)
from ovserve.models.served import ModelRegistry
from ovserve.settings.schema import ModelSettings, ServerSettings

PATHS: dict[str, type[BaseModel]] = {
    "/v3/chat/completions": ChatCompletionRequest,
    "/v3/completions": CompletionRequest,
    "/v3/responses": ResponsesRequest,
    "/v3/embeddings": EmbeddingRequest,
    "/v3/rerank": RerankRequest,
    "/v3/tokenize": TokenizeRequest,
    "/v3/detokenize": DetokenizeRequest,
    "/v3/messages": MessagesRequest,
    "/v3/messages/count_tokens": PromptRequest,
    "/v3/images/generations": ImageGenerationRequest,
}
GENERATION = ("/v3/chat/completions", "/v3/completions", "/v3/responses", "/v3/messages")
# The JSON routes that stream with "stream": true.
STREAMED = (*GENERATION, "/v3/images/generations")
# Anthropic's Messages API: its error shape, 529 for an overloaded model.
ANTHROPIC = ("/v3/messages", "/v3/messages/count_tokens")
# The documented GETs: OpenAI's model list and model object.
READS = ("/v3/models", "/v3/models/{name}")
# A stored response of the Responses API: read back and deleted.
STORED = "/v3/responses/{response_id}"
# Audio: multipart uploads and an audio answer (their schemas are written in ovserve.api.openapi).
AUDIO = ("/v3/audio/transcriptions", "/v3/audio/translations", "/v3/audio/speech")
# An image edit: a multipart upload, admitted like every model's request (429 past its queue).
IMAGE_EDIT = "/v3/images/edits"
# Ollama's native API: its request models, each documented as "Ollama" + the class name.
OLLAMA: dict[str, type[BaseModel]] = {
    "/api/chat": ollama.ChatRequest,
    "/api/generate": ollama.GenerateRequest,
    "/api/embed": ollama.EmbedRequest,
    "/api/embeddings": ollama.EmbeddingsRequest,
    "/api/show": ollama.ShowRequest,
}
OLLAMA_STREAMS = ("/api/chat", "/api/generate")
OLLAMA_READS = ("/api/tags", "/api/ps", "/api/version")
# Ollama's model store: one answer, a 400 pointing at `ovserve export`.
OLLAMA_STORE = {"/api/pull": "post", "/api/push": "post", "/api/create": "post", "/api/copy": "post",
                "/api/delete": "delete"}  # fmt: skip
REQUESTS: dict[str, type[BaseModel]] = {**PATHS, **OLLAMA}


def component(path: str) -> str:
    """The name of the request body's schema of ``path``."""
    return ("Ollama" if path.startswith("/api/") else "") + REQUESTS[path].__name__


def _settings(name: str) -> ModelSettings:
    """Settings without a model directory: what the app's residency manager reads of a model."""
    return ModelSettings.model_construct(name=name, path=Path("/nonexistent") / name)


# What the document needs of a served model: its name and task (and settings for the app's
# residency manager). No engine is started.
SERVED = ModelRegistry(
    [
        SimpleNamespace(name="tiny-llm", task="text_generation", settings=_settings("tiny-llm")),  # type: ignore[list-item]
        SimpleNamespace(name="tiny-embed", task="embeddings", settings=_settings("tiny-embed")),  # type: ignore[list-item]
        SimpleNamespace(name="tiny-rerank", task="rerank", settings=_settings("tiny-rerank")),  # type: ignore[list-item]
    ]
)


async def served_document() -> dict[str, Any]:
    app = web.Application()
    app[keys.MODELS] = SERVED
    add_routes(app)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/openapi.json")
        assert response.status == 200
        assert response.content_type == "application/json"
        return await response.json()


def body_validator(document: dict[str, Any], path: str) -> jsonschema.Draft202012Validator:
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry = Registry().with_resource("urn:ovserve", resource)
    return jsonschema.Draft202012Validator({"$ref": "urn:ovserve" + schema["$ref"]}, registry=registry)


async def test_openapi_document_is_valid_openapi_31_with_every_endpoint() -> None:
    document = await served_document()
    validate(document)  # raises on an invalid document; picks the validator from "openapi": "3.1.0"
    assert document["openapi"].startswith("3.1")
    assert {*PATHS, *READS, STORED, *AUDIO, IMAGE_EDIT, *OLLAMA, *OLLAMA_READS, *OLLAMA_STORE} == set(document["paths"])
    edit = document["paths"][IMAGE_EDIT]["post"]
    assert set(edit["responses"]) == {"200", "400", "404", "413", "415", "429", "503", "504"}
    assert set(edit["requestBody"]["content"]["multipart/form-data"]["schema"]["required"]) == {
        "image",
        "prompt",
        "model",
    }
    for path in AUDIO:
        assert set(document["paths"][path]["post"]["responses"]) == {"200", "400", "404", "413", "415", "503", "504"}
    for path in READS:
        assert list(document["paths"][path]) == ["get"]
    for path in PATHS:
        responses = document["paths"][path]["post"]["responses"]
        expected = {"200", "400", "404", "413", "415"}
        if path in ANTHROPIC:
            expected |= {"529"} | ({"429"} if path in GENERATION else set())
        else:
            expected |= {"422", "429", "503"} if path in GENERATION else set()
        expected |= (
            {"429", "503", "504"} if path in ("/v3/embeddings", "/v3/rerank", "/v3/images/generations") else set()
        )
        assert set(responses) == expected, path
        for status in expected - {"200"}:
            error = responses[status]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
            required = ["error", "type"] if path in ANTHROPIC else ["error"]
            assert sorted(document["components"]["schemas"][error]["required"]) == required


async def test_ollamas_operations_answer_ollamas_error_shape_with_their_statuses() -> None:
    document = await served_document()  # the document test_openapi_document_is_valid_openapi_31... validates
    schemas = document["components"]["schemas"]
    assert schemas["OllamaErrorResponse"]["required"] == ["error"]
    assert schemas["OllamaErrorResponse"]["additionalProperties"] is False
    generation = {"200", "400", "404", "409", "413", "415", "503", "504"}
    embedding = {"200", "400", "404", "413", "415", "503", "504"}
    expected = {"/api/chat": generation, "/api/generate": generation, "/api/embed": embedding}
    expected |= {"/api/embeddings": embedding, "/api/show": {"200", "400", "404", "413", "415"}}
    for path, statuses in expected.items():
        (method,) = document["paths"][path]
        responses = document["paths"][path][method]["responses"]
        assert (method, set(responses)) == ("post", statuses), path
        for status in statuses - {"200"}:
            assert responses[status]["content"]["application/json"]["schema"]["$ref"].endswith("/OllamaErrorResponse")
    for path in OLLAMA_READS:
        assert list(document["paths"][path]) == ["get"]
        assert set(document["paths"][path]["get"]["responses"]) == {"200"}
    for path, method in OLLAMA_STORE.items():
        assert list(document["paths"][path]) == [method]
        (error,) = document["paths"][path][method]["responses"].values()
        assert list(document["paths"][path][method]["responses"]) == ["400"]
        assert error["content"]["application/json"]["schema"]["$ref"].endswith("/OllamaErrorResponse")


def _post_routes(app: web.Application) -> dict[str, Any]:
    """The documented POST routes (the operator's -- model load/unload, config reload -- are not)."""
    undocumented = {path for route in ROUTES if not route.documented for path in route.paths}
    return {
        route.resource.canonical: route.handler
        for route in app.router.routes()
        if route.method == "POST" and route.resource.canonical not in undocumented
    }


def _ollama_routes(app: web.Application) -> set[tuple[str, str]]:
    """Ollama's routes of the app, as (path, method); HEAD is GET's."""
    return {
        (route.resource.canonical, route.method.lower())
        for route in app.router.routes()
        if route.resource is not None and route.resource.canonical.startswith("/api/") and route.method != "HEAD"
    }


def test_every_post_route_of_the_app_is_in_the_document_under_v3() -> None:
    """The app as the server builds it (no engine starts: it is never run). /v1/x and /x are the
    /v3/x handler, which the document describes once."""
    app = create_app(ServerSettings.model_construct(models=[]), SERVED)
    routes = _post_routes(app)
    documented = set(openapi_document({"tiny-llm": "text_generation"})["paths"])
    missing = []
    for path, handler in routes.items():
        if path.startswith("/api/"):
            continue  # Ollama's native API: under its own paths (the next test)
        v3 = "/v3" + path.removeprefix("/v1") if not path.startswith("/v3") else path
        if v3 not in documented:
            missing.append(path)
        else:
            assert routes.get(v3) is handler, f"{path} is not an alias of {v3}"
    assert missing == []
    assert set(PATHS) <= set(routes)


def test_every_ollama_route_of_the_app_is_in_the_document_with_its_method() -> None:
    app = create_app(ServerSettings.model_construct(models=[]), SERVED)
    document = openapi_document({"tiny-llm": "text_generation"})
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    ollama_routes = _ollama_routes(app)
    assert len(ollama_routes) == len(OLLAMA) + len(OLLAMA_READS) + len(OLLAMA_STORE)
    assert ollama_routes <= documented


def test_every_get_and_delete_of_the_api_is_in_the_document_under_v3_with_its_method() -> None:
    """The model list and a stored response (GET, DELETE); /v1 and the bare paths are aliases of
    /v3. The probes, /metrics and /openapi.json itself are the operator's, not the API's."""
    app = create_app(ServerSettings.model_construct(models=[]), SERVED)
    document = openapi_document({"tiny-llm": "text_generation"})
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    api = {
        ("/v3" + canonical.removeprefix("/v1").removeprefix("/v3"), route.method.lower())
        for route in app.router.routes()
        if route.method in ("GET", "DELETE")
        and (canonical := route.resource.canonical).startswith(("/v1/", "/v3/"))
        and canonical != "/v1/config/reload"
    }
    assert api == {("/v3/models", "get"), ("/v3/models/{name}", "get"), (STORED, "get"), (STORED, "delete")}
    assert api <= documented
    for method, answer in (("get", "Response"), ("delete", "ResponseDeleted")):
        operation = document["paths"][STORED][method]
        assert [parameter["name"] for parameter in operation["parameters"]] == ["response_id"]
        assert set(operation["responses"]) == {"200", "404", "503"}
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/" + answer)
    schemas = document["components"]["schemas"]
    assert schemas["ResponseDeleted"]["required"] == ["id", "object", "deleted"]


def test_the_model_list_routes_are_documented_with_the_parsers_extension() -> None:
    app = create_app(ServerSettings.model_construct(models=[]), SERVED)
    gets = {route.resource.canonical for route in app.router.routes() if route.method == "GET"}
    assert set(READS) <= gets
    document = openapi_document({"tiny-llm": "text_generation"})
    schemas = document["components"]["schemas"]
    assert schemas["ModelObject"]["required"] == ["id", "object", "created", "owned_by", "ovserve"]
    assert {"tool_parser", "reasoning_parser", "state", "memory_bytes"} <= set(schemas["ModelParsersInfo"]["required"])
    (name,) = document["paths"]["/v3/models/{name}"]["get"]["parameters"]
    assert name["schema"]["enum"] == ["tiny-llm"]
    validate(openapi_document({}))  # no model served: still a valid document


async def test_openapi_model_enum_lists_the_models_serving_the_task() -> None:
    document = await served_document()
    schemas = document["components"]["schemas"]
    assert schemas["EmbeddingRequest"]["properties"]["model"]["enum"] == ["tiny-embed"]
    assert schemas["RerankRequest"]["properties"]["model"]["enum"] == ["tiny-rerank"]
    # Tokenize/detokenize: any served model, or none (the server's only one).
    everyone = {"enum": ["tiny-embed", "tiny-llm", "tiny-rerank"]}
    assert schemas["TokenizeRequest"]["properties"]["model"]["anyOf"] == [everyone, {"type": "null"}]
    # No model serves the task: every name, each answered with wrong_model_task's 400.
    only_llm = openapi_document({"tiny-llm": "text_generation"})["components"]["schemas"]
    assert only_llm["EmbeddingRequest"]["properties"]["model"]["enum"] == ["tiny-llm"]
    assert only_llm["OllamaEmbedRequest"]["properties"]["model"]["enum"] == ["tiny-llm", "tiny-llm:latest"]


async def test_ollamas_model_enum_names_each_served_model_also_as_latest() -> None:
    schemas = (await served_document())["components"]["schemas"]
    everyone = [f"{name}{tag}" for name in ("tiny-embed", "tiny-llm", "tiny-rerank") for tag in ("", ":latest")]
    # Chat and generate: any model (the unload request works for each; generating needs a generator: 400).
    assert schemas["OllamaChatRequest"]["properties"]["model"]["enum"] == everyone
    assert schemas["OllamaGenerateRequest"]["properties"]["model"]["enum"] == everyone
    assert schemas["OllamaEmbedRequest"]["properties"]["model"]["enum"] == ["tiny-embed", "tiny-embed:latest"]
    assert schemas["OllamaEmbeddingsRequest"]["properties"]["model"]["enum"] == ["tiny-embed", "tiny-embed:latest"]
    assert schemas["OllamaShowRequest"]["properties"]["model"]["anyOf"] == [{"enum": everyone}, {"type": "null"}]


async def test_openapi_success_bodies_are_the_response_models_each_under_its_own_name() -> None:
    document = await served_document()
    schemas = document["components"]["schemas"]
    # Two models of one name would get pydantic's "-Input"/"-Output" or module-qualified names.
    assert [name for name in schemas if not name.isidentifier()] == []
    for path in PATHS:
        content = document["paths"][path]["post"]["responses"]["200"]["content"]
        answer = content["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        assert schemas[answer]["additionalProperties"] is False, path
        if path in STREAMED:
            events = content["text/event-stream"]["schema"]["$ref"].rsplit("/", 1)[-1]
            assert "anyOf" in schemas[events] or "oneOf" in schemas[events], path
        else:
            assert "text/event-stream" not in content, path
    for path in [*OLLAMA, *OLLAMA_READS]:
        (operation,) = document["paths"][path].values()
        content = operation["responses"]["200"]["content"]
        answer = content["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        assert answer.startswith("Ollama") and schemas[answer]["additionalProperties"] is False, path
        if path in OLLAMA_STREAMS:
            line = content["application/x-ndjson"]["schema"]["$ref"].rsplit("/", 1)[-1]
            assert len(schemas[line]["anyOf"]) == 3, path  # a piece of output, the last line, the error line
        else:
            assert set(content) == {"application/json"}, path


async def test_openapi_request_bodies_stay_open_to_other_servers_fields() -> None:
    document = await served_document()
    for path in REQUESTS:
        assert document["components"]["schemas"][component(path)].get("additionalProperties") is not False


MESSAGES = [{"role": "user", "content": "hi"}]
PROMPT = {"model": "tiny-llm", "prompt": "hi"}
TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("path", "body", "valid"),
    [
        ("/v3/chat/completions", {"model": "tiny-llm", "messages": MESSAGES}, True),
        # null means "not sent" for every optional field.
        ("/v3/chat/completions", {"model": "tiny-llm", "messages": MESSAGES, "stream": None, "n": None}, True),
        ("/v3/completions", {"model": "tiny-llm", "prompt": "hi", "echo": None, "vendor_field": 1}, True),
        ("/v3/chat/completions", {"model": "gpt-9", "messages": MESSAGES}, False),
        ("/v3/chat/completions", {"model": None, "messages": MESSAGES}, False),
        ("/v3/chat/completions", {"model": "tiny-llm", "messages": MESSAGES, "temperature": 5}, False),
        ("/v3/completions", {"model": "tiny-llm"}, False),
        # Rules the models check in validators.
        ("/v3/chat/completions", {"model": "tiny-llm", "messages": [{"role": "user"}]}, False),
        ("/v3/chat/completions", {"model": "tiny-llm", "messages": [{"role": "user", "content": None}]}, False),
        ("/v3/chat/completions", {"model": "tiny-llm", "messages": [{"role": "assistant", "tool_calls": []}]}, False),
        (
            "/v3/chat/completions",
            {"model": "tiny-llm", "messages": [{"role": "assistant", "tool_calls": [TOOL_CALL]}]},
            True,
        ),
        ("/v3/completions", {"model": "tiny-llm", "prompt": "hi", "stop": ["a", "b", "c", "d"]}, True),
        ("/v3/completions", {"model": "tiny-llm", "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, False),
        ("/v3/completions", {"model": "tiny-llm", "prompt": "hi", "stop": ""}, False),
        ("/v3/completions", {"model": "tiny-llm", "prompt": "hi", "stop": ["a", ""]}, False),
        ("/v3/responses", {"model": "tiny-llm", "input": "hi", "store": None}, True),
        ("/v3/responses", {"model": "tiny-llm", "input": [{"role": "user", "content": "hi"}]}, True),
        (
            "/v3/responses",
            {"model": "tiny-llm", "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
            True,
        ),
        ("/v3/responses", {"model": "tiny-llm"}, False),
        ("/v3/responses", {"model": "tiny-llm", "input": [{"type": "item_reference", "id": "x"}]}, False),
        ("/v3/responses", {"model": "tiny-llm", "input": "hi", "tools": [{"type": "web_search"}]}, False),
        ("/v3/embeddings", {"model": "tiny-embed", "input": "hi", "dimensions": None, "vendor": 1}, True),
        ("/v3/embeddings", {"model": "tiny-embed", "input": [[1, 2], [3]], "encoding_format": "base64"}, True),
        ("/v3/embeddings", {"model": "tiny-llm", "input": "hi"}, False),
        ("/v3/embeddings", {"model": "tiny-embed", "input": ""}, False),
        ("/v3/embeddings", {"model": "tiny-embed", "input": []}, False),
        ("/v3/embeddings", {"model": "tiny-embed", "input": ["a", 1]}, False),
        ("/v3/embeddings", {"model": "tiny-embed", "input": [[1], []]}, False),
        ("/v3/embeddings", {"model": "tiny-embed", "input": [True]}, False),
        ("/v3/embeddings", {"model": "tiny-embed", "input": "hi", "dimensions": 0}, False),
        ("/v3/rerank", {"model": "tiny-rerank", "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1}, True),
        ("/v3/rerank", {"model": "tiny-rerank", "query": "", "documents": ["a"]}, False),
        ("/v3/rerank", {"model": "tiny-rerank", "query": "q", "documents": []}, False),
        ("/v3/rerank", {"model": "tiny-rerank", "query": "q", "documents": [{}]}, False),
        ("/v3/tokenize", {"content": "hi", "messages": None}, True),
        ("/v3/tokenize", {"model": "tiny-llm", "messages": MESSAGES, "with_pieces": True}, True),
        ("/v3/tokenize", {"model": "tiny-llm"}, False),
        ("/v3/tokenize", {"model": "tiny-llm", "content": "hi", "messages": MESSAGES}, False),
        ("/v3/tokenize", {"model": "tiny-llm", "messages": [{"role": "user"}]}, False),
        ("/v3/detokenize", {"model": "tiny-llm", "tokens": [0, 1]}, True),
        ("/v3/detokenize", {"tokens": [-1]}, False),
        ("/v3/detokenize", {"model": "gpt-9", "tokens": [1]}, False),
    ],
)
async def test_openapi_request_schema_agrees_with_the_request_models(
    path: str, body: dict[str, Any], valid: bool
) -> None:
    document = await served_document()
    assert body_validator(document, path).is_valid(body) is valid
    if _names_a_model_for_the_path(document, path, body):
        assert _model_accepts(PATHS[path], body) is valid


def _names_a_model_for_the_path(document: dict[str, Any], path: str, body: dict[str, Any]) -> bool:
    """Other names pass the request models and are refused later: 404, or 400 wrong_model_task.
    (/api/show reads ``name`` when ``model`` is not sent.)"""
    schema = document["components"]["schemas"][component(path)]["properties"]["model"]
    named = body.get("model")
    if path == "/api/show" and named is None:
        named = body.get("name")
    return jsonschema.Draft202012Validator(schema).is_valid(named)


USER = {"role": "user", "content": "hi"}
LLM, EMBED = {"model": "tiny-llm"}, {"model": "tiny-embed"}


@pytest.mark.parametrize(
    ("path", "body", "valid"),
    [
        ("/api/chat", {**LLM, "messages": [USER]}, True),
        ("/api/chat", {"model": "tiny-llm:latest", "messages": [USER]}, True),  # Ollama's untagged name
        ("/api/chat", LLM, True),  # no messages: load the model
        ("/api/chat", {"model": "tiny-embed", "keep_alive": 0}, True),  # unload: any model
        # null means "not sent" for every top-level field...
        ("/api/chat", {**LLM, "messages": None, "stream": None, "options": None, "keep_alive": None}, True),
        # ...not inside: a message's content is a string.
        ("/api/chat", {**LLM, "messages": [{"role": "user", "content": None}]}, False),
        ("/api/chat", {"model": "llama9", "messages": [USER]}, False),
        ("/api/chat", {"model": "tiny-llm:7b", "messages": [USER]}, False),
        ("/api/chat", {"model": None, "messages": [USER]}, False),
        ("/api/chat", {**LLM, "stream": "yes"}, False),
        ("/api/chat", {**LLM, "messages": [{"role": "wizard", "content": "hi"}]}, False),
        ("/api/chat", {**LLM, "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]}, True),
        ("/api/chat", {**LLM, "tools": [{"function": {"name": "no spaces"}}]}, False),
        ("/api/chat", {**LLM, "options": {"temperature": 0.5, "top_k": 0, "seed": -1, "mirostat": 2}}, True),
        ("/api/chat", {**LLM, "options": {"temperature": 9}}, False),
        ("/api/chat", {**LLM, "options": {"num_predict": -1}}, True),
        ("/api/chat", {**LLM, "options": {"num_predict": 0}}, False),
        ("/api/chat", {**LLM, "options": {"num_predict": -3}}, False),
        ("/api/chat", {**LLM, "options": {"stop": ["\n", "User:"]}}, True),
        ("/api/chat", {**LLM, "options": {"stop": ["\n", ""]}}, False),
        ("/api/chat", {**LLM, "options": {"stop": "\n"}}, False),
        ("/api/chat", {**LLM, "format": "json", "think": "low"}, True),
        ("/api/chat", {**LLM, "format": {"type": "object"}, "think": False}, True),
        ("/api/chat", {**LLM, "format": "yaml"}, False),
        ("/api/chat", {**LLM, "think": "max"}, False),
        # keep_alive: seconds, or a Go duration or a number in a string.
        ("/api/chat", {**LLM, "keep_alive": 1e300}, True),
        ("/api/chat", {**LLM, "keep_alive": -1}, True),
        ("/api/chat", {**LLM, "keep_alive": "1h30m"}, True),
        ("/api/chat", {**LLM, "keep_alive": "-1.5s"}, True),
        ("/api/chat", {**LLM, "keep_alive": "+250ms"}, True),
        ("/api/chat", {**LLM, "keep_alive": "300"}, True),
        ("/api/chat", {**LLM, "keep_alive": "1.5e3"}, True),
        ("/api/chat", {**LLM, "keep_alive": "soon"}, False),
        ("/api/chat", {**LLM, "keep_alive": "5 minutes"}, False),
        ("/api/chat", {**LLM, "keep_alive": " 5"}, False),
        ("/api/chat", {**LLM, "keep_alive": "\u0663"}, False),  # an Arabic-Indic 3: float() would read it
        ("/api/chat", {**LLM, "keep_alive": "nan"}, False),
        ("/api/chat", {**LLM, "keep_alive": ""}, False),
        ("/api/chat", {**LLM, "keep_alive": True}, False),
        ("/api/generate", {**LLM, "prompt": "hi", "system": "Be brief.", "images": ["iVBORw0KGgo="]}, True),
        ("/api/generate", {**LLM, "prompt": ["a"]}, False),
        # Fields refused unless empty, whether the request generates or only loads the model.
        ("/api/generate", {**LLM, "template": "", "suffix": None, "context": []}, True),
        ("/api/generate", {**LLM, "template": "{{ .Prompt }}"}, False),
        ("/api/generate", {**LLM, "prompt": "def f(", "suffix": ")"}, False),
        ("/api/generate", {**LLM, "context": [1, 2]}, False),
        ("/api/generate", {**LLM, "prompt": "hi", "raw": True, "images": [], "format": "", "think": False}, True),
        ("/api/generate", {**LLM, "prompt": "hi", "raw": True, "images": ["iVBORw0KGgo="]}, False),
        ("/api/generate", {**LLM, "prompt": "hi", "raw": True, "format": "json"}, False),
        ("/api/generate", {**LLM, "prompt": "hi", "raw": True, "format": {}}, False),
        ("/api/generate", {**LLM, "raw": True, "think": "low"}, False),
        ("/api/generate", {**LLM, "prompt": "hi", "raw": False, "format": "json", "think": True}, True),
        ("/api/embed", {**EMBED, "input": "hi", "truncate": None, "dimensions": None}, True),
        ("/api/embed", {**EMBED, "input": ["a", "b"], "keep_alive": "10m"}, True),
        ("/api/embed", {"model": "tiny-llm", "input": "hi"}, False),  # not an embeddings model: a 400
        ("/api/embed", {**EMBED, "input": ""}, False),
        ("/api/embed", {**EMBED, "input": []}, False),
        ("/api/embed", {**EMBED, "input": ["a", ""]}, False),
        ("/api/embed", {**EMBED, "input": ["a", 1]}, False),
        ("/api/embed", {**EMBED, "input": 5}, False),
        ("/api/embed", {**EMBED, "input": "hi", "dimensions": 0}, False),
        ("/api/embed", EMBED, False),
        ("/api/embeddings", {**EMBED, "prompt": "hi", "options": None}, True),
        ("/api/embeddings", {**EMBED, "prompt": ""}, False),
        ("/api/embeddings", EMBED, False),
        ("/api/show", LLM, True),
        ("/api/show", {"name": "tiny-llm"}, True),  # older clients
        ("/api/show", {"model": None, "name": "tiny-llm:latest", "verbose": None}, True),
        ("/api/show", {"model": "tiny-llm", "name": "gpt-9"}, True),  # name is not read then
        ("/api/show", {"name": "gpt-9"}, False),
        ("/api/show", {"model": "gpt-9", "name": "tiny-llm"}, False),
        ("/api/show", {}, False),
        ("/api/show", {"model": None, "name": None}, False),
        ("/api/show", {**LLM, "verbose": "yes"}, False),
    ],
)
async def test_ollama_request_schemas_agree_with_the_request_models(
    path: str, body: dict[str, Any], valid: bool
) -> None:
    document = await served_document()
    assert body_validator(document, path).is_valid(body) is valid
    if _names_a_model_for_the_path(document, path, body):
        assert _model_accepts(OLLAMA[path], body) is valid


def _model_accepts(model: type[BaseModel], body: dict[str, Any]) -> bool:
    try:
        model.model_validate(body)
    except ValueError:
        return False
    return True


# JSON values of the wrong type, as schemathesis' negative mode sends them.
WRONG_TYPES: list[Any] = [True, 0, 1, 1.5, "1", "true", [], {}]


async def test_openapi_type_mutations_are_refused_by_the_request_models() -> None:
    document = await served_document()
    bases = {
        "/v3/chat/completions": {"model": "tiny-llm", "messages": MESSAGES},
        "/v3/completions": PROMPT,
        "/v3/responses": {"model": "tiny-llm", "input": "hi"},
        "/v3/embeddings": {"model": "tiny-embed", "input": "hi"},
        "/v3/rerank": {"model": "tiny-rerank", "query": "q", "documents": ["d"]},
        "/v3/tokenize": {"model": "tiny-llm", "content": "hi"},
        "/v3/detokenize": {"model": "tiny-llm", "tokens": [1]},
        "/v3/messages": {"model": "tiny-llm", "max_tokens": 8, "messages": MESSAGES},
        "/v3/messages/count_tokens": {"model": "tiny-llm", "messages": MESSAGES},
        "/v3/images/generations": {"model": "tiny-llm", "prompt": "a lighthouse"},
        "/api/chat": {**LLM, "messages": [USER]},
        "/api/generate": {**LLM, "prompt": "hi"},
        "/api/embed": {**EMBED, "input": "hi"},
        "/api/embeddings": {**EMBED, "prompt": "hi"},
        "/api/show": LLM,
    }
    accepted = []
    for path, model in REQUESTS.items():
        validator = body_validator(document, path)
        for field in document["components"]["schemas"][component(path)]["properties"]:
            for value in WRONG_TYPES:
                body = {**bases[path], field: value}
                if field != "model" and not validator.is_valid(body) and _model_accepts(model, body):
                    accepted.append(f"{path} {field}={value!r}")
    assert accepted == []
