"""Each level of the precedence: request > the model's generation_config.json > built-in defaults.

tiny-llm ships temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.05, max_new_tokens 64.
A fixed seed makes sampled text a fingerprint of the sampling settings that produced it.
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.conftest import Server, start_server

PROMPT = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]
SEED = 1234


def sample(client: openai.OpenAI, **fields: object) -> openai.types.chat.ChatCompletion:
    body = {"ignore_eos": True, **{k: v for k, v in fields.items() if k in {"top_k", "repetition_penalty"}}}
    sent = {k: v for k, v in fields.items() if k not in {"top_k", "repetition_penalty"}}
    return client.chat.completions.create(model="tiny-llm", messages=PROMPT, seed=SEED, extra_body=body, **sent)  # type: ignore[call-overload]


def test_model_generation_config_fills_what_the_request_omits(client: openai.OpenAI, tiny_llm: Path) -> None:
    shipped = json.loads((tiny_llm / "generation_config.json").read_text())
    implicit = sample(client, max_tokens=24)
    explicit = sample(
        client,
        max_tokens=24,
        temperature=shipped["temperature"],
        top_p=shipped["top_p"],
        top_k=shipped["top_k"],
        repetition_penalty=shipped["repetition_penalty"],
    )
    assert implicit.choices[0].message.content == explicit.choices[0].message.content
    # generation_config.json's max_new_tokens bounds a request that sends no max_tokens.
    unbounded = sample(client)
    assert unbounded.usage is not None and unbounded.usage.completion_tokens == shipped["max_new_tokens"]


def test_request_values_override_the_model_generation_config(client: openai.OpenAI) -> None:
    greedy = sample(client, max_tokens=24, temperature=0.0)
    greedy_again = sample(client, max_tokens=24, temperature=0.0, top_k=3)
    # temperature 0 from the request beats the model's 0.7: greedy ignores seed and top_k.
    assert greedy.choices[0].message.content == greedy_again.choices[0].message.content
    model_default = sample(client, max_tokens=24)
    assert model_default.choices[0].message.content != greedy.choices[0].message.content
    limited = sample(client, max_tokens=5)
    assert limited.usage is not None and limited.usage.completion_tokens == 5


def test_builtin_defaults_apply_without_generation_config(tiny_llm_without_defaults: Path, tmp_path: Path) -> None:
    server: Server = start_server(tmp_path, tiny_llm_without_defaults)
    try:
        client = server.client()
        implicit = sample(client, max_tokens=24)
        # OVMS's documented defaults: temperature 1.0, top_p 1.0, top_k 40, repetition_penalty 1.0.
        explicit = sample(client, max_tokens=24, temperature=1.0, top_p=1.0, top_k=40, repetition_penalty=1.0)
        assert implicit.choices[0].message.content == explicit.choices[0].message.content
        other = sample(client, max_tokens=24, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)
        assert other.choices[0].message.content != implicit.choices[0].message.content
    finally:
        server.stop()


@pytest.mark.parametrize("limit", [6])
def test_max_tokens_limit_is_the_default_and_the_ceiling(tiny_llm: Path, tmp_path: Path, limit: int) -> None:
    server = start_server(tmp_path, tiny_llm, "--max_tokens_limit", str(limit))
    try:
        client = server.client()
        default = sample(client)
        assert default.usage is not None and default.usage.completion_tokens == limit
        with pytest.raises(openai.BadRequestError) as excinfo:
            sample(client, max_tokens=limit + 1)
        assert "max_tokens_limit" in excinfo.value.message
    finally:
        server.stop()
