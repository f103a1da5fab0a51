"""GET /openapi.json: a valid OpenAPI 3.1 document of what the generation endpoints accept."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from ovserve.api import keys
from ovserve.api.routes import add_routes
from ovserve.protocol import ChatCompletionRequest, CompletionRequest
from ovserve.protocol_responses import ResponsesRequest
from ovserve.service.models import ModelRegistry

PATHS = {
    "/v3/chat/completions": ChatCompletionRequest,
    "/v3/completions": CompletionRequest,
    "/v3/responses": ResponsesRequest,
}


async def served_document() -> dict[str, Any]:
    app = web.Application()
    # The document needs only the served names; no engine is started.
    app[keys.MODELS] = ModelRegistry([SimpleNamespace(name="tiny-llm")])  # type: ignore[list-item]
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


async def test_openapi_document_is_valid_openapi_31_with_both_endpoints() -> None:
    document = await served_document()
    validate(document)  # raises on an invalid document; picks the validator from "openapi": "3.1.0"
    assert document["openapi"].startswith("3.1")
    assert set(PATHS) <= set(document["paths"])
    for path in PATHS:
        responses = document["paths"][path]["post"]["responses"]
        assert {"200", "400", "404", "413", "422", "429", "503"} <= set(responses)
        error = responses["400"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        assert document["components"]["schemas"][error]["required"] == ["error"]


async def test_openapi_request_bodies_stay_open_to_other_servers_fields() -> None:
    document = await served_document()
    for model in PATHS.values():
        assert document["components"]["schemas"][model.__name__].get("additionalProperties") is not False


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
    ],
)
async def test_openapi_request_schema_agrees_with_the_request_models(
    path: str, body: dict[str, Any], valid: bool
) -> None:
    document = await served_document()
    assert body_validator(document, path).is_valid(body) is valid
    if body["model"] == "tiny-llm":  # other names pass the models and are refused later, with 404
        assert _model_accepts(PATHS[path], body) is valid


def _model_accepts(
    model: type[ChatCompletionRequest | CompletionRequest | ResponsesRequest], body: dict[str, Any]
) -> bool:
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
    }
    accepted = []
    for path, model in PATHS.items():
        validator = body_validator(document, path)
        for field in document["components"]["schemas"][model.__name__]["properties"]:
            for value in WRONG_TYPES:
                body = {**bases[path], field: value}
                if field != "model" and not validator.is_valid(body) and _model_accepts(model, body):
                    accepted.append(f"{path} {field}={value!r}")
    assert accepted == []
