"""Anthropic's Messages API end to end: the ``anthropic`` SDK, unchanged, against the demo models.

One server on tiny-llm with the alias ``claude-*`` (clients send their own model names), the
reasoning parser of Qwen3 (``<think>``) and the Hermes tool calls the demo template writes. Every
body and event is checked against Anthropic's shapes (tests/fixtures/anthropic).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests import images
from tests.anthropic_schema import validate, validate_event
from tests.conftest import Server, start_server

MODEL = "claude-opus-4-8"  # an alias of tiny-llm (Claude Code's default model)
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# The SDK keeps temperature out of messages.stream(): sent in the body, it makes both calls greedy.
GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def server(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("anthropic"), tiny_llm, "--model_alias", "claude-*", "--reasoning_parser", "qwen3"
    )
    yield running
    running.stop()


@pytest.fixture
def client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


def raw(server: Server, body: dict[str, Any], path: str = "/v1/messages") -> httpx.Response:
    headers = {"anthropic-version": "2023-06-01"}
    return httpx.post(f"{server.url}{path}", json={"model": MODEL, **body}, headers=headers, timeout=120)


def events(response: httpx.Response) -> list[dict[str, Any]]:
    found = []
    for block in response.text.split("\n\n"):
        if block.strip():
            name, data = block.split("\n", 1)
            event = json.loads(data.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            validate_event(event)
            found.append(event)
    return found


def test_create_answers_a_message_of_anthropics_shape(client: anthropic.Anthropic, server: Server) -> None:
    message = client.messages.create(model=MODEL, max_tokens=12, system="Be brief.", messages=ASK)  # type: ignore[arg-type]
    assert message.model == MODEL and message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 12
    answer = raw(server, {"max_tokens": 12, "messages": ASK})
    assert answer.status_code == 200
    validate(answer.json(), "Message")


def test_stream_accumulates_as_the_unary_message_and_events_have_anthropics_shape(
    client: anthropic.Anthropic, server: Server
) -> None:
    with client.messages.stream(model=MODEL, max_tokens=12, messages=ASK, extra_body=GREEDY) as stream:  # type: ignore[arg-type]
        texts = list(stream.text_stream)
        streamed = stream.get_final_message()
    unary = client.messages.create(model=MODEL, max_tokens=12, messages=ASK, extra_body=GREEDY)  # type: ignore[arg-type]
    assert "".join(texts) == streamed.content[0].text  # type: ignore[union-attr]
    assert [block.model_dump() for block in streamed.content] == [block.model_dump() for block in unary.content]
    assert (streamed.stop_reason, streamed.usage.output_tokens) == (unary.stop_reason, unary.usage.output_tokens)
    kinds = [event["type"] for event in events(raw(server, {"max_tokens": 12, "messages": ASK, "stream": True}))]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert "content_block_delta" in kinds


def test_a_tool_round_trip_with_tool_choice_any(client: anthropic.Anthropic) -> None:
    forced = client.messages.create(
        model=MODEL,
        max_tokens=60,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=ASK,  # type: ignore[arg-type,list-item]
    )
    (call,) = [block for block in forced.content if block.type == "tool_use"]
    assert forced.stop_reason == "tool_use" and call.name == "get_weather" and call.input["city"] in ("Paris", "Rome")  # type: ignore[index]
    with client.messages.stream(
        model=MODEL,
        max_tokens=60,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=ASK,  # type: ignore[arg-type,list-item]
    ) as stream:
        streamed = stream.get_final_message()
    assert [block.type for block in streamed.content] == ["tool_use"] and streamed.stop_reason == "tool_use"
    history = [
        *ASK,
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in forced.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"}]},
    ]
    answer = client.messages.create(model=MODEL, max_tokens=12, tools=[WEATHER], messages=history)  # type: ignore[arg-type,list-item]
    assert answer.content and answer.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_thinking_streams_as_a_thinking_block(client: anthropic.Anthropic, server: Server) -> None:
    # The answer starts inside the reasoning block (a final assistant message is the start of
    # the answer): a random model never closes it, so all it writes is thinking.
    messages: list[Any] = [*ASK, {"role": "assistant", "content": "<think>"}]
    with client.messages.stream(model=MODEL, max_tokens=16, thinking={"type": "adaptive"}, messages=messages) as stream:
        message = stream.get_final_message()
    (thinking,) = message.content
    assert thinking.type == "thinking" and thinking.thinking and thinking.signature
    body = {"max_tokens": 16, "thinking": {"type": "adaptive"}, "messages": messages, "stream": True}
    deltas = {event["delta"]["type"] for event in events(raw(server, body)) if event["type"] == "content_block_delta"}
    assert deltas == {"thinking_delta", "signature_delta"}


def test_count_tokens_uses_the_models_template_and_tools(client: anthropic.Anthropic) -> None:
    plain = client.messages.count_tokens(model=MODEL, messages=ASK)  # type: ignore[arg-type]
    with_tools = client.messages.count_tokens(model=MODEL, messages=ASK, tools=[WEATHER])  # type: ignore[arg-type,list-item]
    created = client.messages.create(model=MODEL, max_tokens=1, messages=ASK)  # type: ignore[arg-type]
    assert plain.input_tokens == created.usage.input_tokens
    assert with_tools.input_tokens > plain.input_tokens + 20  # the tools block of the template


def test_the_first_repeat_of_a_request_reads_the_cache(client: anthropic.Anthropic) -> None:
    system = f"Session {uuid.uuid4().hex}. " + "You answer questions about rivers and mountains. " * 20
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 4, "system": system, "messages": ASK}
    first = client.messages.create(**params)
    again = client.messages.create(**params)
    assert (first.usage.cache_read_input_tokens or 0) < 64
    whole_blocks = min(again.usage.input_tokens // 32 * 32, again.usage.input_tokens - 1)
    assert again.usage.cache_read_input_tokens == whole_blocks
    assert again.usage.cache_creation_input_tokens == 0


def test_a_prompt_longer_than_the_context_is_anthropics_prompt_is_too_long(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "rivers " * 3000}])
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("prompt is too long: ") and error["message"].endswith(" tokens > 2047 maximum")


def test_max_tokens_over_the_context_is_clamped(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model=MODEL, max_tokens=64000, messages=ASK) as stream:  # type: ignore[arg-type]
        message = stream.get_final_message()
    assert message.stop_reason in ("end_turn", "max_tokens")


def test_errors_and_the_model_list_are_anthropics(client: anthropic.Anthropic, server: Server) -> None:
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="gpt-4o", max_tokens=8, messages=ASK)  # type: ignore[arg-type]
    validate(unknown.value.body, "ErrorResponse")
    assert "tiny-llm" in unknown.value.body["error"]["message"]  # type: ignore[index]
    models = client.models.list()
    assert [model.id for model in models.data] == ["tiny-llm"]
    for model in httpx.get(f"{server.url}/v1/models", headers={"anthropic-version": "2023-06-01"}).json()["data"]:
        validate(model, "ModelInfo")


def test_images_reach_a_vlm_under_the_media_policy(vlm_server: Server) -> None:
    client = anthropic.Anthropic(base_url=vlm_server.url, api_key="unused", max_retries=0)

    def ask(source: dict[str, Any]) -> anthropic.types.Message:
        content = [{"type": "text", "text": "What colour?"}, {"type": "image", "source": source}]
        return client.messages.create(model="tiny-vlm", max_tokens=4, messages=[{"role": "user", "content": content}])  # type: ignore[arg-type,misc]

    png = base64.b64encode(images.solid(images.RED)).decode()
    answer = ask({"type": "base64", "media_type": "image/png", "data": png})
    assert answer.content and answer.usage.input_tokens > 0
    for source, wording in (
        ({"type": "url", "url": "http://media.invalid/cat.png"}, "messages.0.content.1.source"),  # not an allowed host
        ({"type": "base64", "media_type": "image/png", "data": base64.b64encode(b"not a png").decode()}, "messages.0"),
    ):
        with pytest.raises(anthropic.BadRequestError) as refused:
            ask(source)
        validate(refused.value.body, "ErrorResponse")
        assert refused.value.body["error"]["message"].startswith(wording), refused.value.body  # type: ignore[index]
