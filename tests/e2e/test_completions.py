"""Legacy text completions (``POST /v3/completions``): no chat template, prompt lists, echo, stream."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import Server
from tests.e2e.test_chat_completions import sse_events

PROMPT = "def fibonacci(n):"


def complete(server: Server, path: str = "/v3/completions", **fields: object) -> httpx.Response:
    body = {"model": "tiny-llm", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, **fields}
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def encoded_length(model_dir: Path, text: str) -> int:
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(model_dir))
    return int(tokenizer.encode(text, add_special_tokens=True).input_ids.shape[1])


def test_completion_with_the_sdk_has_text_completion_shape(client: openai.OpenAI, tiny_llm: Path) -> None:
    completion = client.completions.create(
        model="tiny-llm", prompt=PROMPT, max_tokens=9, temperature=0, extra_body={"ignore_eos": True}
    )
    assert completion.object == "text_completion"
    assert completion.id.startswith("cmpl-")
    (choice,) = completion.choices
    assert choice.index == 0 and choice.text and choice.finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 9
    # The prompt is encoded as is (special tokens added, no chat template).
    assert completion.usage.prompt_tokens == encoded_length(tiny_llm, PROMPT)


def test_completion_paths_are_aliases(server: Server) -> None:
    texts = {
        path: complete(server, path).json()["choices"][0]["text"]
        for path in ("/v3/completions", "/v1/completions", "/completions")
    }
    assert len(set(texts.values())) == 1


def test_prompt_list_gives_choices_in_prompt_order(server: Server) -> None:
    prompts = ["import os", "class Foo:", "x = 1"]
    single = [complete(server, prompt=prompt, ignore_eos=True).json()["choices"][0]["text"] for prompt in prompts]
    batch = complete(server, prompt=prompts, ignore_eos=True).json()
    assert [choice["index"] for choice in batch["choices"]] == [0, 1, 2]
    assert [choice["text"] for choice in batch["choices"]] == single
    assert batch["usage"]["completion_tokens"] == 3 * 8


def test_prompt_list_with_n_numbers_choices_prompt_major(server: Server) -> None:
    batch = complete(server, prompt=["import os", "x = 1"], n=2, temperature=1.0, seed=3, ignore_eos=True).json()
    assert [choice["index"] for choice in batch["choices"]] == [0, 1, 2, 3]
    first_prompt = complete(server, prompt="import os", n=2, temperature=1.0, seed=3, ignore_eos=True).json()
    assert [c["text"] for c in batch["choices"][:2]] == [c["text"] for c in first_prompt["choices"]]


def test_echo_prepends_the_prompt(server: Server) -> None:
    plain = complete(server).json()["choices"][0]["text"]
    echoed = complete(server, echo=True).json()["choices"][0]["text"]
    assert echoed == PROMPT + plain


def test_stream_sends_text_chunks_then_usage_then_done(server: Server) -> None:
    unary = complete(server, prompt=["a = ", "b = "], echo=True, ignore_eos=True).json()
    body = {
        "model": "tiny-llm",
        "prompt": ["a = ", "b = "],
        "max_tokens": 8,
        "temperature": 0,
        "echo": True,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{server.url}/v3/completions", json=body, timeout=60) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["object"] == "text_completion" for chunk in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == unary["usage"]
    joined: dict[int, str] = {}
    for chunk in chunks[:-1]:
        assert chunk["usage"] is None
        for choice in chunk["choices"]:
            joined[choice["index"]] = joined.get(choice["index"], "") + choice["text"]
    assert [joined[0], joined[1]] == [choice["text"] for choice in unary["choices"]]


def test_logprobs_zero_returns_the_chosen_tokens(server: Server) -> None:
    choice = complete(server, logprobs=0, ignore_eos=True).json()["choices"][0]
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["text_offset"]) == 8
    assert logprobs["text_offset"][0] == 0
    assert [list(entry) for entry in logprobs["top_logprobs"]] == [[token] for token in logprobs["tokens"]]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"logprobs": 2}, "logprobs"),
        ({"suffix": " return"}, "suffix"),
        ({"echo": True, "logprobs": 0}, "echo"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": ["a", ""]}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": "word " * 3000}, "prompt"),
        ({"messages": [{"role": "user", "content": "hi"}], "prompt": None}, "prompt"),
    ],
    ids=[
        "logprobs above zero",
        "suffix",
        "echo with logprobs",
        "empty list",
        "empty prompt",
        "one empty prompt",
        "token ids",
        "too long",
        "no prompt",
    ],
)
def test_completion_bad_input_is_a_400(server: Server, fields: dict, param: str) -> None:
    response = complete(server, **fields)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_a_dropped_multi_prompt_stream_frees_every_engine_request(server: Server) -> None:
    body = {
        "model": "tiny-llm",
        "prompt": ["one", "two", "three"],
        "max_tokens": 1500,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", f"{server.url}/v3/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert sum(1 for _, line in zip(range(12), lines, strict=False) if line.startswith("data: ")) > 3
        assert server.metric("ovserve_engine_requests") == 3
    deadline = time.monotonic() + 15
    while server.metric("ovserve_engine_requests") != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.metric("ovserve_engine_requests") == 0
    assert server.metric("ovserve_inflight_requests") == 0
