"""Ollama's native API on the fast layer, through the real ``ollama`` Python client: chat and
generate (streamed and unary, the stream concatenating to the unary answer), tool calls with
arguments as objects, thinking, the model listings, durations, and errors in Ollama's shape."""

from __future__ import annotations

from typing import Any

import httpx
import ollama
import pytest

from ovserve.engine.messages import AddRequest
from ovserve.parsers import REASONING_PARSERS
from tests.fast.harness import MODEL, Served, fast_model
from tests.fast.scripted_engine import reply

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def last_add(served: Served) -> AddRequest:
    return [command for command in served.engine.received if isinstance(command, AddRequest)][-1]


def client_of(served: Served, **kwargs: Any) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=str(served.client.make_url("")).rstrip("/"), **kwargs)


async def test_chat_stream_concatenates_to_the_unary_answer(serve) -> None:
    served = await serve(fast_model(reply("Hel", "lo", " there")))
    client = client_of(served)
    messages = [{"role": "user", "content": "Hi"}]
    unary = await client.chat(model=MODEL, messages=messages, stream=False)
    lines = [line async for line in await client.chat(model=MODEL, messages=messages, stream=True)]
    assert unary.message.content == "Hello there"
    assert "".join(line.message.content or "" for line in lines) == unary.message.content
    assert [line.done for line in lines] == [False, False, False, True]
    last = lines[-1]
    assert last.done_reason == unary.done_reason == "stop"
    assert last.eval_count == unary.eval_count == 3
    assert last.prompt_eval_count == unary.prompt_eval_count == served.models[0].prompt_tokens(messages)
    for answer in (unary, last):
        assert answer.total_duration and answer.total_duration > 0
        assert answer.load_duration is not None and answer.load_duration > 0
        assert answer.prompt_eval_duration and answer.prompt_eval_duration > 0
        assert answer.eval_duration is not None and answer.eval_duration >= 0
        assert answer.total_duration >= answer.load_duration + answer.prompt_eval_duration + answer.eval_duration


async def test_chat_streams_ndjson_by_default(serve) -> None:
    served = await serve(fast_model(reply("a", "b")))
    async with served.client.post(
        "/api/chat", json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    ) as r:
        assert r.status == 200
        assert r.content_type == "application/x-ndjson"
        text = await r.text()
    lines = text.splitlines()
    assert len(lines) == 3 and text.endswith("\n")


async def test_num_predict_sets_the_limit_and_length_is_the_done_reason(serve) -> None:
    served = await serve(fast_model(reply("a", "b", finish="length")))
    answer = await client_of(served).chat(
        model=MODEL, messages=[{"role": "user", "content": "x"}], options={"num_predict": 2}, stream=False
    )
    assert last_add(served).params.max_new_tokens == 2
    assert answer.done_reason == "length"


async def test_generate_stream_and_unary_agree(serve) -> None:
    served = await serve(fast_model(reply("Once", " upon")))
    client = client_of(served)
    unary = await client.generate(model=MODEL, prompt="Tell me", system="Be brief", stream=False)
    lines = [
        line async for line in await client.generate(model=MODEL, prompt="Tell me", system="Be brief", stream=True)
    ]
    assert unary.response == "Once upon" == "".join(line.response for line in lines)
    assert lines[-1].done and lines[-1].eval_count == unary.eval_count == 2
    prompt = served.models[0].model.render_chat(
        [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Tell me"}], None, None
    )
    assert unary.prompt_eval_count == len(prompt)


async def test_generate_raw_sends_the_prompt_as_it_is(serve) -> None:
    served = await serve(fast_model(reply("!")))
    answer = await client_of(served).generate(model=MODEL, prompt="[INST]hi", raw=True, stream=False)
    assert answer.response == "!"
    assert answer.prompt_eval_count == len("[INST]hi") + 1  # BOS added, no template


async def test_empty_prompt_and_messages_only_load_the_model(serve) -> None:
    served = await serve(fast_model())
    client = client_of(served)
    assert (await client.generate(model=MODEL)).done_reason == "load"
    assert (await client.chat(model=MODEL, messages=[])).done_reason == "load"
    assert not [command for command in served.engine.received if isinstance(command, AddRequest)]


async def test_forced_tool_call_comes_back_with_arguments_as_an_object(serve) -> None:
    served = await serve(fast_model(reply(CALL)))
    client = client_of(served)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    forced = {"tool_choice": "get_weather"}  # ovserve's extension, through options
    unary = await client.chat(model=MODEL, messages=messages, tools=[WEATHER], options=forced, stream=False)
    (call,) = unary.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert call.function.arguments == {"city": "Paris"}
    assert last_add(served).params.structured_output is not None  # the grammar forced it
    lines = [line async for line in await client.chat(model=MODEL, messages=messages, tools=[WEATHER], stream=True)]
    streamed = [call for line in lines for call in line.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in streamed] == [("get_weather", {"city": "Paris"})]


async def test_tool_results_go_back_to_the_model(serve) -> None:
    served = await serve(fast_model(reply("It is sunny.")))
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]
    answer = await client_of(served).chat(model=MODEL, messages=messages, tools=[WEATHER], stream=False)
    assert answer.message.content == "It is sunny."


