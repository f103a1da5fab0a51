"""Bad Anthropic Messages requests get a 4xx in Anthropic's error shape, naming the JSON path of the
offending value, and no engine work."""

from __future__ import annotations

from typing import Any

import pytest

from tests.anthropic_schema import validate
from tests.fast.harness import MODEL, fast_model
from tests.fast.scripted_engine import reply

USER = {"role": "user", "content": "hi"}
TOOL = {"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def image(source: dict[str, Any]) -> dict[str, Any]:
    return {"type": "image", "source": source}


# (case, body (model and max_tokens added unless the body sets them; None removes one), status,
# Anthropic error type, the path the message starts with)
CASES: list[tuple[str, dict[str, Any] | bytes, int, str, str | None]] = [
    ("invalid json", b'{"model": "fast-model", "messages": [', 400, "invalid_request_error", None),
    ("json array body", b"[1, 2]", 400, "invalid_request_error", None),
    ("missing max_tokens", {"max_tokens": None, "messages": [USER]}, 400, "invalid_request_error", "max_tokens"),
    ("max_tokens zero", {"max_tokens": 0, "messages": [USER]}, 400, "invalid_request_error", "max_tokens"),
    ("max_tokens a string", {"max_tokens": "10", "messages": [USER]}, 400, "invalid_request_error", "max_tokens"),
    ("missing messages", {}, 400, "invalid_request_error", "messages"),
    ("empty messages", {"messages": []}, 400, "invalid_request_error", "messages"),
    ("messages not a list", {"messages": "hi"}, 400, "invalid_request_error", "messages"),
    ("missing model", {"model": None, "messages": [USER]}, 400, "invalid_request_error", "model"),
    ("unknown model", {"model": "claude-9", "messages": [USER]}, 404, "not_found_error", None),
    (
        "first message from the assistant",
        {"messages": [{"role": "assistant", "content": "hi"}, USER]},
        400,
        "invalid_request_error",
        "messages.0.role",
    ),
    (
        "unknown role",
        {"messages": [{"role": "tool", "content": "hi"}]},
        400,
        "invalid_request_error",
        "messages.0.role",
    ),
    (
        "content a number",
        {"messages": [{"role": "user", "content": 42}]},
        400,
        "invalid_request_error",
        "messages.0.content",
    ),
    ("empty content list", {"messages": [user()]}, 400, "invalid_request_error", "messages.0.content"),
    (
        "unknown block type",
        {"messages": [user({"type": "document", "source": {"type": "text", "data": "x"}})]},
        400,
        "invalid_request_error",
        "messages.0.content.0.type",
    ),
    ("block not an object", {"messages": [user("hi")]}, 400, "invalid_request_error", "messages.0.content.0"),
    (
        "text block without text",
        {"messages": [user({"type": "text"})]},
        400,
        "invalid_request_error",
        "messages.0.content.0.text",
    ),
    (
        "image of an unsupported type",
        {"messages": [user(image({"type": "base64", "media_type": "image/bmp", "data": PNG}))]},
        400,
        "invalid_request_error",
        "messages.0.content.0.source.media_type",
    ),
    (
        "image from the files API",
        {"messages": [user(image({"type": "file", "file_id": "file_1"}))]},
        400,
        "invalid_request_error",
        "messages.0.content.0.source.type",
    ),
    (
        "image without data",
        {"messages": [user(image({"type": "base64", "media_type": "image/png"}))]},
        400,
        "invalid_request_error",
        "messages.0.content.0.source.data",
    ),
    (
        "image to a text-only model",
        {"messages": [user(image({"type": "base64", "media_type": "image/png", "data": PNG}))]},
        400,
        "invalid_request_error",
        "messages.0.content",
    ),
    (
        "tool_result without a tool_use before it",
        {"messages": [user({"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"})]},
        400,
        "invalid_request_error",
        "messages.0.content.0.tool_use_id",
    ),
    (
        "tool_result answering another call",
        {
            "messages": [
                USER,
                {"role": "assistant", "content": [CALL]},
                user({"type": "tool_result", "tool_use_id": "toolu_2", "content": "sunny"}),
            ],
            "tools": [TOOL],
        },
        400,
        "invalid_request_error",
        "messages.2.content.0.tool_use_id",
    ),
    (
        "tool_use in a user message",
        {"messages": [user(CALL)]},
        400,
        "invalid_request_error",
        "messages.0.content.0.type",
    ),
    (
        "tool_result in an assistant message",
        {
            "messages": [
                USER,
                {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
                USER,
            ]
        },
        400,
        "invalid_request_error",
        "messages.1.content.0.type",
    ),
    (
        "tool_use without an id",
        {"messages": [USER, {"role": "assistant", "content": [{**CALL, "id": None}]}, USER]},
        400,
        "invalid_request_error",
        "messages.1.content.0.id",
    ),
    (
        "tool_use input not an object",
        {"messages": [USER, {"role": "assistant", "content": [{**CALL, "input": "Paris"}]}, USER]},
        400,
        "invalid_request_error",
        "messages.1.content.0.input",
    ),
    (
        "final assistant message with a tool_use",
        {"messages": [USER, {"role": "assistant", "content": [CALL]}], "tools": [TOOL]},
        400,
        "invalid_request_error",
        "messages.1.content.0.type",
    ),
    ("system a number", {"system": 7, "messages": [USER]}, 400, "invalid_request_error", "system"),
    (
        "system block not text",
        {"system": [image({"type": "url", "url": "http://x/a.png"})], "messages": [USER]},
        400,
        "invalid_request_error",
        "system.0",
    ),
    (
        "system message with an image",
        {"messages": [USER, {"role": "system", "content": [image({"type": "url", "url": "http://x/a.png"})]}]},
        400,
        "invalid_request_error",
        "messages.1.content.0",
    ),
    (
        "stop_sequences a string",
        {"messages": [USER], "stop_sequences": "END"},
        400,
        "invalid_request_error",
        "stop_sequences",
    ),
    (
        "empty stop sequence",
        {"messages": [USER], "stop_sequences": [""]},
        400,
        "invalid_request_error",
        "stop_sequences.0",
    ),
    ("temperature above 1", {"messages": [USER], "temperature": 1.5}, 400, "invalid_request_error", "temperature"),
    ("top_p zero", {"messages": [USER], "top_p": 0}, 400, "invalid_request_error", "top_p"),
    ("top_k negative", {"messages": [USER], "top_k": -1}, 400, "invalid_request_error", "top_k"),
    ("stream not a bool", {"messages": [USER], "stream": "yes"}, 400, "invalid_request_error", "stream"),
    (
        "server tool",
        {"messages": [USER], "tools": [TOOL, {"type": "web_search_20250305", "name": "web_search"}]},
        400,
        "invalid_request_error",
        "tools.1",
    ),
    (
        "tool without input_schema",
        {"messages": [USER], "tools": [{"name": "f"}]},
        400,
        "invalid_request_error",
        "tools.0.input_schema",
    ),
    (
        "tool input_schema not an object schema",
        {"messages": [USER], "tools": [{"name": "f", "input_schema": {"type": "array"}}]},
        400,
        "invalid_request_error",
        "tools.0.input_schema",
    ),
    (
        "tool name with spaces",
        {"messages": [USER], "tools": [{**TOOL, "name": "get weather"}]},
        400,
        "invalid_request_error",
        "tools.0.name",
    ),
    (
        "tool_choice any without tools",
        {"messages": [USER], "tool_choice": {"type": "any"}},
        400,
        "invalid_request_error",
        None,
    ),
    (
        "tool_choice naming no offered tool",
        {"messages": [USER], "tools": [TOOL], "tool_choice": {"type": "tool", "name": "get_time"}},
        400,
        "invalid_request_error",
        None,
    ),
    (
        "tool_choice of an unknown type",
        {"messages": [USER], "tools": [TOOL], "tool_choice": {"type": "required"}},
        400,
        "invalid_request_error",
        "tool_choice.type",
    ),
    (
        "thinking budget below 1024",
        {"messages": [USER], "thinking": {"type": "enabled", "budget_tokens": 100}},
        400,
        "invalid_request_error",
        "thinking.budget_tokens",
    ),
    (
        "thinking budget not below max_tokens",
        {"max_tokens": 2000, "messages": [USER], "thinking": {"type": "enabled", "budget_tokens": 2000}},
        400,
        "invalid_request_error",
        None,
    ),
    (
        "thinking of an unknown type",
        {"messages": [USER], "thinking": {"type": "max"}},
        400,
        "invalid_request_error",
        "thinking.type",
    ),
    ("metadata not an object", {"messages": [USER], "metadata": "me"}, 400, "invalid_request_error", "metadata"),
    (
        "unknown effort",
        {"messages": [USER], "output_config": {"effort": "extreme"}},
        400,
        "invalid_request_error",
        "output_config.effort",
    ),
    (
        "output format of an unknown type",
        {"messages": [USER], "output_config": {"format": {"type": "regex", "pattern": "a+"}}},
        400,
        "invalid_request_error",
        "output_config.format.type",
    ),
    (
        "output format and a forced tool call",
        {
            "messages": [USER],
            "tools": [TOOL],
            "tool_choice": {"type": "any"},
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        },
        400,
        "invalid_request_error",
        "output_config.format",
    ),
]


async def _post(served: Any, path: str, body: dict[str, Any] | bytes) -> tuple[int, Any]:
    if isinstance(body, bytes):
        async with served.client.post(path, data=body, headers={"Content-Type": "application/json"}) as response:
            return response.status, await response.json()
    payload = {key: value for key, value in {"model": MODEL, "max_tokens": 16, **body}.items() if value is not None}
    async with served.client.post(path, json=payload, headers={"anthropic-version": "2023-06-01"}) as response:
        return response.status, await response.json()


@pytest.mark.parametrize(
    ("body", "status", "error_type", "path"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
async def test_bad_messages_request_is_a_4xx_in_anthropics_shape(
    serve, body: Any, status: int, error_type: str, path: str | None
) -> None:
    served = await serve(fast_model(reply("never")))
    answer_status, answer = await _post(served, "/v1/messages", body)
    assert answer_status == status, answer
    validate(answer, "ErrorResponse")
    assert answer["error"]["type"] == error_type, answer
    if path is not None:
        assert answer["error"]["message"].startswith(f"{path}:") or answer["error"]["message"].startswith(path), answer
    assert served.engine.adds() == []  # refused before any engine work


def test_the_table_has_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


async def test_a_prompt_longer_than_the_context_reads_as_anthropics_prompt_is_too_long(serve) -> None:
    served = await serve(fast_model(reply("never"), context_length=256))
    status, answer = await _post(served, "/v1/messages", {"messages": [{"role": "user", "content": "x" * 400}]})
    assert status == 400
    validate(answer, "ErrorResponse")
    message = answer["error"]["message"]
    # Clients parse exactly this sentence (the fast tokenizer: one token per character).
    assert message.startswith("prompt is too long: ") and message.endswith(" tokens > 255 maximum"), message
    assert int(message.split()[4]) > 400
    assert served.engine.adds() == []


async def test_count_tokens_refuses_bad_input_the_same_way(serve) -> None:
    served = await serve(fast_model(reply("never")))
    for body, path in (
        ({"messages": []}, "messages"),
        ({"messages": [user(CALL)]}, "messages.0.content.0.type"),
        ({"messages": [USER], "tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools.0"),
    ):
        status, answer = await _post(served, "/v1/messages/count_tokens", body)
        assert status == 400, answer
        validate(answer, "ErrorResponse")
        assert answer["error"]["message"].startswith(path), answer


async def test_a_good_request_after_bad_ones_is_served(serve) -> None:
    served = await serve(fast_model(reply("fine")))
    for _, body, status, _, _ in CASES:
        if isinstance(body, dict):
            assert (await _post(served, "/v1/messages", body))[0] == status
    status, answer = await _post(served, "/v1/messages", {"messages": [USER]})
    assert status == 200 and answer["content"] == [{"type": "text", "text": "fine"}]
    assert len(served.engine.adds()) == 1
