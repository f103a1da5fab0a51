"""Every answer of the generation endpoints, unary and streamed, matches the app's own /openapi.json.

The document's success schemas are generated from the response models (``ovserve.api.openapi``);
these requests go through the real app, so a body the models let through but the document does
not describe (or the reverse) fails here. Retrieval answers are checked the same way against real
models in ``tests/e2e/test_retrieval.py``. Ollama's answers (``/api/*``: chat and generate unary
and each line of their NDJSON streams, embed, embeddings, show, tags, ps, version, errors) are
checked here, embeddings from the scripted engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from ovserve.engine.messages import AddRequest
from ovserve.parsers import reasoning_parser, tool_parser
from tests.fast.harness import MODEL, Served, fast_model
from tests.fast.scripted_engine import DIE, Script, Step, output, reply
from tests.served_openapi import EVENTS, ServedSchemas

CHAT, COMPLETIONS, RESPONSES = "/v3/chat/completions", "/v3/completions", "/v3/responses"
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
CALL = ('<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n</tool', "_call>")
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMETERS, "strict": True}
FORCED = {"type": "function", "name": "get_weather"}


def thinks_then_answers(add: AddRequest) -> Iterator[Step]:
    yield [output(add, "<think>Paris is", logprobs=add.params.logprobs)]
    yield [output(add, " in France</think>", logprobs=add.params.logprobs)]
    yield [output(add, "It is sunny.", finish="stop", logprobs=add.params.logprobs)]


def two_choices(add: AddRequest) -> Iterator[Step]:
    yield [output(add, "Red", index=0), output(add, "Blue", index=1, finish="length")]
    yield [output(add, " wine.", index=0, finish="stop")]


def dies_after_hello(add: AddRequest) -> Iterator[Step]:
    yield [output(add, "Hel")]
    yield DIE


# Each script with the requests it answers: (path, body without "model" and "stream").
CASES: dict[str, tuple[Script, list[tuple[str, dict[str, Any]]]]] = {
    "text": (
        reply("Hello", " there"),
        [
            (CHAT, {"messages": MESSAGES, "logprobs": True, "stream_options": {"include_usage": True}}),
            (COMPLETIONS, {"prompt": "Hi", "logprobs": 0, "stream_options": {"include_usage": True}}),
            (COMPLETIONS, {"prompt": ["Hi", "Ho"], "echo": True}),
            (RESPONSES, {"input": "Hi", "instructions": "Be brief.", "metadata": {"k": "v"}}),
            (RESPONSES, {"input": "Hi", "reasoning": {"effort": "low"}, "text": {"format": {"type": "json_object"}}}),
        ],
    ),
    "reasoning": (
        thinks_then_answers,
        [
            (CHAT, {"messages": MESSAGES, "logprobs": True}),
            (RESPONSES, {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]}]}),
        ],
    ),
    "tool call": (
        reply(*CALL),
        [
            (CHAT, {"messages": MESSAGES, "tools": [CHAT_TOOL]}),
            (RESPONSES, {"input": "Weather?", "tools": [RESPONSES_TOOL], "tool_choice": "required"}),
            (RESPONSES, {"input": "Weather?", "tools": [RESPONSES_TOOL], "tool_choice": FORCED}),
        ],
    ),
    "two choices": (
        two_choices,
        [
            (CHAT, {"messages": MESSAGES, "n": 2, "temperature": 0.7}),
            (COMPLETIONS, {"prompt": "Hi", "n": 2, "temperature": 0.7}),
        ],
    ),
    "max tokens": (
        reply("Hel", "lo", finish="length"),
        [
            (CHAT, {"messages": MESSAGES, "max_tokens": 2}),
            (COMPLETIONS, {"prompt": "Hi", "max_tokens": 2}),
            (RESPONSES, {"input": "Hi", "max_output_tokens": 2}),
        ],
    ),
    "nothing said": (reply(""), [(CHAT, {"messages": MESSAGES}), (RESPONSES, {"input": "Hi"})]),
}


async def _document(served: Served) -> ServedSchemas:
    async with served.client.get("/openapi.json") as response:
        assert response.status == 200
        return ServedSchemas(await response.json())


async def _answers(served: Served, schemas: ServedSchemas, path: str, body: dict[str, Any]) -> list[Any]:
    """POST unary and streamed; every answer checked. Returns the unary body and the stream's events."""
    stream_body = {key: value for key, value in body.items() if key != "stream_options"}
    status, unary = await served.post(path, stream_body)
    assert status == 200, unary
    schemas.validate_answer(path, unary)
    status, events = await served.post(path, {**body, "stream": True})
    assert status == 200, events
    assert events, "an empty stream"
    for event in events:
        if event != "[DONE]":
            schemas.validate_answer(path, event, EVENTS)
    return [unary, *events]


