"""Anthropic's Messages API on the fast layer: the real app and the ``anthropic`` SDK, a scripted engine.

Every body and event is checked against Anthropic's shapes (tests/fixtures/anthropic); the SDK's
stream helpers must accumulate a stream to the message the unary call returns.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from ovserve.api.anthropic import MessagesWriter
from ovserve.core.chat import joined_late_system
from ovserve.core.conversation import ForcedTool, Image, Message, Reasoning, Text, ToolCall
from ovserve.dialects.anthropic.adapter import conversation_of
from ovserve.dialects.anthropic.request import MessagesRequest
from ovserve.dialects.anthropic.response import ErrorResponse, error_status
from ovserve.engine.messages import AddRequest
from ovserve.errors import ServiceUnavailableError, TooManyRequestsError
from ovserve.parsers import REASONING_PARSERS
from tests.anthropic_schema import validate, validate_event
from tests.fast.harness import MODEL, Served, eventually, fast_model
from tests.fast.scripted_engine import DIE, output, reply

if TYPE_CHECKING:
    # Imported where used: the SDK takes about 2 s of CPU to import, and every worker of a run
    # collects this file, the ones that never run it too.
    import anthropic

VERSION = {"anthropic-version": "2023-06-01"}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def sdk(served: Served, **kwargs: Any) -> anthropic.AsyncAnthropic:
    import anthropic

    options: dict[str, Any] = {"api_key": "unused", "max_retries": 0, **kwargs}
    return anthropic.AsyncAnthropic(base_url=str(served.client.make_url("")).rstrip("/"), **options)


def thinking_model(*pieces: str) -> Any:
    fast = fast_model(reply(*pieces))
    fast.model.reasoning_format = REASONING_PARSERS["qwen3"]
    return fast


async def post(served: Served, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    async with served.client.post(path, json={"model": MODEL, **body}, headers=headers or VERSION) as response:
        if response.content_type == "text/event-stream":
            return response.status, _events(await response.text())
        return response.status, await response.json()


def _events(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.split("\n\n"):
        if block.strip() and block != ": ping":  # the writer's keep-alive, a comment the SDK skips
            name, data = block.split("\n", 1)
            event = json.loads(data.removeprefix("data: "))
            assert name == f"event: {event['type']}"
            validate_event(event)
            events.append(event)
    return events


async def both(served: Served, **params: Any) -> tuple[anthropic.types.Message, anthropic.types.Message]:
    """The unary message and the stream's accumulated message for the same request."""
    client = sdk(served)
    unary = await client.messages.create(model=MODEL, **params)
    async with client.messages.stream(model=MODEL, **params) as stream:
        streamed = await stream.get_final_message()
    return unary, streamed


def same(unary: anthropic.types.Message, streamed: anthropic.types.Message) -> None:
    """The same message but for the ids (each call has its own, as each tool_use block)."""
    first, second = unary.model_dump(), streamed.model_dump()
    assert first.pop("id") != second.pop("id")
    for block in [*first["content"], *second["content"]]:
        if block["type"] == "tool_use":
            assert block.pop("id").startswith("toolu_")
    assert first == second


