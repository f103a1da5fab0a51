"""OpenAI's reasoning effort onto chat template switches (``Conversation.template_variables``).

Chat's ``reasoning_effort`` and Responses' ``reasoning.effort`` become the template variables
``reasoning_effort`` (gpt-oss's harmony template) and ``enable_thinking`` (Qwen3-style templates);
the client's own ``chat_template_kwargs`` win; templates that read neither render as before.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest
from pydantic import ValidationError

from ovserve.core.conversation import Conversation, Message, ReasoningEffort, Sampling, Text
from ovserve.dialects.openai.chat import adapter as chat_adapter
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.responses import adapter as responses_adapter
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.models.chat_template import ChatTemplate

# The switches as published templates read them: gpt-oss writes the effort into its system
# message (openai/gpt-oss-20b chat_template.jinja: "Reasoning: " + reasoning_effort, default
# medium); Qwen3 closes an empty think block when enable_thinking is false.
GPT_OSS_LIKE = (
    "{% if reasoning_effort is not defined %}{% set reasoning_effort = 'medium' %}{% endif %}"
    "Reasoning: {{ reasoning_effort }}|{{ messages[0].content }}"
)
QWEN3_LIKE = (
    "{{ messages[0].content }}<|assistant|>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
)
NEITHER = "{{ messages[0].content }}<|assistant|>"
USER = [{"role": "user", "content": "Hi"}]


def conversation(effort: ReasoningEffort | None, kwargs: dict[str, Any] | None = None) -> Conversation:
    return Conversation(
        model="m",
        messages=[Message("user", "messages.0.content", [Text("Hi", "messages.0.content")])],
        sampling=Sampling(),
        prompt_origin="messages",
        template_kwargs=kwargs,
        reasoning_effort=effort,
    )


def render(template: str, effort: ReasoningEffort | None, kwargs: dict[str, Any] | None = None) -> str:
    return ChatTemplate(template).render(USER, template_kwargs=conversation(effort, kwargs).template_variables())


@pytest.mark.parametrize(
    ("effort", "variables"),
    [
        ("low", {"reasoning_effort": "low", "enable_thinking": True}),
        ("medium", {"reasoning_effort": "medium", "enable_thinking": True}),
        ("high", {"reasoning_effort": "high", "enable_thinking": True}),
        ("none", {"reasoning_effort": "none", "enable_thinking": False}),
        ("minimal", {"reasoning_effort": "minimal", "enable_thinking": False}),
        # Open templates know no level above high.
        ("xhigh", {"reasoning_effort": "high", "enable_thinking": True}),
        ("max", {"reasoning_effort": "high", "enable_thinking": True}),
    ],
)
def test_each_effort_becomes_the_template_switches(effort: ReasoningEffort, variables: dict[str, Any]) -> None:
    assert conversation(effort).template_variables() == variables


def test_every_openai_effort_value_is_mapped() -> None:
    for effort in get_args(ReasoningEffort):
        assert conversation(effort).template_variables()  # no value falls through unmapped


def test_no_effort_leaves_the_client_kwargs_as_sent() -> None:
    assert conversation(None).template_variables() is None
    kwargs = {"enable_thinking": False, "custom": 1}
    assert conversation(None, kwargs).template_variables() == kwargs


def test_the_clients_own_template_kwargs_win_over_the_effort() -> None:
    variables = conversation("none", {"enable_thinking": True, "reasoning_effort": "high", "x": 1}).template_variables()
    assert variables == {"enable_thinking": True, "reasoning_effort": "high", "x": 1}
    # Only the switch the client set is kept; the other still follows the effort.
    assert conversation("low", {"enable_thinking": False}).template_variables() == {
        "reasoning_effort": "low",
        "enable_thinking": False,
    }


def test_a_gpt_oss_style_template_writes_the_effort_into_its_system_message() -> None:
    assert render(GPT_OSS_LIKE, "low") == "Reasoning: low|Hi"
    assert render(GPT_OSS_LIKE, "high") == "Reasoning: high|Hi"
    assert render(GPT_OSS_LIKE, None) == "Reasoning: medium|Hi"  # the template's own default


def test_a_qwen3_style_template_switches_thinking_off_for_none_and_minimal() -> None:
    thinking_off = "Hi<|assistant|><think>\n\n</think>\n\n"
    assert render(QWEN3_LIKE, "none") == thinking_off
    assert render(QWEN3_LIKE, "minimal") == thinking_off
    for effort in ("low", "medium", "high"):
        assert render(QWEN3_LIKE, effort) == "Hi<|assistant|>"
    assert render(QWEN3_LIKE, "none", {"enable_thinking": True}) == "Hi<|assistant|>"


def test_a_template_that_reads_neither_switch_renders_as_without_an_effort() -> None:
    for effort in get_args(ReasoningEffort):
        assert render(NEITHER, effort) == render(NEITHER, None)


def test_chat_reasoning_effort_reaches_the_conversation() -> None:
    request = ChatCompletionRequest.model_validate({"model": "m", "messages": USER, "reasoning_effort": "minimal"})
    assert chat_adapter.conversation_of(request).template_variables() == {
        "reasoning_effort": "minimal",
        "enable_thinking": False,
    }
    plain = ChatCompletionRequest.model_validate({"model": "m", "messages": USER, "reasoning_effort": None})
    assert chat_adapter.conversation_of(plain).reasoning_effort is None  # null: not sent


def test_responses_reasoning_effort_reaches_the_conversation() -> None:
    kwargs = {"enable_thinking": False}
    request = ResponsesRequest.model_validate(
        {"model": "m", "input": "Hi", "reasoning": {"effort": "high"}, "chat_template_kwargs": kwargs}
    )
    assert responses_adapter.conversation_of(request, []).template_variables() == {
        "reasoning_effort": "high",
        "enable_thinking": False,
    }
    summary_only = ResponsesRequest.model_validate({"model": "m", "input": "Hi", "reasoning": {"summary": "auto"}})
    assert responses_adapter.conversation_of(summary_only, []).template_variables() is None


@pytest.mark.parametrize("value", ["extreme", "", "LOW", 1, True])
def test_an_effort_outside_openais_values_is_refused(value: Any) -> None:
    with pytest.raises(ValidationError) as chat:
        ChatCompletionRequest.model_validate({"model": "m", "messages": USER, "reasoning_effort": value})
    assert chat.value.errors()[0]["loc"] == ("reasoning_effort",)
    with pytest.raises(ValidationError) as responses:
        ResponsesRequest.model_validate({"model": "m", "input": "Hi", "reasoning": {"effort": value}})
    assert responses.value.errors()[0]["loc"] == ("reasoning", "effort")