@pytest.mark.parametrize("case", CASES)
async def test_every_generation_answer_matches_the_served_openapi_document(serve, case: str) -> None:
    script, requests = CASES[case]
    fast = fast_model(script)
    fast.model.reasoning_format = reasoning_parser("qwen3")
    served = await serve(fast)
    schemas = await _document(served)
    for path, body in requests:
        await _answers(served, schemas, path, body)


@pytest.mark.parametrize(
    ("path", "body"), [(CHAT, {"messages": MESSAGES}), (COMPLETIONS, {"prompt": "Hi"}), (RESPONSES, {"input": "Hi"})]
)
async def test_a_stream_that_fails_ends_with_an_event_the_document_describes(
    serve, path: str, body: dict[str, Any]
) -> None:
    served = await serve(fast_model(dies_after_hello))
    schemas = await _document(served)
    status, events = await served.post(path, {**body, "stream": True})
    assert status == 200
    failure = next(event for event in reversed(events) if event != "[DONE]")
    assert "error" in failure or failure["type"] == "response.failed", failure
    for event in events:
        if event != "[DONE]":
            schemas.validate_answer(path, event, EVENTS)


STORED = "/v3/responses/{response_id}"


@pytest.mark.parametrize("prefix", ["/v3", "/v1", ""])
async def test_a_stored_response_reads_back_and_deletes_as_the_document_says(serve, prefix: str) -> None:
    """GET and DELETE /v3/responses/{response_id} (/v1 and the bare path: the same handlers):
    each answer, the 404 after the delete included, is what the document says that method answers."""
    served = await serve(fast_model(reply(*CALL)))
    schemas = await _document(served)
    status, created = await served.post(RESPONSES, {"input": "Weather?", "tools": [RESPONSES_TOOL]})
    assert status == 200, created
    path = f"{prefix}/responses/{created['id']}"
    async with served.client.get(path) as response:
        assert response.status == 200
        schemas.validate_answer(STORED, await response.json(), method="get")
    async with served.client.delete(path) as response:
        assert response.status == 200
        schemas.validate_answer(STORED, await response.json(), method="delete")
    for method in ("get", "delete"):
        async with served.client.request(method.upper(), path) as response:
            assert response.status == 404
            schemas.validate_answer(STORED, await response.json(), method=method, status="404")


async def test_the_documented_answers_refuse_what_no_answer_carries(serve) -> None:
    """The schemas are strict: a key no model has, or a missing required key, does not validate."""
    served = await serve(fast_model(reply("Hello")))
    schemas = await _document(served)
    unary, *events = await _answers(served, schemas, RESPONSES, {"input": "Hi"})
    with pytest.raises(jsonschema.ValidationError):
        schemas.validate_answer(RESPONSES, {**unary, "surprise": 1})
    with pytest.raises(jsonschema.ValidationError):
        schemas.validate_answer(RESPONSES, {key: value for key, value in unary.items() if key != "output"})
    delta = next(event for event in events if event["type"] == "response.output_text.delta")
    with pytest.raises(jsonschema.ValidationError):
        schemas.validate_answer(RESPONSES, {**delta, "type": "response.output_text.delta.v2"}, EVENTS)
    unary, *_ = await _answers(served, schemas, CHAT, {"messages": MESSAGES})
    with pytest.raises(jsonschema.ValidationError):
        schemas.validate_answer(CHAT, {**unary, "object": "chat.completion.chunk"})


