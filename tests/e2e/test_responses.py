"""The Responses API end to end: the openai SDK's ``responses`` client -> real HTTP -> the real engine.

tiny-llm is random: greedy output is deterministic, and a forced tool call (``tool_choice``
required) makes the model write a valid call, so function calling round trips are testable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests import images
from tests.conftest import Server, start_server
from tests.e2e.test_chat_completions import prompt_token_count
from tests.openai_schema import validate
from tests.postgres import PostgresServer

GREEDY: dict[str, Any] = {"temperature": 0, "max_output_tokens": 12}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def sse_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(event name, payload) of each named SSE event, in order."""
    events, name = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            events.append((name, json.loads(line.removeprefix("data: "))))
    return events


def test_sdk_create_returns_output_text_and_the_prompt_token_count(client: openai.OpenAI, tiny_llm: Path) -> None:
    response = client.responses.create(model="tiny-llm", input="Write a poem.", instructions="Be brief.", **GREEDY)
    assert response.status in ("completed", "incomplete") and response.id.startswith("resp_")
    assert response.output_text
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write a poem."}]
    assert response.usage is not None
    assert response.usage.input_tokens == prompt_token_count(tiny_llm, messages)
    assert 1 <= response.usage.output_tokens <= 12


def test_sdk_stream_helpers_give_the_unary_text(client: openai.OpenAI) -> None:
    unary = client.responses.create(model="tiny-llm", input="Tell me about the sea.", **GREEDY)
    deltas = []
    with client.responses.stream(model="tiny-llm", input="Tell me about the sea.", **GREEDY) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        if unary.status == "completed":
            final = stream.get_final_response()
            assert final.output_text == unary.output_text
    assert "".join(deltas) == unary.output_text


def test_raw_responses_and_events_match_openais_schema(server: Server) -> None:
    for extra in ({}, {"tools": [WEATHER], "tool_choice": "required", "max_output_tokens": 100}):
        body = {"model": "tiny-llm", "input": "Weather in Paris?", **GREEDY, **extra}
        unary = httpx.post(f"{server.url}/v3/responses", json=body, timeout=60)
        assert unary.status_code == 200, unary.text
        validate(unary.json(), "Response")
        with httpx.stream("POST", f"{server.url}/v1/responses", json={**body, "stream": True}, timeout=60) as streamed:
            assert streamed.headers["content-type"].startswith("text/event-stream")
            events = sse_events(streamed)
        for name, event in events:
            assert name == event["type"]
            validate(event, "ResponseStreamEvent")
        assert [event["sequence_number"] for _, event in events] == list(range(len(events)))
        assert [item["type"] for item in events[-1][1]["response"]["output"]] == [
            item["type"] for item in unary.json()["output"]
        ]


def test_function_call_round_trip_by_id_and_by_resending_the_history(client: openai.OpenAI) -> None:
    asked = client.responses.create(
        model="tiny-llm", input="Weather in Paris?", tools=[WEATHER], tool_choice="required", temperature=0,
        max_output_tokens=100,
    )  # fmt: skip
    (call,) = [item for item in asked.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] in ("Paris", "Rome")
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'}
    by_id = client.responses.create(
        model="tiny-llm", previous_response_id=asked.id, input=[result], tools=[WEATHER], **GREEDY
    )
    assert by_id.output_text and by_id.previous_response_id == asked.id
    history = [{"role": "user", "content": "Weather in Paris?"}, *[item.model_dump() for item in asked.output], result]
    resent = client.responses.create(model="tiny-llm", input=history, tools=[WEATHER], **GREEDY)  # type: ignore[arg-type]
    assert by_id.usage is not None and resent.usage is not None
    assert by_id.usage.input_tokens == resent.usage.input_tokens
    assert by_id.output_text == resent.output_text  # same prompt, greedy: same answer


