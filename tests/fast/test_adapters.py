"""Dialect adapters against a scripted core: each adapter builds the core's input from its own
request model (checked as the core receives it) and renders scripted core steps in its own shape.
No engine, no template, no HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from ovserve.core.conversation import Conversation, ForcedTool, Image, Reasoning, Text, ToolCall
from ovserve.core.job import Delta, Usage
from ovserve.core.output import ParsedDelta
from ovserve.dialects.body import Burst
from ovserve.dialects.openai.chat.adapter import ChatEndpoint
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.responses.adapter import ResponsesEndpoint
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.dialects.openai.responses.store import ResponseStore
from ovserve.parsers.calls import ToolCall as ParsedCall


def delta(choice: int = 0, content: str = "", **fields: Any) -> Delta:
    values: dict[str, Any] = {
        "reasoning": "",
        "tool_calls": [],
        "logprobs": None,
        "first": False,
        "finish_reason": None,
        "calls_before": 0,
    }
    values.update(fields)
    return Delta(choice=choice, content=content, **values)


@dataclass
class ScriptedChoice:
    index: int
    parsed: ParsedDelta = field(default_factory=ParsedDelta)
    logprobs: list[Any] = field(default_factory=list)
    finish_reason: str = "stop"

    @property
    def tool_calls(self) -> list[ParsedCall]:
        return self.parsed.tool_calls


@dataclass
class ScriptedJob:
    """What an adapter reads of a core job, its steps given in advance."""

    deltas: list[Delta]
    usage: Usage = field(default_factory=lambda: Usage(7, 3, None))
    id: str = "job-1"
    created: int = 1_700_000_000
    include_usage: bool = False
    model: Any = field(default_factory=lambda: SimpleNamespace(name="scripted"))
    params: Any = field(default_factory=lambda: SimpleNamespace(logprobs=False, temperature=1.0, top_p=1.0))

    @property
    def outcome(self) -> str:
        return next((step.finish_reason for step in self.deltas if step.finish_reason), "stop")

    async def steps(self) -> AsyncGenerator[Delta, None]:
        for step in self.deltas:
            yield step

    async def choices(self) -> list[ScriptedChoice]:
        choices: dict[int, ScriptedChoice] = {}
        for step in self.deltas:
            choice = choices.setdefault(step.choice, ScriptedChoice(step.choice))
            choice.parsed.extend(ParsedDelta(step.reasoning, step.content, list(step.tool_calls)))
            choice.finish_reason = step.finish_reason or choice.finish_reason
        return list(choices.values())


@dataclass
class ScriptedCore:
    """A ChatGeneration stand-in: records the conversation, answers with the scripted job."""

    job: ScriptedJob
    received: list[Conversation] = field(default_factory=list)

    async def prepare(self, conversation: Conversation) -> ScriptedJob:
        self.received.append(conversation)
        return self.job


NO_STORE = ResponseStore("none", max_count=1, max_bytes=1)


def chat_request(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "scripted", **body})


async def test_chat_messages_become_parts_with_their_json_paths() -> None:
    core = ScriptedCore(ScriptedJob([delta(content="ok", first=True, finish_reason="stop")]))
    endpoint = ChatEndpoint(core)  # type: ignore[arg-type]
    request = chat_request(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": "x.png"}],
            },
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
        ],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        tool_choice={"type": "function", "function": {"name": "f"}},
        max_completion_tokens=5,
    )
    await endpoint.prepare(request, "caller")
    (conversation,) = core.received
    system, user, assistant = conversation.messages
    assert (system.role, system.parts) == ("system", [Text("Be brief.", "messages.0.content")])
    assert user.parts == [Text("Look:", "messages.1.content.0"), Image("x.png", "messages.1.content.1.image_url")]
    assert assistant.parts == [ToolCall("c1", "f", {}, "messages.2.tool_calls.0")]
    assert conversation.tool_choice == ForcedTool("f")
    assert conversation.tools[0].parameters_origin == "tools.0.function.parameters"
    assert (conversation.sampling.max_tokens, conversation.sampling.max_tokens_param) == (5, "max_completion_tokens")


async def test_chat_renders_scripted_steps_as_chunks_and_a_completion() -> None:
    call = ParsedCall(id="call_1", name="f", arguments={"a": 1})
    script = [
        delta(reasoning="hm", first=True),
        delta(content="Hi"),
        delta(tool_calls=[call], finish_reason="tool_calls"),
    ]
    endpoint = ChatEndpoint(ScriptedCore(ScriptedJob(script)))  # type: ignore[arg-type]
    prepared = await endpoint.prepare(chat_request(messages=[{"role": "user", "content": "x"}], stream=True), "c")
    chunks = [json.loads(chunk.encode()) async for chunk in endpoint.stream(prepared)]
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert deltas[0] == {"role": "assistant", "content": None}
    assert deltas[1:3] == [{"reasoning_content": "hm"}, {"content": "Hi"}]
    assert deltas[3]["tool_calls"][0] == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    assert deltas[4]["tool_calls"][0] == {"index": 0, "function": {"arguments": '{"a": 1}'}}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    unary = await endpoint.complete(prepared)
    message = unary.choices[0].message
    assert (message.content, message.reasoning_content) == ("Hi", "hm")
    assert message.tool_calls is not None and message.tool_calls[0].function.arguments == '{"a": 1}'
    assert (unary.usage.prompt_tokens, unary.usage.completion_tokens, unary.usage.total_tokens) == (7, 3, 10)


async def test_responses_items_become_one_conversation_with_their_json_paths() -> None:
    core = ScriptedCore(ScriptedJob([delta(content="ok", first=True, finish_reason="stop")]))
    endpoint = ResponsesEndpoint(core, NO_STORE)  # type: ignore[arg-type]
    request = ResponsesRequest.model_validate(
        {
            "model": "scripted",
            "instructions": "Be brief.",
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "i"}],
                },
                {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ],
            "max_output_tokens": 9,
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        }
    )
    await endpoint.prepare(request, "caller")
    (conversation,) = core.received
    system, user, assistant, tool = conversation.messages
    assert system.parts == [Text("Be brief.", "instructions")]
    assert user.parts == [Text("a", "input.0.content.0"), Image("i", "input.0.content.1.image_url")]
    assert user.content_origin == "input.0.content"
    # Reasoning and the call that follows it are one assistant turn.
    assert assistant.parts == [Reasoning("think", "input.1"), ToolCall("c1", "f", {}, "input.2")]
    assert (tool.role, tool.tool_call_id, tool.texts) == ("tool", "c1", ["42"])
    assert (conversation.sampling.max_tokens, conversation.sampling.max_tokens_param) == (9, "max_output_tokens")
    assert conversation.output_format is not None and conversation.output_format.origin == "text.format"
    assert conversation.prompt_origin == "input"


async def test_responses_renders_scripted_steps_as_items_and_numbered_events() -> None:
    script = [delta(reasoning="hm", first=True), delta(content="Hi", finish_reason="stop")]
    endpoint = ResponsesEndpoint(ScriptedCore(ScriptedJob(script)), NO_STORE)  # type: ignore[arg-type]
    request = ResponsesRequest.model_validate({"model": "scripted", "input": "x", "stream": True})
    prepared = await endpoint.prepare(request, "caller")
    # The events of one moment come as a Burst (one write): each is an event of the stream.
    streamed = [item async for item in endpoint.stream(prepared)]
    events = [
        json.loads(event.encode())
        for item in streamed
        for event in (item.events if isinstance(item, Burst) else [item])
    ]
    kinds = [event["type"] for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    assert kinds[-1] == "response.completed"
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["usage"]["input_tokens"] == 7 and final["usage"]["output_tokens"] == 3
