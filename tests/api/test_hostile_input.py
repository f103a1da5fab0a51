"""Odd input found by black-box probes: each gets an exact 4xx in OpenAI's shape, never a 500.

Bodies are sent as raw bytes where the JSON text itself is the point (deep nesting, lone UTF-16
surrogate escapes that a JSON encoder would not produce).
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import Server

MESSAGES = [{"role": "user", "content": "hi"}]
SURROGATE = "\\ud800"  # a lone high surrogate, as JSON escape text


def _raw(body: str) -> bytes:
    return body.encode("ascii")


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


CASES = [
    # (name, raw body, status, param, code)
    (
        "body nested 100000 deep",
        _raw('{"model": "tiny-llm", "messages": [], "x": ' + _nested(100_000) + "}"),
        400,
        None,
        "invalid_json",
    ),
    (
        "chat_template_kwargs nested 100 deep",
        _raw(
            '{"model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"a": '
            + _nested(100)
            + "}}"
        ),
        400,
        "chat_template_kwargs",
        "invalid_json",
    ),
    (
        "lone surrogate in message text",
        _raw('{"model": "tiny-llm", "messages": [{"role": "user", "content": "a' + SURROGATE + 'b"}]}'),
        400,
        "messages.0.content",
        "invalid_json",
    ),
    (
        "lone surrogate in a content part",
        _raw(
            '{"model": "tiny-llm", "messages": [{"role": "user", "content": [{"type": "text", "text": "'
            + SURROGATE
            + '"}]}]}'
        ),
        400,
        "messages.0.content.0.text",
        "invalid_json",
    ),
    (
        "lone surrogate in model",
        _raw('{"model": "tiny' + SURROGATE + '", "messages": [{"role": "user", "content": "hi"}]}'),
        400,
        "model",
        "invalid_json",
    ),
    (
        "lone surrogate in stop",
        _raw('{"model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}], "stop": ["' + SURROGATE + '"]}'),
        400,
        "stop.0",
        "invalid_json",
    ),
    (
        "lone surrogate in a key",
        _raw('{"model": "tiny-llm", "messages": [{"role": "user", "content": "hi", "' + SURROGATE + '": 1}]}'),
        400,
        "messages.0",
        "invalid_json",
    ),
    (
        "max_tokens as a string",
        json.dumps({"model": "tiny-llm", "messages": MESSAGES, "max_tokens": "10"}).encode(),
        400,
        "max_tokens",
        None,
    ),
    (
        "best_of as a boolean",
        json.dumps({"model": "tiny-llm", "messages": MESSAGES, "best_of": True}).encode(),
        400,
        "best_of",
        None,
    ),
    (
        "include_stop_str_in_output as a string",
        json.dumps({"model": "tiny-llm", "messages": MESSAGES, "include_stop_str_in_output": "yes"}).encode(),
        400,
        "include_stop_str_in_output",
        None,
    ),
    (
        "temperature as a string",
        json.dumps({"model": "tiny-llm", "messages": MESSAGES, "temperature": "0.5"}).encode(),
        400,
        "temperature",
        None,
    ),
]


@pytest.mark.parametrize(
    ("body", "status", "param", "code"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_hostile_body_gets_an_exact_openai_error(
    server: Server, body: bytes, status: int, param: str | None, code: str | None
) -> None:
    response = httpx.post(
        f"{server.url}/v3/chat/completions", content=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    # No binding internals (pybind signatures, object addresses) in what the client reads.
    assert "0x" not in error["message"] and "(self:" not in error["message"]


def test_lone_surrogate_in_a_completion_prompt_is_refused(server: Server) -> None:
    body = _raw('{"model": "tiny-llm", "prompt": ["fine", "x' + SURROGATE + '"]}')
    response = httpx.post(
        f"{server.url}/v3/completions", content=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "prompt.1"


def test_a_surrogate_pair_escape_is_valid_unicode(server: Server) -> None:
    # "\ud83d\ude00" is one emoji, escaped as JSON encoders with ensure_ascii write it.
    body = _raw(
        '{"model": "tiny-llm", "messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}], "max_tokens": 2}'
    )
    response = httpx.post(
        f"{server.url}/v3/chat/completions", content=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert response.status_code == 200, response.text


def test_nesting_within_the_limit_is_accepted(server: Server) -> None:
    kwargs: object = "leaf"
    for _ in range(20):
        kwargs = {"k": kwargs}
    body = {"model": "tiny-llm", "messages": MESSAGES, "max_tokens": 2, "chat_template_kwargs": kwargs}
    response = httpx.post(f"{server.url}/v3/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_literals_are_refused(server: Server, literal: str) -> None:
    body = _raw(
        '{"model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}], "length_penalty": ' + literal + "}"
    )
    response = httpx.post(
        f"{server.url}/v3/chat/completions", content=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_json"
