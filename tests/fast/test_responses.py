"""The Responses API over the scripted engine: items, events, tool calls, reasoning, stored state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ovserve.api import keys
from ovserve.dialects.openai.responses.store import OPEN_OWNER
from ovserve.engine.messages import AddRequest
from ovserve.parsers import reasoning_parser
from tests.fast.harness import eventually, fast_model
from tests.fast.scripted_engine import DIE, Step, output, reply
from tests.openai_schema import validate

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
CALL_PIECES = ('<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n</tool', "_call>")


def output_text(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def final_response(events: list[dict[str, Any]]) -> dict[str, Any]:
    return events[-1]["response"]


async def test_unary_response_has_a_message_item_usage_and_matches_the_schema(serve) -> None:
    fast = fast_model(reply("Hello", " there"))
    served = await serve(fast)
    status, body = await served.post(
        "/v3/responses", {"input": "Hi", "instructions": "Be brief.", "metadata": {"k": "v"}}
    )
    assert status == 200, body
    validate(body, "Response")
    assert body["id"].startswith("resp_") and body["object"] == "response" and body["status"] == "completed"
    (message,) = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant" and message["status"] == "completed"
    assert output_text(body) == "Hello there"
    # instructions are the system message, a string input is one user message.
    expected = fast.prompt_tokens([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert body["usage"]["input_tokens"] == expected
    assert body["usage"]["output_tokens"] == 2
    assert body["usage"]["total_tokens"] == expected + 2
    assert body["metadata"] == {"k": "v"} and body["instructions"] == "Be brief."


async def test_stream_sends_the_documented_event_sequence_numbered_and_named(serve) -> None:
    served = await serve(fast_model(reply("Hel", "lo")))
    status, events = await served.post("/v3/responses", {"input": "Hi", "stream": True})
    assert status == 200
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    for event in events:
        validate(event, "ResponseStreamEvent")
    assert "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta") == "Hello"
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    final = final_response(events)
    assert output_text(final) == "Hello" and final["usage"]["output_tokens"] == 2
    # Every event carries the one response's id and its item's id.
    item_id = events[2]["item"]["id"]
    assert all(event.get("item_id", item_id) == item_id for event in events)
    assert {events[0]["response"]["id"], final["id"]} == {final["id"]}


async def test_max_output_tokens_makes_an_incomplete_response(serve) -> None:
    served = await serve(fast_model(reply("Hel", "lo", finish="length")))
    status, body = await served.post("/v3/responses", {"input": "Hi", "max_output_tokens": 2})
    assert status == 200, body
    validate(body, "Response")
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    assert served.engine.adds()[0].params.max_new_tokens == 2
    status, events = await served.post("/v3/responses", {"input": "Hi", "max_output_tokens": 2, "stream": True})
    assert events[-1]["type"] == "response.incomplete"
    assert final_response(events)["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_a_tool_call_is_a_function_call_item_unary_and_streamed(serve) -> None:
    served = await serve(fast_model(reply(*CALL_PIECES)))
    body_in = {"input": "Weather in Paris?", "tools": [TOOL]}
    status, body = await served.post("/v3/responses", body_in)
    assert status == 200, body
    validate(body, "Response")
    (call,) = body["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["call_id"].startswith("call_") and call["arguments"] == '{"city": "Paris"}'
    assert body["tools"][0]["name"] == "get_weather"

    status, events = await served.post("/v3/responses", {**body_in, "stream": True})
    for event in events:
        validate(event, "ResponseStreamEvent")
    kinds = [event["type"] for event in events]
    assert kinds[2:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[2]["item"]["arguments"] == "" and events[2]["item"]["status"] == "in_progress"
    assert events[3]["delta"] == '{"city": "Paris"}' and events[4]["arguments"] == '{"city": "Paris"}'


async def test_function_call_output_round_trip_renders_as_the_chat_tool_turn(serve) -> None:
    fast = fast_model(reply("It is sunny."))
    served = await serve(fast)
    items = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
    ]
    status, body = await served.post("/v3/responses", {"input": items, "tools": [TOOL]})
    assert status == 200, body
    assert output_text(body) == "It is sunny."
    chat_messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]  # fmt: skip
    chat_status, chat = await served.chat(messages=chat_messages, tools=[{"type": "function", "function": {
        key: value for key, value in TOOL.items() if key != "type"}}])  # fmt: skip
    assert chat_status == 200, chat
    assert body["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]


def thinks_then_answers(add: AddRequest) -> Iterator[Step]:
    yield [output(add, "<think>Paris is")]
    yield [output(add, " in France</think>")]
    yield [output(add, "It is sunny.", finish="stop")]


async def test_reasoning_becomes_a_reasoning_item_before_the_message(serve) -> None:
    fast = fast_model(thinks_then_answers)
    fast.model.reasoning_format = reasoning_parser("qwen3")
    served = await serve(fast)
    status, body = await served.post("/v3/responses", {"input": "Weather?"})
    assert status == 200, body
    validate(body, "Response")
    reasoning, message = body["output"]
    assert message["type"] == "message"
    assert reasoning["type"] == "reasoning" and reasoning["content"] == [
        {"type": "reasoning_text", "text": "Paris is in France"}
    ]
    assert output_text(body) == "It is sunny."

    status, events = await served.post("/v3/responses", {"input": "Weather?", "stream": True})
    for event in events:
        validate(event, "ResponseStreamEvent")
    thought = "".join(event["delta"] for event in events if event["type"] == "response.reasoning_text.delta")
    assert thought == "Paris is in France"
    assert [item["type"] for item in final_response(events)["output"]] == ["reasoning", "message"]
    # Sent back, the reasoning item is the assistant turn's reasoning_content (stream == unary items).
    assert [item["type"] for item in final_response(events)["output"]] == [item["type"] for item in body["output"]]


async def test_previous_response_id_continues_with_the_same_prompt_as_resending_the_history(serve) -> None:
    fast = fast_model(reply("First answer."))
    served = await serve(fast)
    status, first = await served.post("/v3/responses", {"input": "Question one", "instructions": "Be brief."})
    assert status == 200, first
    fast.launcher.script = reply("Second answer.")
    status, continued = await served.post(
        "/v3/responses",
        {"input": "Question two", "previous_response_id": first["id"], "instructions": "Be brief."},
    )
    assert status == 200, continued
    resent_input = [
        {"role": "user", "content": "Question one"},
        *first["output"],
        {"role": "user", "content": "Question two"},
    ]
    status, resent = await served.post("/v3/responses", {"input": resent_input, "instructions": "Be brief."})
    assert status == 200, resent
    assert continued["usage"]["input_tokens"] == resent["usage"]["input_tokens"]
    adds = served.engine.adds()
    assert adds[1].prompt == adds[2].prompt  # the very same token ids reach the engine
    assert continued["previous_response_id"] == first["id"]
    # A chain of three: the second response's conversation includes the first.
    status, third = await served.post("/v3/responses", {"input": "Three", "previous_response_id": continued["id"]})
    assert status == 200, third
    assert third["usage"]["input_tokens"] > continued["usage"]["input_tokens"]


async def test_get_and_delete_a_stored_response_and_store_false_keeps_nothing(serve) -> None:
    served = await serve(fast_model(reply("Hi!")))
    status, created = await served.post("/v3/responses", {"input": "Hello"})
    async with served.client.get(f"/v3/responses/{created['id']}") as response:
        assert response.status == 200
        assert await response.json() == created
    async with served.client.delete(f"/v1/responses/{created['id']}") as response:
        assert await response.json() == {"id": created["id"], "object": "response.deleted", "deleted": True}
    async with served.client.get(f"/v3/responses/{created['id']}") as response:
        assert response.status == 404
        assert (await response.json())["error"]["code"] == "not_found"

    status, unstored = await served.post("/v3/responses", {"input": "Hello", "store": False})
    assert unstored["store"] is False
    status, body = await served.post("/v3/responses", {"input": "Again", "previous_response_id": unstored["id"]})
    assert status == 404 and body["error"]["param"] == "previous_response_id"


async def test_a_stream_is_stored_once_it_completes(serve) -> None:
    served = await serve(fast_model(reply("Streamed.")))
    status, events = await served.post("/v3/responses", {"input": "Hello", "stream": True})
    assert status == 200
    final = final_response(events)
    async with served.client.get(f"/v3/responses/{final['id']}") as response:
        assert await response.json() == final


async def test_without_a_store_previous_response_id_is_refused(serve) -> None:
    served = await serve(fast_model(reply("Hi!")), responses_store="none")
    status, created = await served.post("/v3/responses", {"input": "Hello"})
    assert status == 200 and created["store"] is False
    status, body = await served.post("/v3/responses", {"input": "Again", "previous_response_id": created["id"]})
    assert status == 400 and body["error"]["param"] == "previous_response_id"
    assert "--responses_store none" in body["error"]["message"]
    assert len(served.engine.adds()) == 1


def dies_after_hello(add: AddRequest) -> Iterator[Step]:
    yield [output(add, "Hel")]
    yield DIE


async def test_engine_death_mid_stream_sends_response_failed_and_closes(serve) -> None:
    served = await serve(fast_model(dies_after_hello))
    status, events = await served.post("/v3/responses", {"input": "Hi", "stream": True})
    assert status == 200
    failed = events[-1]
    assert failed["type"] == "response.failed"
    validate(failed, "ResponseStreamEvent")
    assert failed["response"]["status"] == "failed" and failed["response"]["error"]["code"] == "server_error"
    assert failed["sequence_number"] == len(events) - 1
    # The text generated before the failure is in the failed response's output.
    assert output_text(failed["response"]) == "Hel"
    async with served.client.get(f"/v3/responses/{failed['response']['id']}") as response:
        assert response.status == 404  # a failed response is not stored


async def test_engine_death_during_a_unary_response_is_a_retryable_503(serve) -> None:
    served = await serve(fast_model(dies_after_hello))
    async with served.client.post("/v3/responses", json={"model": "fast-model", "input": "Hi"}) as response:
        assert response.status == 503
        assert int(response.headers["Retry-After"]) >= 1
        body = await response.json()
    assert body["error"]["code"] == "engine_died"
    assert body["error"]["type"] == "service_unavailable"


async def test_a_client_disconnect_mid_stream_cancels_the_engine_request(serve) -> None:
    def endless(add: AddRequest) -> Iterator[Step]:
        while True:
            yield [output(add, "word ")]

    served = await serve(fast_model(endless))
    async with served.client.post(
        "/v3/responses", json={"model": "fast-model", "input": "Hi", "stream": True}
    ) as response:
        await response.content.readline()
    await eventually(served.engine.cancels)


async def test_sampling_extensions_and_text_format_reach_the_engine(serve) -> None:
    served = await serve(fast_model(reply('{"a":1}')))
    body = {
        "input": "JSON please",
        "top_k": 5,
        "repetition_penalty": 1.1,
        "seed": 7,
        "temperature": 0.5,
        "text": {"format": {"type": "json_schema", "name": "obj", "schema": {"type": "object", "properties": {
            "a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}},
    }  # fmt: skip
    status, response = await served.post("/v3/responses", body)
    assert status == 200, response
    params = served.engine.adds()[0].params
    assert (params.top_k, params.repetition_penalty, params.seed, params.temperature) == (5, 1.1, 7, 0.5)
    assert params.structured_output is not None and "regex" in params.structured_output
    assert response["text"]["format"]["name"] == "obj"


async def test_a_stream_past_the_request_timeout_ends_with_response_failed(serve) -> None:
    def endless(add: AddRequest) -> Iterator[Step]:
        while True:
            yield [output(add, "word ")]

    served = await serve(fast_model(endless), request_timeout=0.3)
    status, events = await served.post("/v3/responses", {"input": "Hi", "stream": True})
    assert status == 200
    failed = events[-1]
    assert failed["type"] == "response.failed" and "--request_timeout" in failed["response"]["error"]["message"]
    assert output_text(failed["response"]).startswith("word word")
    await eventually(served.engine.cancels)


async def test_a_model_that_says_nothing_gets_an_empty_message(serve) -> None:
    served = await serve(fast_model(reply("")))
    status, body = await served.post("/v3/responses", {"input": "Hi"})
    assert status == 200 and [item["type"] for item in body["output"]] == ["message"] and output_text(body) == ""
    status, events = await served.post("/v3/responses", {"input": "Hi", "stream": True})
    assert "response.output_text.delta" not in [event["type"] for event in events]
    assert final_response(events)["output"][0]["content"][0]["text"] == ""
    for event in events:
        validate(event, "ResponseStreamEvent")


async def test_a_function_call_stored_by_an_older_version_reads_back_without_its_empty_content(serve) -> None:
    # Up to a589b3f a response's function_call items carried "content": [] (stored that way too).
    served = await serve(fast_model(reply(*CALL_PIECES)))
    status, created = await served.post("/v3/responses", {"input": "Weather in Paris?", "tools": [TOOL]})
    assert status == 200 and "content" not in created["output"][0]
    legacy = {**created, "id": "resp_legacy", "output": [{**created["output"][0], "content": []}]}
    assert await served.client.app[keys.RESPONSES].store.put(legacy, [], owner=OPEN_OWNER)
    async with served.client.get("/v3/responses/resp_legacy") as response:
        assert response.status == 200
        assert await response.json() == {**created, "id": "resp_legacy"}
