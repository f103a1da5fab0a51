"""Chat completions end to end: the openai SDK -> real HTTP -> engine process -> real pipeline."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.conftest import Server

HELLO = [{"role": "user", "content": "Write a short poem about the sea."}]
GREEDY = {"temperature": 0.0}


def sse_events(response: httpx.Response) -> list[str]:
    """The payloads of the ``data:`` lines of an SSE response, in order."""
    return [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]


def prompt_token_count(model_dir, messages) -> int:
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(model_dir))
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return int(tokenizer.encode(prompt, add_special_tokens=False).input_ids.shape[1])


def test_unary_completion_has_openai_shape_and_usage(client: openai.OpenAI, tiny_llm) -> None:
    completion = client.chat.completions.create(model="tiny-llm", messages=HELLO, max_tokens=20, **GREEDY)
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "tiny-llm"
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in {"stop", "length"}
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens == prompt_token_count(tiny_llm, HELLO)
    assert 1 <= usage.completion_tokens <= 20
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_v1_alias_serves_the_same_handler(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "tiny-llm", "messages": HELLO, "max_tokens": 5, "temperature": 0},
        timeout=60,
    )
    assert response.status_code == 200
    assert response.json()["object"] == "chat.completion"


def test_stream_sends_role_chunk_then_content_then_done(server: Server) -> None:
    body = {"model": "tiny-llm", "messages": HELLO, "max_tokens": 15, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/v3/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    first = chunks[0]
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(chunk["id"] == first["id"] for chunk in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in {"stop", "length"}
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks[:-1])
    assert "usage" not in first  # only with stream_options.include_usage


def test_streamed_text_joined_equals_unary_text_for_greedy(client: openai.OpenAI) -> None:
    for messages in (HELLO, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]):
        unary = client.chat.completions.create(model="tiny-llm", messages=messages, max_tokens=40, **GREEDY)
        stream = client.chat.completions.create(
            model="tiny-llm", messages=messages, max_tokens=40, stream=True, **GREEDY
        )
        pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
        assert "".join(pieces) == unary.choices[0].message.content


def test_stream_include_usage_sends_a_final_usage_chunk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny-llm",
        messages=HELLO,
        max_tokens=10,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
        **GREEDY,
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 10
    assert all(chunk.usage is None for chunk in chunks[:-1])


def test_max_tokens_ends_with_finish_reason_length(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="tiny-llm", messages=HELLO, max_tokens=7, extra_body={"ignore_eos": True}, **GREEDY
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 7
    newer_name = client.chat.completions.create(
        model="tiny-llm", messages=HELLO, max_completion_tokens=4, extra_body={"ignore_eos": True}, **GREEDY
    )
    assert newer_name.usage is not None and newer_name.usage.completion_tokens == 4


def test_stop_sequence_trims_exactly_unary_and_stream(client: openai.OpenAI) -> None:
    full = client.chat.completions.create(
        model="tiny-llm", messages=HELLO, max_tokens=40, extra_body={"ignore_eos": True}, **GREEDY
    )
    text = full.choices[0].message.content or ""
    # A stop sequence that starts mid-way through the output, wherever token boundaries are
    # (printable ASCII: a random model also emits partial UTF-8 that decodes to U+FFFD).
    start = next(i for i in range(6, len(text) - 3) if text[i : i + 3].isascii() and text[i : i + 3].isprintable())
    stop = text[start : start + 3]
    expected_prefix = text[: text.index(stop)]

    unary = client.chat.completions.create(
        model="tiny-llm", messages=HELLO, max_tokens=40, stop=[stop], extra_body={"ignore_eos": True}, **GREEDY
    )
    assert unary.choices[0].message.content == expected_prefix
    assert unary.choices[0].finish_reason == "stop"

    stream = client.chat.completions.create(
        model="tiny-llm",
        messages=HELLO,
        max_tokens=40,
        stop=stop,
        stream=True,
        extra_body={"ignore_eos": True},
        **GREEDY,
    )
    chunks = [chunk for chunk in stream if chunk.choices]
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    # OVMS: streaming includes the stop string by default.
    assert streamed == expected_prefix + stop
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seed_makes_sampling_reproducible(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str:
        completion = client.chat.completions.create(
            model="tiny-llm", messages=HELLO, max_tokens=30, temperature=1.0, seed=seed, extra_body={"top_k": 0}
        )
        return completion.choices[0].message.content or ""

    assert sample(7) == sample(7)
    assert len({sample(seed) for seed in (1, 2, 3, 4)}) > 1


def test_chat_template_kwargs_reach_the_template(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as excinfo:
        client.chat.completions.create(
            model="tiny-llm", messages=HELLO, extra_body={"chat_template_kwargs": {"messages": []}}
        )
    assert excinfo.value.body["param"] == "chat_template_kwargs"  # type: ignore[index]
    completion = client.chat.completions.create(
        model="tiny-llm",
        messages=HELLO,
        max_tokens=3,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert completion.choices[0].message.content is not None


def test_message_content_as_list_of_text_parts(client: openai.OpenAI) -> None:
    parts = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Write a short poem"}, {"type": "text", "text": "about the sea."}],
        }
    ]
    as_parts = client.chat.completions.create(model="tiny-llm", messages=parts, max_tokens=20, **GREEDY)  # type: ignore[arg-type]
    joined = [{"role": "user", "content": "Write a short poem\nabout the sea."}]
    as_text = client.chat.completions.create(model="tiny-llm", messages=joined, max_tokens=20, **GREEDY)  # type: ignore[arg-type]
    assert as_parts.choices[0].message.content == as_text.choices[0].message.content


def test_tool_and_assistant_roles_are_accepted(client: openai.OpenAI) -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    completion = client.chat.completions.create(model="tiny-llm", messages=messages, max_tokens=5)  # type: ignore[arg-type]
    assert completion.choices[0].message.content is not None


def test_models_endpoints_list_the_served_model(server: Server) -> None:
    for prefix in ("/v3", "/v1"):
        listing = httpx.get(f"{server.url}{prefix}/models", timeout=10).json()
        assert listing["object"] == "list"
        assert [model["id"] for model in listing["data"]] == ["tiny-llm"]
    assert server.client().models.retrieve("tiny-llm").id == "tiny-llm"
