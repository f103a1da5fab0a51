"""Reasoning effort over HTTP: chat's ``reasoning_effort`` and Responses' ``reasoning.effort``
reach the model's chat template as ``reasoning_effort`` / ``enable_thinking``; values outside
OpenAI's enum are a 400 in OpenAI's error shape naming the field."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ovserve.engine.messages import AddRequest, RequestEnded
from tests.fast.harness import fast_model
from tests.fast.scripted_engine import Step, output

# A template that shows both switches in the prompt ("-" where the variable is not defined).
SWITCHES = (
    "effort={{ reasoning_effort if reasoning_effort is defined else '-' }} "
    "thinking={{ enable_thinking if enable_thinking is defined else '-' }}"
    "{% for message in messages %}|{{ message.content }}{% endfor %}<|assistant|>"
)


def echo_prompt(add: AddRequest) -> Iterator[Step]:
    """Answers with the prompt it was given (the character tokenizer's ids are code points)."""
    assert isinstance(add.prompt, list)
    yield [output(add, "".join(chr(token) for token in add.prompt), finish="stop"), RequestEnded(add.request_id)]


def response_text(body: dict) -> str:
    (message,) = [item for item in body["output"] if item["type"] == "message"]
    return "".join(part["text"] for part in message["content"])


@pytest.mark.parametrize(
    ("effort", "switches"),
    [
        ("low", "effort=low thinking=True"),
        ("medium", "effort=medium thinking=True"),
        ("high", "effort=high thinking=True"),
        ("none", "effort=none thinking=False"),
        ("minimal", "effort=minimal thinking=False"),
        ("xhigh", "effort=high thinking=True"),
        (None, "effort=- thinking=-"),
    ],
)
async def test_chat_reasoning_effort_reaches_the_template(serve, messages, effort, switches) -> None:
    served = await serve(fast_model(echo_prompt, template=SWITCHES))
    status, body = await served.chat(messages=messages, reasoning_effort=effort)
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == f"{switches}|Hi<|assistant|>"


async def test_chat_template_kwargs_win_over_reasoning_effort(serve, messages) -> None:
    served = await serve(fast_model(echo_prompt, template=SWITCHES))
    status, body = await served.chat(
        messages=messages, reasoning_effort="none", chat_template_kwargs={"enable_thinking": True}
    )
    assert status == 200, body
    assert body["choices"][0]["message"]["content"].startswith("effort=none thinking=True|")


async def test_responses_reasoning_effort_reaches_the_template_and_is_echoed(serve) -> None:
    served = await serve(fast_model(echo_prompt, template=SWITCHES))
    status, body = await served.post("/v3/responses", {"input": "Hi", "reasoning": {"effort": "minimal"}})
    assert status == 200, body
    assert response_text(body) == "effort=minimal thinking=False|Hi<|assistant|>"
    assert body["reasoning"]["effort"] == "minimal"
    status, body = await served.post("/v3/responses", {"input": "Hi", "reasoning": {"effort": "max"}})
    assert status == 200, body
    assert response_text(body).startswith("effort=high thinking=True|")
    assert body["reasoning"]["effort"] == "max"


async def test_reasoning_effort_on_a_template_without_switches_changes_nothing(serve, messages) -> None:
    served = await serve(fast_model(echo_prompt))
    _, plain = await served.chat(messages=messages)
    for effort in ("low", "medium", "high", "none", "minimal"):
        status, body = await served.chat(messages=messages, reasoning_effort=effort)
        assert status == 200, body
        assert body["choices"] == plain["choices"]


@pytest.mark.parametrize("value", ["extreme", "", "LOW", 3, {"effort": "low"}])
async def test_an_unknown_reasoning_effort_is_a_400_naming_the_field(serve, messages, value) -> None:
    served = await serve(fast_model(echo_prompt))
    status, body = await served.chat(messages=messages, reasoning_effort=value)
    assert status == 400, body
    error = body["error"]
    assert error["param"] == "reasoning_effort" and error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
    status, body = await served.post("/v3/responses", {"input": "Hi", "reasoning": {"effort": value}})
    assert status == 400, body
    assert body["error"]["param"] == "reasoning.effort"
    assert served.engine.adds() == []  # refused before any engine work