def thinking_model(*pieces: str) -> Any:
    fast = fast_model(
        reply(*pieces),
        template="think={{ enable_thinking if enable_thinking is defined else '-' }}"
        "{% for message in messages %}|{{ message.content }}{% endfor %}<|assistant|>",
    )
    fast.model.reasoning_format = REASONING_PARSERS["qwen3"]
    return fast


@pytest.mark.parametrize(("think", "switch"), [(True, "True"), (False, "False"), ("high", "True"), (None, "-")])
async def test_think_reaches_the_template_and_reasoning_comes_back_as_thinking(serve, think, switch) -> None:
    served = await serve(thinking_model("<think>hmm", "</think>", "Yes"))
    client = client_of(served)
    messages = [{"role": "user", "content": "Sure?"}]
    unary = await client.chat(model=MODEL, messages=messages, think=think, stream=False)
    assert unary.message.thinking == "hmm"
    assert unary.message.content == "Yes"
    prompt = last_add(served).prompt
    assert "".join(chr(token) for token in prompt).startswith(f"think={switch}|")
    lines = [line async for line in await client.chat(model=MODEL, messages=messages, think=think, stream=True)]
    assert "".join(line.message.thinking or "" for line in lines) == "hmm"
    generated = await client.generate(model=MODEL, prompt="Sure?", think=think, stream=False)
    assert generated.thinking == "hmm" and generated.response == "Yes"


async def test_think_on_a_model_without_reasoning_is_a_400(serve) -> None:
    served = await serve(fast_model())
    with pytest.raises(ollama.ResponseError) as refused:
        await client_of(served).chat(model=MODEL, messages=[{"role": "user", "content": "x"}], think=True)
    assert refused.value.status_code == 400
    assert "does not support thinking" in refused.value.error


async def test_format_json_and_schema_constrain_the_output(serve) -> None:
    served = await serve(fast_model(reply('{"a": 1}')))
    client = client_of(served)
    messages = [{"role": "user", "content": "x"}]
    await client.chat(model=MODEL, messages=messages, format="json", stream=False)
    assert last_add(served).params.structured_output is not None
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    answer = await client.chat(model=MODEL, messages=messages, format=schema, stream=False)
    assert last_add(served).params.structured_output is not None
    assert answer.message.content == '{"a": 1}'


async def test_listings_version_and_root(serve) -> None:
    served = await serve(fast_model())
    client = client_of(served)
    listed = await client.list()
    assert [model.model for model in listed.models] == [MODEL]
    running = await client.ps()
    assert [model.model for model in running.models] == [MODEL]
    assert running.models[0].context_length == 4096
    shown = await client.show(MODEL)
    assert shown.template == served.models[0].model.template.source
    assert shown.capabilities == ["completion", "tools"]
    async with served.client.get("/api/version") as r:
        assert (await r.json())["version"]
    async with served.client.get("/") as r:
        assert await r.text() == "Ollama is running"
    async with served.client.head("/") as r:
        assert r.status == 200


async def test_errors_have_ollamas_shape(serve) -> None:
    served = await serve(fast_model())
    client = client_of(served)
    with pytest.raises(ollama.ResponseError) as missing:
        await client.chat(model="nope", messages=[{"role": "user", "content": "x"}])
    assert missing.value.status_code == 404
    assert "nope" in missing.value.error
    with pytest.raises(ollama.ResponseError) as pull:
        await client.pull("llama3")
    assert pull.value.status_code == 400 and "ovserve export" in pull.value.error
    async with served.client.get("/api/nothing") as r:
        assert r.status == 404 and set(await r.json()) == {"error"}


async def test_api_keys_are_honoured_as_bearer_tokens(serve) -> None:
    served = await serve(fast_model(), api_key=["s3cret"])
    with pytest.raises(ollama.ResponseError) as refused:
        await client_of(served).list()
    assert refused.value.status_code == 401
    listed = await client_of(served, headers={"Authorization": "Bearer s3cret"}).list()
    assert [model.model for model in listed.models] == [MODEL]
    async with served.client.get("/") as r:
        assert r.status == 200  # Ollama's liveness answer stays open, as the probes do


async def test_stream_failure_is_an_error_line(serve) -> None:
    from ovserve.engine.messages import EngineErrorKind
    from tests.fast.scripted_engine import end_with

    served = await serve(fast_model(end_with(EngineErrorKind.ENGINE, "boom")))
    async with served.client.post(
        "/api/chat", json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    ) as r:
        text = await r.text()
    assert r.status in (200, 500)
    last = httpx.Response(200, content=text.splitlines()[-1]).json()
    assert set(last) == {"error"}


async def test_a_latest_tag_names_the_served_model(serve) -> None:
    served = await serve(fast_model(reply("ok")))
    client = client_of(served)
    answer = await client.chat(model=f"{MODEL}:latest", messages=[{"role": "user", "content": "x"}], stream=False)
    assert answer.model == MODEL and answer.message.content == "ok"
    assert (await client.show(f"{MODEL}:latest")).capabilities
    with pytest.raises(ollama.ResponseError) as other_tag:
        await client.chat(model=f"{MODEL}:7b", messages=[{"role": "user", "content": "x"}])
    assert other_tag.value.status_code == 404
