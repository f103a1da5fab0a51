"""Bad Responses requests get a 4xx in OpenAI's error shape, ``param`` the JSON path, and no engine work."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fast.harness import MODEL, fast_model
from tests.fast.scripted_engine import reply
from tests.openai_schema import validate

TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
USER = {"role": "user", "content": "hi"}


def image(url: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "input_text", "text": "what is it?"}, {"type": "input_image", "image_url": url}],
    }


CASES: list[tuple[str, dict[str, Any] | bytes, int, str | None]] = [
    ("invalid json", b'{"model": "fast-model", "input": [', 400, None),
    ("json array body", b"[1, 2]", 400, None),
    ("missing input", {}, 400, "input"),
    ("input not a string or list", {"input": 42}, 400, "input"),
    ("empty input list", {"input": []}, 400, "input"),
    ("missing model", {"model": None, "input": "hi"}, 400, "model"),
    ("unknown model", {"model": "gpt-9", "input": "hi"}, 404, "model"),
    ("instructions not a string", {"input": "hi", "instructions": ["be", "brief"]}, 400, "instructions"),
    ("unknown item type", {"input": [{"type": "item_reference", "id": "msg_1"}]}, 400, "input.0.type"),
    ("item not an object", {"input": [USER, 5]}, 400, "input.1"),
    ("message with an unknown role", {"input": [{"role": "wizard", "content": "hi"}]}, 400, "input.0.role"),
    ("message without content", {"input": [{"role": "user"}]}, 400, "input.0.content"),
    ("message content a number", {"input": [{"role": "user", "content": 42}]}, 400, "input.0.content"),
    (
        "unsupported content part",
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
        400,
        "input.0.content.0.type",
    ),
    (
        "input_text without text",
        {"input": [USER, {"role": "user", "content": [{"type": "input_text"}]}]},
        400,
        "input.1.content.0.text",
    ),
    (
        "input_image by file_id",
        {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]},
        400,
        "input.0.content.0.image_url",
    ),
    ("image to a text-only model", {"input": [image("data:image/png;base64,AAAA")]}, 400, "input.0.content"),
    (
        "function_call without call_id",
        {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
        400,
        "input.0.call_id",
    ),
    (
        "function_call arguments an object",
        {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
        400,
        "input.0.arguments",
    ),
    (
        "function_call_output without output",
        {"input": [USER, {"type": "function_call_output", "call_id": "c"}]},
        400,
        "input.1.output",
    ),
    ("built-in web_search tool", {"input": "hi", "tools": [TOOL, {"type": "web_search"}]}, 400, "tools.1.type"),
    ("function tool without name", {"input": "hi", "tools": [{"type": "function"}]}, 400, "tools.0.name"),
    (
        "function tool name with a space",
        {"input": "hi", "tools": [{"type": "function", "name": "get weather"}]},
        400,
        "tools.0.name",
    ),
    ("tool_choice required without tools", {"input": "hi", "tool_choice": "required"}, 400, "tool_choice"),
    (
        "tool_choice names an unknown function",
        {"input": "hi", "tools": [TOOL], "tool_choice": {"type": "function", "name": "nope"}},
        400,
        "tool_choice",
    ),
    ("text.format of an unknown type", {"input": "hi", "text": {"format": {"type": "xml"}}}, 400, "text.format.type"),
    (
        "json_schema format with a non-object schema",
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": "no"}}},
        400,
        "text.format.schema",
    ),
    (
        "text.format with a forced tool call",
        {"input": "hi", "tools": [TOOL], "tool_choice": "required", "text": {"format": {"type": "json_object"}}},
        400,
        "text.format",
    ),
    ("max_output_tokens zero", {"input": "hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ("max_output_tokens beyond the context", {"input": "hi", "max_output_tokens": 10**6}, 400, "max_output_tokens"),
    ("prompt beyond the context", {"input": "word " * 1000}, 400, "input"),
    ("temperature too high", {"input": "hi", "temperature": 5}, 400, "temperature"),
    ("top_p zero", {"input": "hi", "top_p": 0}, 400, "top_p"),
    ("top_k a string", {"input": "hi", "top_k": "ten"}, 400, "top_k"),
    ("n above one", {"input": "hi", "n": 2}, 400, "n"),
    ("stream not a bool", {"input": "hi", "stream": "yes"}, 400, "stream"),
    ("store not a bool", {"input": "hi", "store": "yes"}, 400, "store"),
    ("truncation auto", {"input": "hi", "truncation": "auto"}, 400, "truncation"),
    ("background", {"input": "hi", "background": True}, 400, "background"),
    ("seventeen metadata pairs", {"input": "hi", "metadata": {str(i): "v" for i in range(17)}}, 400, "metadata"),
    ("metadata value a number", {"input": "hi", "metadata": {"k": 1}}, 400, "metadata.k"),
    ("unknown reasoning effort", {"input": "hi", "reasoning": {"effort": "extreme"}}, 400, "reasoning.effort"),
    ("unknown previous_response_id", {"input": "hi", "previous_response_id": "resp_nope"}, 404, "previous_response_id"),
    ("chat messages instead of input", {"messages": [USER]}, 400, "messages"),
    ("chat response_format", {"input": "hi", "response_format": {"type": "json_object"}}, 400, "response_format"),
    ("conversation object", {"input": "hi", "conversation": "conv_1"}, 400, "conversation"),
    ("stored prompt template", {"input": "hi", "prompt": {"id": "pmpt_1"}}, 400, "prompt"),
    ("logit_bias (refused as for chat)", {"input": "hi", "logit_bias": {"1": 5}}, 400, "logit_bias"),
    ("top_logprobs (refused as for chat)", {"input": "hi", "top_logprobs": 3}, 400, "top_logprobs"),
]


@pytest.mark.parametrize(("body", "status", "param"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
async def test_bad_responses_request_is_a_4xx_naming_the_json_path(serve, body: Any, status: int, param: str | None):
    served = await serve(fast_model(reply("never")))
    if isinstance(body, bytes):
        async with served.client.post(
            "/v3/responses", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            answer_status, answer = response.status, await response.json()
    else:
        body = {key: value for key, value in {"model": MODEL, **body}.items() if value is not None}
        async with served.client.post("/v3/responses", json=body) as response:
            answer_status, answer = response.status, await response.json()
    assert answer_status == status, answer
    validate(answer, "ErrorResponse")
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param, error
    assert served.engine.adds() == []  # refused before any engine work


def test_the_table_has_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


async def test_a_good_request_after_bad_ones_is_served(serve) -> None:
    served = await serve(fast_model(reply("fine")))
    for _, body, status, _ in CASES:
        if isinstance(body, dict) and "model" not in body:
            assert (await served.post("/v3/responses", body))[0] == status
    status, answer = await served.post("/v3/responses", {"input": "hi"})
    assert status == 200 and answer["output"][0]["content"][0]["text"] == "fine"
    assert len(served.engine.adds()) == 1
