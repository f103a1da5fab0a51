"""GET /openapi.json: a valid OpenAPI 3.1 document of what every POST endpoint accepts and answers.

Every POST route of a built app is in the document (under /v3, its aliases being the same handler;
Ollama's /api/* routes under their own paths, with their methods), so a new endpoint cannot escape
the fuzzer (scripts/fuzz_api.py) by being left out of it. That each request body's schema accepts
what its request model accepts is ``test_openapi_requests.py``'s.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from openapi_spec_validator import validate

from ovserve.api.openapi import openapi_document
from ovserve.api.table import ROUTES
from ovserve.app import create_app
from ovserve.settings.schema import ServerSettings
from tests.unit.served_document import (
    ANTHROPIC,
    AUDIO,
    BATCH_API,
    GENERATION,
    IMAGE_EDIT,
    OLLAMA,
    OLLAMA_READS,
    OLLAMA_STORE,
    OLLAMA_STREAMS,
    PATHS,
    READS,
    REQUESTS,
    SERVED,
    STORED,
    STREAMED,
    component,
    served_document,
)


@pytest.fixture(scope="module")
async def document() -> dict[str, Any]:
    """The served document, fetched once for the module: its tests only read it."""
    return await served_document()


def test_openapi_document_is_valid_openapi_31_with_every_endpoint(document: dict[str, Any]) -> None:
    validate(document)  # raises on an invalid document; picks the validator from "openapi": "3.1.0"
    assert document["openapi"].startswith("3.1")
    everything = {*PATHS, *READS, STORED, *AUDIO, IMAGE_EDIT, *OLLAMA, *OLLAMA_READS, *OLLAMA_STORE, *BATCH_API}
    assert everything == set(document["paths"])
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


def test_ollamas_operations_answer_ollamas_error_shape_with_their_statuses(document: dict[str, Any]) -> None:
    # The document test_openapi_document_is_valid_openapi_31... validates.
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
    """The model list, a stored response, the files and batches (GET, DELETE); /v1 and the bare
    paths are aliases of /v3. The probes, /metrics and /openapi.json itself are the operator's."""
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
    files_and_batches = {
        (path, method) for path, methods in BATCH_API.items() for method in methods if method != "post"
    }
    reads = {("/v3/models", "get"), ("/v3/models/{name}", "get"), (STORED, "get"), (STORED, "delete")}
    assert api == reads | files_and_batches
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


def test_openapi_model_enum_lists_the_models_serving_the_task(document: dict[str, Any]) -> None:
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


def test_ollamas_model_enum_names_each_served_model_also_as_latest(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    everyone = [f"{name}{tag}" for name in ("tiny-embed", "tiny-llm", "tiny-rerank") for tag in ("", ":latest")]
    # Chat and generate: any model (the unload request works for each; generating needs a generator: 400).
    assert schemas["OllamaChatRequest"]["properties"]["model"]["enum"] == everyone
    assert schemas["OllamaGenerateRequest"]["properties"]["model"]["enum"] == everyone
    assert schemas["OllamaEmbedRequest"]["properties"]["model"]["enum"] == ["tiny-embed", "tiny-embed:latest"]
    assert schemas["OllamaEmbeddingsRequest"]["properties"]["model"]["enum"] == ["tiny-embed", "tiny-embed:latest"]
    assert schemas["OllamaShowRequest"]["properties"]["model"]["anyOf"] == [{"enum": everyone}, {"type": "null"}]


def test_openapi_success_bodies_are_the_response_models_each_under_its_own_name(document: dict[str, Any]) -> None:
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


def test_openapi_request_bodies_stay_open_to_other_servers_fields(document: dict[str, Any]) -> None:
    for path in REQUESTS:
        assert document["components"]["schemas"][component(path)].get("additionalProperties") is not False


def test_the_files_and_batch_apis_are_documented_with_their_answers_and_errors(document: dict[str, Any]) -> None:
    paths, schemas = document["paths"], document["components"]["schemas"]
    for path, methods in BATCH_API.items():
        assert sorted(paths[path]) == list(methods), path
    upload = paths["/v3/files"]["post"]
    form = upload["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["required"] == ["file", "purpose"] and form["properties"]["purpose"]["enum"] == ["batch", "user_data"]
    assert set(upload["responses"]) == {"200", "400", "408", "413", "415", "503"}
    seconds = form["properties"]["expires_after[seconds]"]
    assert (seconds["minimum"], seconds["maximum"]) == (3600, 2_592_000)  # OpenAI's bounds, both fields or neither
    assert form["dependentRequired"]["expires_after[seconds]"] == ["expires_after[anchor]"]
    create = paths["/v3/batches"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/CreateBatchRequest")
    assert schemas["CreateBatchRequest"]["additionalProperties"] is False  # an unknown field is a 400
    assert set(schemas["CreateBatchRequest"]["required"]) == {"input_file_id", "endpoint", "completion_window"}
    assert set(paths["/v3/batches/{batch_id}/cancel"]["post"]["responses"]) == {"200", "404", "409", "503"}
    for name in ("FileObject", "FileList", "FileDeleted", "Batch", "BatchList"):
        assert schemas[name]["additionalProperties"] is False, name
