"""GET /openapi.json's request bodies agree with the request models the routes validate with: a
body the schema accepts, the model accepts (and the reverse), for each endpoint's rules; and a
field of the wrong JSON type, as schemathesis' negative mode sends it, is refused by both.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from tests.unit.served_document import OLLAMA, PATHS, REQUESTS, body_validator, component, served_document


@pytest.fixture(scope="module")
async def document() -> dict[str, Any]:
    """The served document, fetched once for the module: its tests only read it."""
    return await served_document()


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
def test_openapi_request_schema_agrees_with_the_request_models(
    document: dict[str, Any], path: str, body: dict[str, Any], valid: bool
) -> None:
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
def test_ollama_request_schemas_agree_with_the_request_models(
    document: dict[str, Any], path: str, body: dict[str, Any], valid: bool
) -> None:
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


def test_openapi_type_mutations_are_refused_by_the_request_models(document: dict[str, Any]) -> None:
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