async def test_the_model_list_names_each_models_parsers_as_the_document_says(serve) -> None:
    fast = fast_model(reply("Hi"))
    fast.model.tool_format, fast.model.reasoning_format = tool_parser("qwen3"), reasoning_parser("qwen3")
    served = await serve(fast)
    schemas = await _document(served)
    parsers = {"tool_parser": "hermes3", "reasoning_parser": "qwen3"}  # qwen3's calls: Hermes' parser
    for prefix in ("/v3", "/v1"):
        async with served.client.get(f"{prefix}/models") as response:
            listing = await response.json()
        schemas.validate_answer("/v3/models", listing, method="get")
        assert [(model["id"], model["object"]) for model in listing["data"]] == [(fast.model.name, "model")]
        extension = listing["data"][0]["ovserve"]
        assert {key: extension[key] for key in parsers} == parsers
        assert extension["state"] == "loaded"
        async with served.client.get(f"{prefix}/models/{fast.model.name}") as response:
            one = await response.json()
        schemas.validate_answer("/v3/models/{name}", one, method="get")
        assert one == listing["data"][0]
    async with served.client.get("/v3/models/nope") as response:
        assert response.status == 404
        schemas.validate_answer("/v3/models/{name}", await response.json(), method="get", status="404")


async def test_a_model_without_parsers_says_null(serve) -> None:
    fast = fast_model(reply("Hi"))
    fast.model.tool_format = fast.model.reasoning_format = None
    served = await serve(fast)
    async with served.client.get(f"/v3/models/{fast.model.name}") as response:
        extension = (await response.json())["ovserve"]
        assert (extension["tool_parser"], extension["reasoning_parser"]) == (None, None)


# -- Ollama's native API ------------------------------------------------------------------------

NDJSON = "application/x-ndjson"
OLLAMA_CHAT, OLLAMA_GENERATE = "/api/chat", "/api/generate"
EMBED_MODEL = "fast-embed"
OLLAMA_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}

# Each script with the requests it answers: (path, body without "model" and "stream").
OLLAMA_CASES: dict[str, tuple[Script, list[tuple[str, dict[str, Any]]]]] = {
    "text": (
        reply("Hello", " there"),
        [
            (OLLAMA_CHAT, {"messages": MESSAGES, "options": {"temperature": 0.2, "seed": 7}, "keep_alive": "5m"}),
            (OLLAMA_GENERATE, {"prompt": "Hi", "system": "Be brief."}),
            (OLLAMA_GENERATE, {"prompt": "Hi", "raw": True}),
        ],
    ),
    "reasoning": (
        thinks_then_answers,
        [(OLLAMA_CHAT, {"messages": MESSAGES, "think": True}), (OLLAMA_GENERATE, {"prompt": "Hi", "think": "low"})],
    ),
    "tool call": (
        reply(*CALL),
        [
            (OLLAMA_CHAT, {"messages": MESSAGES, "tools": [OLLAMA_TOOL]}),
            (OLLAMA_CHAT, {"messages": MESSAGES, "tools": [OLLAMA_TOOL], "tool_choice": "get_weather"}),
        ],
    ),
    "max tokens": (
        reply("Hel", "lo", finish="length"),
        [(OLLAMA_CHAT, {"messages": MESSAGES, "options": {"num_predict": 2}}), (OLLAMA_GENERATE, {"prompt": "Hi"})],
    ),
    "nothing said": (reply(""), [(OLLAMA_CHAT, {"messages": MESSAGES}), (OLLAMA_GENERATE, {"prompt": "Hi"})]),
}


async def _ollama_post(served: Served, path: str, body: dict[str, Any]) -> tuple[int, str, Any]:
    """(status, content type, JSON body or the NDJSON stream's lines)."""
    async with served.client.post(path, json=body) as response:
        text = await response.text()
        lines = [json.loads(line) for line in text.splitlines()] if response.content_type == NDJSON else None
        return response.status, response.content_type, lines if lines is not None else json.loads(text)


async def _ollama_answers(served: Served, schemas: ServedSchemas, path: str, body: dict[str, Any]) -> list[Any]:
    """POST with "stream" false, then without it (Ollama streams by default); the unary answer and
    every line checked. Returns the unary answer and the lines."""
    status, media, unary = await _ollama_post(served, path, {"model": MODEL, **body, "stream": False})
    assert (status, media) == (200, "application/json"), unary
    schemas.validate_answer(path, unary)
    status, media, lines = await _ollama_post(served, path, {"model": MODEL, **body})
    assert (status, media) == (200, NDJSON), lines
    assert [line["done"] for line in lines][-1] is True
    for line in lines:
        schemas.validate_answer(path, line, NDJSON)
    return [unary, *lines]


@pytest.mark.parametrize("case", OLLAMA_CASES)
async def test_every_ollama_generation_answer_and_line_matches_the_served_openapi_document(serve, case: str) -> None:
    script, requests = OLLAMA_CASES[case]
    fast = fast_model(script)
    fast.model.reasoning_format = reasoning_parser("qwen3")
    served = await serve(fast)
    schemas = await _document(served)
    for path, body in requests:
        await _ollama_answers(served, schemas, path, body)


