"""Reasoning effort on every demo model that chats, through the OpenAI SDK over real HTTP.

Neither demo template reads ``reasoning_effort`` or ``enable_thinking``: the values must still be
accepted (the template ignores what it does not read) and never cost a 5xx. What the switches do
to a template that reads them is ``tests/unit/test_reasoning_effort.py`` and
``tests/fast/test_reasoning_effort.py``; stateful and speculative pipelines render their prompt
through the same code.
"""

from __future__ import annotations

import openai
import pytest

from tests.conftest import Server

CHAT_MODELS = {"tiny-llm": "server", "tiny-vlm": "vlm_server"}
EFFORTS = ("low", "medium", "high", "none", "minimal")
ASK = [{"role": "user", "content": "Why is the sky blue?"}]


@pytest.fixture(params=sorted(CHAT_MODELS))
def chat_server(request: pytest.FixtureRequest) -> Server:
    server: Server = request.getfixturevalue(CHAT_MODELS[request.param])
    return server


def test_reasoning_effort_is_accepted_by_every_chat_model(chat_server: Server) -> None:
    client = chat_server.client()
    for effort in EFFORTS:
        completion = client.chat.completions.create(
            model=chat_server.model_name,
            messages=ASK,  # type: ignore[arg-type]
            reasoning_effort=effort,  # type: ignore[arg-type]
            max_tokens=8,
        )
        assert completion.choices[0].finish_reason in ("stop", "length"), effort
    stream = client.chat.completions.create(
        model=chat_server.model_name,
        messages=ASK,  # type: ignore[arg-type]
        reasoning_effort="high",
        max_tokens=8,
        stream=True,
    )
    assert [chunk.choices[0].finish_reason for chunk in stream if chunk.choices][-1] in ("stop", "length")


def test_responses_reasoning_effort_is_accepted(chat_server: Server) -> None:
    client = chat_server.client()
    for effort in EFFORTS:
        response = client.responses.create(
            model=chat_server.model_name,
            input="Why is the sky blue?",
            reasoning={"effort": effort},  # type: ignore[typeddict-item]
            max_output_tokens=8,
            store=False,
        )
        assert response.status in ("completed", "incomplete"), effort
        assert response.reasoning is not None and response.reasoning.effort == effort


def test_an_unknown_reasoning_effort_is_a_400_in_openais_shape(server: Server) -> None:
    client = server.client()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="tiny-llm",
            messages=ASK,  # type: ignore[arg-type]
            reasoning_effort="extreme",  # type: ignore[arg-type]
            max_tokens=8,
        )
    assert refused.value.status_code == 400
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "reasoning_effort"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="tiny-llm",
            input="hi",
            reasoning={"effort": "extreme"},  # type: ignore[typeddict-item]
            max_output_tokens=8,
        )
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "reasoning.effort"