async def test_text_unary_and_stream_are_one_message(serve) -> None:
    served = await serve(fast_model(reply("Hello", " there", "!")))
    unary, streamed = await both(served, max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    same(unary, streamed)
    assert [(block.type, getattr(block, "text", None)) for block in unary.content] == [("text", "Hello there!")]
    assert unary.stop_reason == "end_turn" and unary.stop_sequence is None
    assert unary.id.startswith("msg_") and unary.model == MODEL and unary.role == "assistant"
    assert unary.usage.input_tokens > 0 and unary.usage.output_tokens == 3
    assert unary.usage.cache_read_input_tokens == 0 and unary.usage.cache_creation_input_tokens == 0


async def test_every_body_and_event_has_anthropics_shape(serve) -> None:
    served = await serve(thinking_model("<think>Hmm", "</think>Sure. ", CALL_TEXT))
    body = {"max_tokens": 64, "messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER]}
    status, message = await post(served, "/v1/messages", body)
    assert status == 200
    validate(message, "Message")
    assert [block["type"] for block in message["content"]] == ["thinking", "text", "tool_use"]
    status, events = await post(served, "/v1/messages", {**body, "stream": True})
    assert status == 200
    kinds = [event["type"] for event in events]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta", "message_stop"]
    deltas = [event["delta"]["type"] for event in events if event["type"] == "content_block_delta"]
    assert {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} <= set(deltas)
    status, count = await post(served, "/v1/messages/count_tokens", {"messages": body["messages"]})
    assert status == 200
    validate(count, "MessageTokensCount")
    async with served.client.get("/v1/models", headers=VERSION) as response:
        listed = await response.json()
    assert listed["has_more"] is False and listed["first_id"] == listed["last_id"] == MODEL
    for model in listed["data"]:
        validate(model, "ModelInfo")
    async with served.client.get(f"/v1/models/{MODEL}", headers=VERSION) as response:
        validate(await response.json(), "ModelInfo")
    async with served.client.get("/v1/models") as response:  # without the header: OpenAI's list
        assert (await response.json())["object"] == "list"


async def test_thinking_then_text_streams_as_blocks_the_sdk_accumulates(serve) -> None:
    served = await serve(thinking_model("<think>Let me", " think.", "</think>", "The answer", " is 4."))
    params = {
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "2+2?"}],
    }
    unary, streamed = await both(served, **params)
    same(unary, streamed)
    thinking, text = unary.content
    assert thinking.type == "thinking" and thinking.thinking == "Let me think." and thinking.signature
    assert text.type == "text" and text.text == "The answer is 4."
    # The thinking switch reaches the template as enable_thinking.
    request = MessagesRequest.model_validate({"model": MODEL, **params})
    assert conversation_of(request).template_kwargs == {"enable_thinking": True}
    disabled = MessagesRequest.model_validate({"model": MODEL, **params, "thinking": {"type": "disabled"}})
    assert conversation_of(disabled).template_kwargs == {"enable_thinking": False}
    adaptive = MessagesRequest.model_validate({"model": MODEL, **params, "thinking": {"type": "adaptive"}})
    assert conversation_of(adaptive).template_kwargs == {"enable_thinking": True}


async def test_a_tool_round_trip_with_tool_choice_any(serve) -> None:
    fast = fast_model(reply(CALL_TEXT))
    served = await serve(fast)
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    params = {"max_tokens": 64, "tools": [WEATHER], "tool_choice": {"type": "any"}, "messages": messages}
    unary, streamed = await both(served, **params)
    same(unary, streamed)
    (call,) = unary.content
    assert call.type == "tool_use" and call.id.startswith("toolu_")
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})
    assert unary.stop_reason == "tool_use"
    # tool_choice any forced a call: the engine got the forcing grammar.
    assert fast.launcher.engine.adds()[0].params.structured_output is not None
    fast.launcher.script = reply("It is sunny.")
    messages += [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in unary.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]},
    ]
    answer = await sdk(served).messages.create(model=MODEL, max_tokens=32, tools=[WEATHER], messages=messages)
    assert [block.text for block in answer.content if block.type == "text"] == ["It is sunny."]
    assert answer.stop_reason == "end_turn"


async def test_stop_sequences_end_the_text_without_it(serve) -> None:
    served = await serve(fast_model(reply("Hello ST", "OP and more")))
    unary, streamed = await both(
        served, max_tokens=16, stop_sequences=["STOP"], messages=[{"role": "user", "content": "Hi"}]
    )
    same(unary, streamed)
    assert unary.content[0].text == "Hello "  # type: ignore[union-attr]
    assert (unary.stop_reason, unary.stop_sequence) == ("stop_sequence", "STOP")