async def test_ollamas_load_and_unload_answers_are_json_whatever_stream_says(serve) -> None:
    served = await serve(fast_model(reply("Hi")))
    schemas = await _document(served)
    for path, nothing in ((OLLAMA_CHAT, {"messages": []}), (OLLAMA_GENERATE, {})):
        for keep_alive, done_reason in (("10m", "load"), (0, "unload")):
            status, media, answer = await _ollama_post(
                served, path, {"model": MODEL, **nothing, "keep_alive": keep_alive}
            )
            assert (status, media, answer["done_reason"]) == (200, "application/json", done_reason), answer
            schemas.validate_answer(path, answer)
            with pytest.raises(jsonschema.ValidationError):  # not a line a stream ends with
                schemas.validate_answer(path, answer, NDJSON)


@pytest.mark.parametrize(("path", "body"), [(OLLAMA_CHAT, {"messages": MESSAGES}), (OLLAMA_GENERATE, {"prompt": "Hi"})])
async def test_an_ollama_stream_that_fails_ends_with_an_error_line_the_document_describes(
    serve, path: str, body: dict[str, Any]
) -> None:
    served = await serve(fast_model(dies_after_hello))
    schemas = await _document(served)
    status, media, lines = await _ollama_post(served, path, {"model": MODEL, **body})
    assert (status, media) == (200, NDJSON)
    assert set(lines[-1]) == {"error"} and lines[0]["done"] is False
    for line in lines:
        schemas.validate_answer(path, line, NDJSON)


async def test_the_documented_ollama_lines_tell_a_piece_of_output_from_the_last_line(serve) -> None:
    served = await serve(fast_model(reply("Hello", " there")))
    schemas = await _document(served)
    piece, *_, last = (await _ollama_answers(served, schemas, OLLAMA_CHAT, {"messages": MESSAGES}))[1:]
    with pytest.raises(jsonschema.ValidationError):  # a piece carries no statistics
        schemas.validate_answer(OLLAMA_CHAT, {**piece, "eval_count": 1}, NDJSON)
    with pytest.raises(jsonschema.ValidationError):  # the last line carries all of them
        schemas.validate_answer(OLLAMA_CHAT, {key: value for key, value in last.items() if key != "eval_count"}, NDJSON)
    with pytest.raises(jsonschema.ValidationError):
        schemas.validate_answer(OLLAMA_CHAT, {**last, "surprise": 1})


async def test_ollamas_embeddings_listings_and_errors_match_the_served_openapi_document(serve) -> None:
    served = await serve(fast_model(reply("Hi")), fast_model(name=EMBED_MODEL, task="embeddings"))
    schemas = await _document(served)
    for body in ({"input": "hello"}, {"input": ["hello", "world"], "truncate": False, "keep_alive": -1}):
        status, _, answer = await _ollama_post(served, "/api/embed", {"model": EMBED_MODEL, **body})
        assert status == 200, answer
        schemas.validate_answer("/api/embed", answer)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        assert [len(vector) for vector in answer["embeddings"]] == [4] * len(inputs)
    status, _, answer = await _ollama_post(
        served, "/api/embeddings", {"model": f"{EMBED_MODEL}:latest", "prompt": "hi"}
    )
    assert status == 200, answer
    schemas.validate_answer("/api/embeddings", answer)
    for name in (MODEL, EMBED_MODEL):
        status, _, shown = await _ollama_post(served, "/api/show", {"model": name})
        assert status == 200, shown
        schemas.validate_answer("/api/show", shown)
    for path in ("/api/tags", "/api/ps", "/api/version"):
        async with served.client.get(path) as response:
            assert response.status == 200
            schemas.validate_answer(path, await response.json(), method="get")
    errors = [
        (OLLAMA_CHAT, {"model": "llama9", "messages": MESSAGES}, "404"),
        ("/api/embed", {"model": MODEL, "input": "hi"}, "400"),  # not an embeddings model
        ("/api/show", {"name": "llama9"}, "404"),
        ("/api/pull", {"model": "llama3"}, "400"),
    ]
    for path, body, expected in errors:
        status, _, error = await _ollama_post(served, path, body)
        assert str(status) == expected, error
        schemas.validate_answer(path, error, status=expected)