def test_a_previous_response_id_chain_renders_the_same_prompt_as_the_full_history(client: openai.OpenAI) -> None:
    history: list[Any] = []
    previous = None
    for turn in ("First question.", "Second question.", "Third question."):
        response = client.responses.create(model="tiny-llm", input=turn, previous_response_id=previous, **GREEDY)  # type: ignore[arg-type]
        history.append({"role": "user", "content": turn})
        resent = client.responses.create(model="tiny-llm", input=history, store=False, **GREEDY)
        assert response.usage is not None and resent.usage is not None
        assert response.usage.input_tokens == resent.usage.input_tokens, turn
        history.extend(item.model_dump() for item in response.output)
        previous = response.id
    assert client.responses.retrieve(previous).id == previous


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_stored_responses_survive_a_restart_and_respect_the_count_bound(
    tiny_llm: Path, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    env: dict[str, str] = {}
    if backend == "sqlite":
        database = str(tmp_path / "responses.db")
    else:  # the password from the environment, as a deployment passes it, not in the URL
        postgres: PostgresServer = request.getfixturevalue("postgres")
        database = postgres.new_database().replace(f":{postgres.password}@", "@")
        env["PGPASSWORD"] = postgres.password
    args = ("--responses_store", database, "--responses_store_max_count", "2")
    server = start_server(tmp_path, tiny_llm, *args, env=env)
    try:
        client = server.client()
        first = client.responses.create(model="tiny-llm", input="one", **GREEDY)
        kept = [client.responses.create(model="tiny-llm", input=text, **GREEDY) for text in ("two", "three")]
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)  # the least recently used of three, with room for two
    finally:
        server.stop()
    restarted = start_server(tmp_path, tiny_llm, *args, env=env)
    try:
        client = restarted.client()
        assert client.responses.retrieve(kept[1].id).output_text == kept[1].output_text
        continued = client.responses.create(model="tiny-llm", input="four", previous_response_id=kept[1].id, **GREEDY)
        assert continued.status in ("completed", "incomplete")
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(kept[0].id)  # now the least recently used: "three" was read and continued
        client.responses.delete(kept[1].id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(kept[1].id)
        assert client.responses.retrieve(continued.id).previous_response_id == kept[1].id
    finally:
        restarted.stop()


def test_a_vlm_takes_input_image_under_the_media_policy(vlm_server: Server) -> None:
    client = vlm_server.client()
    question = {"type": "input_text", "text": "What is in this picture?"}
    red = {"type": "input_image", "image_url": images.data_url(images.solid(images.RED))}
    text_only = client.responses.create(model="tiny-vlm", input=[{"role": "user", "content": [question]}], **GREEDY)  # type: ignore[arg-type]
    with_image = client.responses.create(
        model="tiny-vlm", input=[{"role": "user", "content": [question, red]}], **GREEDY
    )  # type: ignore[arg-type]
    assert with_image.usage is not None and text_only.usage is not None
    assert with_image.usage.input_tokens > text_only.usage.input_tokens
    evil = {"type": "input_image", "image_url": "http://127.0.0.2:9/img/red.png"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="tiny-vlm", input=[{"role": "user", "content": [question, evil]}], **GREEDY)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "input.0.content.1.image_url"  # type: ignore[index]


def test_the_bad_input_table_gets_its_4xx_from_a_real_server_and_leaves_no_engine_request(server: Server) -> None:
    from tests.fast.test_responses_bad_input import CASES

    checked = 0
    for name, body, status, param in CASES:
        if isinstance(body, bytes) or "context" in name:  # the context cases are sized for the fast model
            continue
        payload = {key: value for key, value in {"model": "tiny-llm", **body}.items() if value is not None}
        response = httpx.post(f"{server.url}/v3/responses", json=payload, timeout=30)
        assert (response.status_code, response.json()["error"]["param"]) == (status, param), name
        checked += 1
    assert checked >= 30
    assert server.metric("ovserve_inflight_requests") == 0


KEY_A, KEY_B = "sk-responses-owner-a", "sk-responses-owner-b"


@pytest.fixture(scope="module")
def two_key_server(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("two-keys"), tiny_llm, "--api_key", KEY_A, "--api_key", KEY_B)
    yield running
    running.stop()


def _keyed(server: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v3", api_key=key, max_retries=0)


def _not_found(server: Server, method: str, path: str, key: str, body: Any = None) -> dict[str, Any]:
    """The 404 body of a request with ``key``, the id in it replaced by ID (so two can be compared)."""
    answer = httpx.request(
        method, f"{server.url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    response_id = (body or {}).get("previous_response_id") or path.rsplit("/", 1)[-1]
    return {**error, "message": error["message"].replace(response_id, "ID")}


def test_a_stored_response_belongs_to_the_key_that_created_it(two_key_server: Server) -> None:
    owner, other = _keyed(two_key_server, KEY_A), _keyed(two_key_server, KEY_B)
    created = owner.responses.create(model="tiny-llm", input="Keep this between us.", **GREEDY)
    unknown = "resp_" + "0" * 32
    path, nowhere = f"/v3/responses/{created.id}", f"/v3/responses/{unknown}"
    # Key B gets exactly the unknown-id answer: the id tells it nothing.
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(created.id)
    assert _not_found(two_key_server, "GET", path, KEY_B) == _not_found(two_key_server, "GET", nowhere, KEY_B)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(created.id)
    assert _not_found(two_key_server, "DELETE", path, KEY_B) == _not_found(two_key_server, "DELETE", nowhere, KEY_B)
    with pytest.raises(openai.NotFoundError) as refused:
        other.responses.create(model="tiny-llm", input="And?", previous_response_id=created.id, **GREEDY)
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]
    for stream in (False, True):
        body = {"model": "tiny-llm", "input": "And?", "stream": stream}
        continued = _not_found(
            two_key_server, "POST", "/v3/responses", KEY_B, {**body, "previous_response_id": created.id}
        )
        fresh = _not_found(two_key_server, "POST", "/v3/responses", KEY_B, {**body, "previous_response_id": unknown})
        assert continued == fresh
    # Key A still has it, untouched by B's delete, by either header, and can continue it.
    assert owner.responses.retrieve(created.id).output_text == created.output_text
    azure = httpx.get(f"{two_key_server.url}{path}", headers={"api-key": KEY_A}, timeout=30)
    assert azure.status_code == 200 and azure.json()["id"] == created.id
    follow_up = owner.responses.create(model="tiny-llm", input="And?", previous_response_id=created.id, **GREEDY)
    assert follow_up.previous_response_id == created.id
    # Key B's own responses are B's: A gets the 404 on them too.
    theirs = other.responses.create(model="tiny-llm", input="Mine.", **GREEDY)
    with pytest.raises(openai.NotFoundError):
        owner.responses.retrieve(theirs.id)
    owner.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        owner.responses.retrieve(created.id)
    assert other.responses.retrieve(theirs.id).id == theirs.id


def test_without_keys_every_caller_shares_the_stored_responses(server: Server) -> None:
    # A regression guard, not a new behaviour: an open server ignores whatever key a client sends.
    first, second = _keyed(server, "sk-anything"), _keyed(server, "sk-something-else")
    created = first.responses.create(model="tiny-llm", input="Shared.", **GREEDY)
    assert second.responses.retrieve(created.id).id == created.id
    continued = second.responses.create(model="tiny-llm", input="Yes.", previous_response_id=created.id, **GREEDY)
    assert continued.previous_response_id == created.id
    second.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        first.responses.retrieve(created.id)