async def test_max_tokens_beyond_the_context_is_clamped_and_reported(serve) -> None:
    fast = fast_model(reply("cut", finish="length"), context_length=512)
    served = await serve(fast)
    # Claude Code's request: its own model's output limit, streamed.
    async with sdk(served).messages.stream(
        model=MODEL, max_tokens=64000, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    prompt = message.usage.input_tokens
    assert fast.launcher.engine.adds()[0].params.max_new_tokens == 512 - prompt


async def test_count_tokens_counts_the_templated_prompt_with_tools(serve) -> None:
    fast = fast_model()
    served = await serve(fast)
    messages = [{"role": "user", "content": "Hi"}]
    counted = await sdk(served).messages.count_tokens(model=MODEL, messages=messages, tools=[WEATHER])  # type: ignore[arg-type]
    tool = {"type": "function", "function": {"name": "get_weather", "description": WEATHER["description"],
                                             "parameters": WEATHER["input_schema"]}}  # fmt: skip
    assert counted.input_tokens == fast.prompt_tokens(messages, [tool])
    plain = await sdk(served).messages.count_tokens(model=MODEL, messages=messages)  # type: ignore[arg-type]
    assert plain.input_tokens == fast.prompt_tokens(messages)
    assert fast.launcher.engine.adds() == []  # counting is no engine work


async def test_keys_are_taken_from_x_api_key_or_bearer_and_refusals_are_anthropics(serve) -> None:
    import anthropic

    served = await serve(fast_model(reply("ok")), api_key=["secret"])
    params = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    assert (await sdk(served, api_key="secret").messages.create(**params)).content  # x-api-key
    bearer = anthropic.AsyncAnthropic(
        base_url=str(served.client.make_url("")).rstrip("/"), auth_token="secret", max_retries=0
    )
    assert (await bearer.messages.create(**params)).content
    with pytest.raises(anthropic.AuthenticationError) as refused:
        await sdk(served, api_key="wrong").messages.create(**params)
    validate(refused.value.body, "ErrorResponse")
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


async def test_unknown_routes_and_methods_answer_in_anthropics_shape(serve) -> None:
    served = await serve(fast_model())
    async with served.client.post("/v1/messages/batches", json={}, headers=VERSION) as response:
        assert response.status == 404
        body = await response.json()
    validate(body, "ErrorResponse")
    assert body["error"]["type"] == "not_found_error"
    async with served.client.get("/v1/messages", headers=VERSION) as response:
        assert response.status == 405
        validate(await response.json(), "ErrorResponse")
    async with served.client.post("/v1/nothing", json={}) as response:  # no header: OpenAI's shape
        assert "error" in await response.json() and response.status == 404


async def test_a_body_over_the_limit_is_request_too_large(serve) -> None:
    served = await serve(fast_model(), max_request_mb=0.01)
    status, body = await post(
        served, "/v1/messages", {"max_tokens": 8, "messages": [{"role": "user", "content": "x" * 20000}]}
    )
    assert status == 413
    validate(body, "ErrorResponse")
    assert body["error"]["type"] == "request_too_large"


async def test_a_loading_model_is_overloaded_529_with_retry_after(serve) -> None:
    fast = fast_model()
    fast.launcher.gate.clear()  # still loading
    served = await serve(fast, wait=False)
    async with served.client.post(
        "/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    ) as response:
        assert response.status == 529 and response.headers["Retry-After"]
        body = await response.json()
    validate(body, "ErrorResponse")
    assert body["error"]["type"] == "overloaded_error"
    fast.launcher.gate.set()


def test_each_error_has_anthropics_type_and_status() -> None:
    queue_full = TooManyRequestsError("queue full")
    assert (ErrorResponse.of(queue_full).error.type, error_status(queue_full)) == ("rate_limit_error", 429)
    busy = ServiceUnavailableError("restarting")
    assert (ErrorResponse.of(busy).error.type, error_status(busy)) == ("overloaded_error", 529)


def _dies_after_text(add: AddRequest) -> Any:
    yield [output(add, "partial")]
    yield DIE


async def test_a_stream_that_fails_ends_with_an_error_event(serve) -> None:
    import anthropic

    served = await serve(fast_model(_dies_after_text))
    status, events = await post(
        served, "/v1/messages", {"max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert status == 200
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "error"
    assert events[-1]["error"]["type"] in ("overloaded_error", "api_error")
    with pytest.raises(anthropic.APIStatusError):
        async with sdk(served).messages.stream(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
        ) as stream:
            await stream.get_final_message()


async def test_pings_keep_a_slow_stream_busy(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MessagesWriter, "keepalive_interval", 0.02)

    def slow(add: AddRequest) -> Any:
        import time

        time.sleep(0.3)  # a long prefill, in the engine's thread
        yield [output(add, "done", finish="stop")]

    served = await serve(fast_model(slow))
    body = {"model": MODEL, "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    async with served.client.post("/v1/messages", json=body, headers=VERSION) as response:
        assert response.status == 200
        text = await response.text()
    # The writer's keep-alive, before the first event: Anthropic's own ping event.
    assert text.startswith('event: ping\ndata: {"type":"ping"}\n\n'), text
    kinds = [event["type"] for event in _events(text)]
    start = kinds.index("message_start")
    assert set(kinds[:start]) == {"ping"} and kinds[start + 1] == "ping" and kinds[-1] == "message_stop", kinds
    async with sdk(served).messages.stream(
        model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:  # the SDK skips the keep-alive
        assert (await stream.get_final_message()).content[0].text == "done"  # type: ignore[union-attr]


async def test_aliases_resolve_and_the_reply_names_the_model_asked_for(serve) -> None:
    import anthropic

    fast = fast_model(reply("hi"))
    fast.model.settings = fast.model.settings.model_copy(update={"aliases": ["claude-*"]})
    served = await serve(fast)
    message = await sdk(served).messages.create(
        model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.model == "claude-sonnet-4-5"
    with pytest.raises(anthropic.NotFoundError) as unknown:
        await sdk(served).messages.create(model="gpt-4o", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    assert MODEL in unknown.value.body["error"]["message"]  # type: ignore[index]


def test_messages_become_parts_with_their_json_paths() -> None:
    request = MessagesRequest.model_validate(
        {
            "model": MODEL,
            "max_tokens": 8,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                             {"type": "image", "source": {"type": "url", "url": "http://x/a.png"}}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                                  {"type": "redacted_thinking", "data": "opaque"},
                                                  {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                   "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                              "content": [{"type": "text", "text": "no network"}]},
                                             {"type": "text", "text": "Try again"}]},
                {"role": "system", "content": "Reminder."},
                {"role": "assistant", "content": "Sure:"},
            ],
            "tools": [WEATHER],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        }
    )  # fmt: skip
    conversation = conversation_of(request)
    system, user, assistant, tool, user2, late = conversation.messages
    assert system.parts == [Text("Be brief.", "system.0")]
    assert user.parts == [Text("Look:", "messages.0.content.0"), Image("http://x/a.png", "messages.0.content.1.source")]
    assert assistant.parts == [
        Reasoning("hm", "messages.1.content.0"),
        ToolCall("toolu_1", "get_weather", {"city": "Paris"}, "messages.1.content.2"),
    ]
    assert (tool.role, tool.tool_call_id, tool.texts) == ("tool", "toolu_1", ["Error: no network"])
    assert user2.parts == [Text("Try again", "messages.2.content.1")]
    assert (late.role, late.parts) == ("system", [Text("Reminder.", "messages.3.content")])
    assert conversation.continuation == "Sure:"
    assert conversation.tool_choice == ForcedTool("get_weather") and conversation.parallel_tool_calls is False
    assert conversation.tools[0].parameters_origin == "tools.0.input_schema"
    assert conversation.sampling.clamp_max_tokens and conversation.sampling.include_stop_str_in_output is False


def test_late_system_messages_join_the_system_prompt_where_the_template_refuses_them() -> None:
    messages = [
        Message("user", "messages.0.content", [Text("hi", "messages.0.content")]),
        Message("system", "messages.1.content", [Text("late", "messages.1.content")]),
    ]
    joined = joined_late_system([Message("system", "system", [Text("lead", "system")]), *messages])
    assert [(message.role, message.texts) for message in joined] == [("system", ["lead", "late"]), ("user", ["hi"])]
    alone = joined_late_system(messages)
    assert [(message.role, message.texts) for message in alone] == [("system", ["late"]), ("user", ["hi"])]


def _endless(add: AddRequest) -> Any:
    while True:
        yield [output(add, "word ")]


async def test_a_client_that_goes_away_cancels_the_engine_request(serve) -> None:
    served = await serve(fast_model(_endless))
    body = {"model": MODEL, "max_tokens": 4000, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    async with served.client.post("/v1/messages", json=body, headers=VERSION) as response:
        assert response.status == 200
        await response.content.readuntil(b"content_block_delta")
    (add,) = served.engine.adds()
    await eventually(lambda: add.request_id in served.engine.cancels())


async def test_output_config_sets_the_effort_and_holds_the_answer_to_a_schema(serve) -> None:
    fast = fast_model(reply('{"answer": "yes"}'))
    served = await serve(fast)
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]}
    body = {
        "model": MODEL,
        "max_tokens": 32,
        "messages": [{"role": "user", "content": "Yes?"}],
        "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": schema}},
    }
    message = await sdk(served).messages.create(**body)  # type: ignore[arg-type]
    assert json.loads(message.content[0].text) == {"answer": "yes"}  # type: ignore[union-attr]
    assert fast.launcher.engine.adds()[0].params.structured_output is not None  # the engine's grammar
    conversation = conversation_of(MessagesRequest.model_validate(body))
    assert conversation.reasoning_effort == "high"
    assert conversation.template_variables() == {"reasoning_effort": "high", "enable_thinking": True}
    thinking_off = MessagesRequest.model_validate({**body, "thinking": {"type": "disabled"}})
    # The thinking switch the client set wins over the one the effort implies.
    assert conversation_of(thinking_off).template_variables() == {"reasoning_effort": "high", "enable_thinking": False}
