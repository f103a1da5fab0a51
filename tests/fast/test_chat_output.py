"""What the service makes of engine outputs: stop strings, choices, tool calls, finish reasons, usage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ovserve.engine.messages import AddRequest, RequestEnded
from tests.fast.harness import choices_by_index, eventually, fast_model, streamed_text
from tests.fast.scripted_engine import ScriptedEngine, Step, output, reply

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def endless(*pieces: str) -> Any:
    """A script that says ``pieces`` and then keeps generating until the server cancels it."""

    def script(add: AddRequest) -> Iterator[Step]:
        for piece in pieces:
            yield [output(add, piece)]
        while True:
            yield [output(add, " more")]

    return script


async def cancelled(engine: ScriptedEngine) -> list[int]:
    await eventually(engine.cancels)
    return engine.cancels()


async def test_a_stop_string_split_across_engine_outputs_ends_the_text_before_it(serve, messages) -> None:
    served = await serve(fast_model(endless("Hello wor", "ld. ST", "OP and then")))
    status, body = await served.chat(messages=messages, stop=["STOP"])
    assert status == 200, body
    (choice,) = body["choices"]
    assert choice["message"]["content"] == "Hello world. "
    assert choice["finish_reason"] == "stop"
    # The engine would have gone on: the server cancelled its request.
    assert await cancelled(served.engine) == [served.engine.adds()[0].request_id]


async def test_a_streamed_stop_string_is_sent_once_and_nothing_after_it(serve, messages) -> None:
    served = await serve(fast_model(endless("Hello wor", "ld. ST", "OP and then")))
    status, events = await served.chat(messages=messages, stop=["STOP"], stream=True)
    assert status == 200
    assert events[-1] == "[DONE]"
    (chunks,) = choices_by_index(events).values()
    # Streams include the stop string unless include_stop_str_in_output says otherwise (OVMS).
    assert streamed_text(chunks) == "Hello world. STOP"
    assert [chunk["finish_reason"] for chunk in chunks if chunk["finish_reason"]] == ["stop"]
    assert await cancelled(served.engine)


def two_choices(add: AddRequest) -> Iterator[Step]:
    # Interleaved, and choice 1 finishes first, on the length limit.
    yield [output(add, "Red", index=0), output(add, "Blue", index=1)]
    yield [output(add, " and", index=1, finish="length"), output(add, " wine", index=0)]
    yield [output(add, ".", index=0, finish="stop"), RequestEnded(add.request_id)]


async def test_each_of_n_choices_keeps_its_index_text_and_finish_reason(serve, messages) -> None:
    fast = fast_model(two_choices)
    served = await serve(fast)
    status, body = await served.chat(messages=messages, n=2, temperature=0.7)
    assert status == 200, body
    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in body["choices"]] == [
        (0, "Red wine.", "stop"),
        (1, "Blue and", "length"),
    ]
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["prompt_tokens"] == fast.prompt_tokens(messages)

    status, events = await served.chat(messages=messages, n=2, temperature=0.7, stream=True)
    grouped = choices_by_index(events)
    assert sorted(grouped) == [0, 1]
    assert streamed_text(grouped[0]) == "Red wine." and streamed_text(grouped[1]) == "Blue and"
    assert grouped[1][-1]["finish_reason"] == "length" and grouped[0][-1]["finish_reason"] == "stop"


def best_beams_out_of_order(add: AddRequest) -> Iterator[Step]:
    # The engine sends the n best beams at the end, numbered by rank; the pipe need not keep order.
    yield [
        output(add, "second best", index=1, tokens=2, finish="stop"),
        output(add, "best", index=0, tokens=1, finish="stop"),
        RequestEnded(add.request_id),
    ]


async def test_beam_search_choices_are_listed_by_rank(serve, messages) -> None:
    served = await serve(fast_model(best_beams_out_of_order))
    status, body = await served.chat(messages=messages, n=2, best_of=3, temperature=0)
    assert status == 200, body
    assert [(c["index"], c["message"]["content"]) for c in body["choices"]] == [(0, "best"), (1, "second best")]
    params = served.engine.adds()[0].params
    assert (params.beam_search, params.best_of, params.n) == (True, 3, 2)


TOOL_CALL_PIECES = ('<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n</tool', "_call>")


async def test_a_hermes_tool_call_streams_as_tool_call_deltas(serve, messages) -> None:
    served = await serve(fast_model(reply(*TOOL_CALL_PIECES)))
    status, events = await served.chat(messages=messages, tools=[WEATHER_TOOL], stream=True)
    assert status == 200
    (chunks,) = choices_by_index(events).values()
    assert chunks[0]["delta"] == {"role": "assistant", "content": None}
    calls = [piece for chunk in chunks for piece in chunk["delta"].get("tool_calls", [])]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    arguments = "".join(piece["function"]["arguments"] for piece in calls)
    assert json.loads(arguments) == {"city": "Paris"}
    assert all(piece["index"] == 0 for piece in calls)
    assert "<tool_call>" not in streamed_text(chunks)
    assert chunks[-1]["finish_reason"] == "tool_calls"


async def test_a_unary_tool_call_has_no_content_and_finishes_with_tool_calls(serve, messages) -> None:
    fast = fast_model(reply(*TOOL_CALL_PIECES))
    served = await serve(fast)
    status, body = await served.chat(messages=messages, tools=[WEATHER_TOOL])
    assert status == 200, body
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    # The template saw the tools: they count as prompt tokens.
    assert body["usage"]["prompt_tokens"] == fast.prompt_tokens(messages, [WEATHER_TOOL])


async def test_output_cut_by_max_tokens_finishes_with_length(serve, messages) -> None:
    served = await serve(fast_model(reply("One", " two", finish="length")))
    status, body = await served.chat(messages=messages, max_tokens=2)
    assert status == 200, body
    assert body["choices"][0]["finish_reason"] == "length"
    assert served.engine.adds()[0].params.max_new_tokens == 2


async def test_stream_usage_comes_last_when_asked_and_not_at_all_otherwise(serve, messages) -> None:
    fast = fast_model(reply("Hel", "lo", tokens=2))
    served = await serve(fast)
    status, events = await served.chat(messages=messages, stream=True, stream_options={"include_usage": True})
    assert status == 200
    *chunks, last, done = events
    assert done == "[DONE]"
    assert all(chunk["usage"] is None for chunk in chunks)
    assert last["choices"] == []
    prompt_tokens = fast.prompt_tokens(messages)
    assert last["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 4,
        "total_tokens": prompt_tokens + 4,
        "prompt_tokens_details": {"cached_tokens": 0},
    }

    status, events = await served.chat(messages=messages, stream=True)
    assert all("usage" not in chunk for chunk in events[:-1])


def echo_prompt(add: AddRequest) -> Iterator[Step]:
    """Answers with the prompt upper-cased (the character tokenizer's ids are code points)."""
    assert isinstance(add.prompt, list)
    text = "".join(chr(token) for token in add.prompt[1:])  # after BOS
    for index in range(add.params.n):
        yield [output(add, f"{text.upper()}{index}", index=index, finish="stop")]
    yield [RequestEnded(add.request_id)]


async def test_completion_choices_are_numbered_prompt_times_n_plus_choice(serve) -> None:
    served = await serve(fast_model(echo_prompt))
    status, body = await served.completion(prompt=["ab", "cd"], n=2, temperature=0.5, echo=True)
    assert status == 200, body
    assert [(c["index"], c["text"]) for c in body["choices"]] == [
        (0, "abAB0"),
        (1, "abAB1"),
        (2, "cdCD0"),
        (3, "cdCD1"),
    ]
    # One engine request per prompt; prompt tokens of both (with BOS) are counted.
    assert len(served.engine.adds()) == 2
    assert body["usage"]["prompt_tokens"] == 6 and body["usage"]["completion_tokens"] == 4
