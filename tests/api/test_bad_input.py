"""Bad input gets a 4xx in OpenAI's error shape: never a 500, never a hang."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Server

MESSAGES = [{"role": "user", "content": "hi"}]

CASES = [
    ("invalid json", b'{"model": "tiny-llm", "messages": [', 400, None),
    ("json array body", b"[1, 2]", 400, None),
    ("missing messages", {"model": "tiny-llm"}, 400, "messages"),
    ("empty messages", {"model": "tiny-llm", "messages": []}, 400, "messages"),
    ("messages not a list", {"model": "tiny-llm", "messages": "hi"}, 400, "messages"),
    ("missing model", {"messages": MESSAGES}, 400, "model"),
    ("model not a string", {"model": 5, "messages": MESSAGES}, 400, "model"),
    ("unknown model", {"model": "gpt-9", "messages": MESSAGES}, 404, "model"),
    ("unknown role", {"model": "tiny-llm", "messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role"),
    ("message without content", {"model": "tiny-llm", "messages": [{"role": "user"}]}, 400, "messages.0"),
    ("content wrong type", {"model": "tiny-llm", "messages": [{"role": "user", "content": 42}]}, 400, None),
    ("max_tokens zero", {"model": "tiny-llm", "messages": MESSAGES, "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens string", {"model": "tiny-llm", "messages": MESSAGES, "max_tokens": "many"}, 400, "max_tokens"),
    ("temperature too high", {"model": "tiny-llm", "messages": MESSAGES, "temperature": 5}, 400, "temperature"),
    ("top_p zero", {"model": "tiny-llm", "messages": MESSAGES, "top_p": 0}, 400, "top_p"),
    # Values that reach the engine's float32 / size_t as 0 or overflow: found by the property test.
    ("top_p below float32", {"model": "tiny-llm", "messages": MESSAGES, "top_p": 1e-300}, 400, "top_p"),
    (
        "repetition_penalty below float32",
        {"model": "tiny-llm", "messages": MESSAGES, "repetition_penalty": 1e-300},
        400,
        "repetition_penalty",
    ),
    ("top_k beyond int32", {"model": "tiny-llm", "messages": MESSAGES, "top_k": 2**70}, 400, "top_k"),
    ("n above 128", {"model": "tiny-llm", "messages": MESSAGES, "n": 129}, 400, "n"),
    ("negative stop token id", {"model": "tiny-llm", "messages": MESSAGES, "stop_token_ids": [-1]}, 400, None),
    ("negative seed", {"model": "tiny-llm", "messages": MESSAGES, "seed": -1}, 400, "seed"),
    ("seed too large", {"model": "tiny-llm", "messages": MESSAGES, "seed": 2**32}, 400, "seed"),
    ("five stop strings", {"model": "tiny-llm", "messages": MESSAGES, "stop": list("abcde")}, 400, "stop"),
    ("stream not bool", {"model": "tiny-llm", "messages": MESSAGES, "stream": "yes please"}, 400, "stream"),
    ("stream_options without stream", {"model": "tiny-llm", "messages": MESSAGES, "stream_options": {}}, 400, None),
    (
        "include_stop_str_in_output false with stream",
        {"model": "tiny-llm", "messages": MESSAGES, "stream": True, "include_stop_str_in_output": False},
        400,
        None,
    ),
    ("max_tokens beyond context", {"model": "tiny-llm", "messages": MESSAGES, "max_tokens": 10**6}, 400, "max_tokens"),
    (
        "prompt beyond context",
        {"model": "tiny-llm", "messages": [{"role": "user", "content": "word " * 5000}]},
        400,
        "messages",
    ),
    (
        "image to a text-only model",
        {
            "model": "tiny-llm",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
        },
        400,
        "messages.0.content",
    ),
]


@pytest.mark.parametrize(("body", "status", "param"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_request_gets_openai_error(server: Server, body: object, status: int, param: str | None) -> None:
    url = f"{server.url}/v3/chat/completions"
    if isinstance(body, bytes):
        response = httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=30)
    else:
        response = httpx.post(url, json=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param


def test_context_error_names_both_numbers(server: Server) -> None:
    body = {"model": "tiny-llm", "messages": MESSAGES, "max_tokens": 10**6}
    error = httpx.post(f"{server.url}/v3/chat/completions", json=body, timeout=30).json()["error"]
    assert "1000000" in error["message"] and "2048" in error["message"]
    assert error["code"] == "context_length_exceeded"


def test_unknown_route_and_wrong_method(server: Server) -> None:
    missing = httpx.get(f"{server.url}/v3/nothing-here", timeout=10)
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "invalid_request_error"
    wrong_method = httpx.get(f"{server.url}/v3/chat/completions", timeout=10)
    assert wrong_method.status_code == 405
    assert "POST" in wrong_method.json()["error"]["message"]


def test_wrong_content_type_is_415(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v3/chat/completions",
        content=b"model=tiny-llm",
        headers={"Content-Type": "text/plain"},
        timeout=10,
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_server_still_serves_after_bad_input(server: Server) -> None:
    completion = server.client().chat.completions.create(model="tiny-llm", messages=MESSAGES, max_tokens=3)  # type: ignore[arg-type]
    assert completion.choices[0].message.content is not None
