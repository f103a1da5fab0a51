"""Every response object validates against OpenAI's published schema (the OpenAPI spec)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import Server
from tests.e2e.test_chat_completions import sse_events
from tests.openai_schema import validate

MESSAGES = [{"role": "user", "content": "hello"}]

CHAT_BODIES = {
    "plain": {},
    "logprobs": {"logprobs": True},
    "n=2 sampled": {"n": 2, "temperature": 1.0, "seed": 1},
    "beam": {"best_of": 2, "n": 2},
    "stop": {"stop": ["e"], "temperature": 1.0, "seed": 2},
}


@pytest.mark.parametrize("extra", CHAT_BODIES.values(), ids=CHAT_BODIES.keys())
def test_chat_completion_matches_the_spec(server: Server, extra: dict) -> None:
    body = {"model": "tiny-llm", "messages": MESSAGES, "max_tokens": 6, **extra}
    response = httpx.post(f"{server.url}/v3/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    validate(response.json(), "CreateChatCompletionResponse")


@pytest.mark.parametrize("extra", CHAT_BODIES.values(), ids=CHAT_BODIES.keys())
def test_chat_chunks_match_the_spec(server: Server, extra: dict) -> None:
    body = {
        "model": "tiny-llm",
        "messages": MESSAGES,
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    with httpx.stream("POST", f"{server.url}/v3/chat/completions", json=body, timeout=60) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    for chunk in chunks:
        validate(chunk, "CreateChatCompletionStreamResponse")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


@pytest.mark.parametrize("extra", [{}, {"logprobs": 0}, {"prompt": ["a", "b"], "n": 2, "echo": True}])
def test_completion_matches_the_spec(server: Server, extra: dict) -> None:
    body = {"model": "tiny-llm", "prompt": "hello", "max_tokens": 6, **extra}
    response = httpx.post(f"{server.url}/v3/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    validate(response.json(), "CreateCompletionResponse")
    with httpx.stream(
        "POST", f"{server.url}/v3/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}}
    ) as streamed:
        events = sse_events(streamed)
    for event in events[:-1]:
        validate(json.loads(event), "CreateCompletionStreamChunk")


def test_error_bodies_match_the_spec(server: Server) -> None:
    response = httpx.post(f"{server.url}/v3/chat/completions", json={"model": "tiny-llm"}, timeout=30)
    assert response.status_code == 400
    validate(response.json(), "ErrorResponse")
