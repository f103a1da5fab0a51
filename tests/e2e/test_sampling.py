"""The sampling and search surface end to end: n, beam search, penalties, top_k, stop tokens, logprobs.

tiny-llm is a random model: assertions compare outputs of the same prompt under different
settings (a fixed seed makes sampled text a fingerprint of the settings), never their meaning.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Server, start_server
from tests.e2e.test_chat_completions import sse_events

HELLO = [{"role": "user", "content": "Write a short poem about the sea."}]
CHAT = "/v3/chat/completions"


def chat(server: Server, **fields: object) -> httpx.Response:
    body = {"model": "tiny-llm", "messages": HELLO, "max_tokens": 12, **fields}
    return httpx.post(f"{server.url}{CHAT}", json=body, timeout=60)


def texts(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [choice["message"]["content"] for choice in response.json()["choices"]]


def test_n_returns_n_sampled_choices(server: Server) -> None:
    response = chat(server, n=3, temperature=1.0, seed=5, ignore_eos=True, max_tokens=8)
    body = response.json()
    assert [choice["index"] for choice in body["choices"]] == [0, 1, 2]
    assert len(set(texts(response))) > 1
    assert all(choice["finish_reason"] == "length" for choice in body["choices"])
    # Usage counts every choice's tokens.
    assert body["usage"]["completion_tokens"] == 3 * 8


def test_stream_with_n_streams_each_index(server: Server) -> None:
    body = {"model": "tiny-llm", "messages": HELLO, "max_tokens": 6, "n": 2, "seed": 3, "stream": True}
    with httpx.stream("POST", f"{server.url}{CHAT}", json={**body, "ignore_eos": True}, timeout=60) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    streamed: dict[int, str] = {}
    roles: dict[int, int] = {}
    finishes: dict[int, str] = {}
    for chunk in chunks:
        (choice,) = chunk["choices"]  # one choice per chunk, tagged by index
        index = choice["index"]
        if choice["delta"].get("role") == "assistant":
            roles[index] = roles.get(index, 0) + 1
        streamed[index] = streamed.get(index, "") + (choice["delta"].get("content") or "")
        if choice["finish_reason"]:
            finishes[index] = choice["finish_reason"]
    assert roles == {0: 1, 1: 1}
    assert finishes == {0: "length", 1: "length"}
    unary = texts(chat(server, max_tokens=6, n=2, seed=3, ignore_eos=True))
    assert [streamed[0], streamed[1]] == unary


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_a_stream_sends_its_text_as_it_is_generated(server: Server, skip_special_tokens: bool) -> None:
    # With special tokens kept, the engine's batched decode once padded shorter windows with the
    # pad token's text: every delta waited for the end and the stream came as one chunk.
    fields = {"max_tokens": 24, "ignore_eos": True, "temperature": 0, "skip_special_tokens": skip_special_tokens}
    body = {"model": "tiny-llm", "messages": HELLO, "stream": True, **fields}
    with httpx.stream("POST", f"{server.url}{CHAT}", json=body, timeout=60) as response:
        events = sse_events(response)
    deltas = [
        choice["delta"].get("content") or ""
        for chunk in (json.loads(event) for event in events[:-1])
        for choice in chunk["choices"]
    ]
    assert sum(1 for delta in deltas if delta) >= 12  # random tokens: some only complete a character
    assert "".join(deltas) == texts(chat(server, **fields))[0]


def test_best_of_is_beam_search_returning_the_n_best_beams(server: Server) -> None:
    first = chat(server, best_of=3, n=3, ignore_eos=True)
    again = chat(server, best_of=3, n=3, ignore_eos=True)
    assert texts(first) == texts(again)  # beam search is deterministic
    assert len(set(texts(first))) == 3
    assert [choice["index"] for choice in first.json()["choices"]] == [0, 1, 2]
    one = chat(server, best_of=3, ignore_eos=True)
    assert texts(one) == texts(first)[:1]  # n=1 returns the best beam
    # n > 1 at temperature 0 can only be beams, of width n.
    assert len(texts(chat(server, n=2, temperature=0, ignore_eos=True))) == 2


def test_length_penalty_is_accepted_with_beam_search(server: Server) -> None:
    for penalty in (-1.0, 0.0, 2.0):
        assert len(texts(chat(server, best_of=2, n=2, length_penalty=penalty, max_tokens=6))) == 2


def test_beam_search_refuses_penalties_it_cannot_apply(server: Server) -> None:
    # tiny-llm's generation_config.json sets repetition_penalty 1.05: as a default it is dropped
    # for beam search (the requests above succeed); sent explicitly it is refused.
    for name, value in (("repetition_penalty", 1.2), ("presence_penalty", 0.5), ("frequency_penalty", 0.5)):
        response = chat(server, best_of=2, **{name: value})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == name
        assert "beam search" in response.json()["error"]["message"]


@pytest.fixture(scope="module")
def configured_server(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with a small best_of_limit, a 10 KB request limit and prefix caching on."""
    running = start_server(
        tmp_path_factory.mktemp("configured"),
        tiny_llm,
        "--best_of_limit",
        "2",
        "--max_request_mb",
        "0.01",
        "--enable_prefix_caching",
        "true",
    )
    yield running
    running.stop()


def test_best_of_limit_caps_best_of_and_n(configured_server: Server) -> None:
    assert len(texts(chat(configured_server, best_of=2, n=2))) == 2
    for fields, param in (({"best_of": 3}, "best_of"), ({"n": 3}, "n")):
        response = chat(configured_server, **fields)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == param
        assert "best_of_limit (2)" in response.json()["error"]["message"]


def test_request_body_over_max_request_mb_is_a_413(configured_server: Server) -> None:
    too_big = chat(configured_server, messages=[{"role": "user", "content": "x" * 20_000}])
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "payload_too_large"


def _prefix_hits(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ovserve_prefix_cache_hits_total" and sample.labels.get("model") == "tiny-llm":
                return sample.value
    return 0.0


def test_cached_tokens_count_the_prompt_blocks_the_prefix_cache_serves(server: Server) -> None:
    """Prefix caching on (the default): the engine's cache serves a resent prompt's whole 32-token
    blocks (the block holding the prompt's end was filled by the answer, so it is not reused),
    and a conversation's next turn reuses the previous turn's."""
    client = server.client()
    topic = f"conversation {uuid.uuid4().hex}: " + " ".join(["tell me about rivers and mountains"] * 12)
    messages: list[dict[str, str]] = [{"role": "user", "content": topic}]
    hits_before = _prefix_hits(server)
    first = client.chat.completions.create(model="tiny-llm", messages=messages, max_tokens=8)  # type: ignore[arg-type]
    again = client.chat.completions.create(model="tiny-llm", messages=messages, max_tokens=8)  # type: ignore[arg-type]
    assert first.usage is not None and again.usage is not None
    assert first.usage.prompt_tokens_details is not None and again.usage.prompt_tokens_details is not None
    prompt_tokens = first.usage.prompt_tokens
    assert prompt_tokens > 96
    # The uuid makes everything after the template's first tokens new to the cache.
    assert (first.usage.prompt_tokens_details.cached_tokens or 0) < 64
    # Its whole blocks; a prompt made only of whole blocks is found whole and computes its last token.
    whole_blocks = min(prompt_tokens // 32 * 32, prompt_tokens - 1)
    assert again.usage.prompt_tokens_details.cached_tokens == whole_blocks
    # The next turn: the history (with the answer re-tokenized from its text) is resent.
    messages += [
        {"role": "assistant", "content": again.choices[0].message.content or ""},
        {"role": "user", "content": "and what about the sea?"},
    ]
    stream = client.chat.completions.create(
        model="tiny-llm",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None][-1]
    assert usage.prompt_tokens_details is not None
    next_turn_cached = usage.prompt_tokens_details.cached_tokens or 0
    assert whole_blocks <= next_turn_cached < usage.prompt_tokens
    served = (first.usage.prompt_tokens_details.cached_tokens or 0) + whole_blocks + next_turn_cached
    assert _prefix_hits(server) - hits_before == served


def test_cached_tokens_are_zero_with_prefix_caching_off(tiny_llm: Path, tmp_path: Path) -> None:
    uncached = start_server(tmp_path, tiny_llm, "--enable_prefix_caching", "false")
    try:
        for _ in range(2):
            assert chat(uncached).json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    finally:
        uncached.stop()


def test_tools_are_rendered_into_the_prompt(server: Server) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    plain = chat(server).json()["usage"]["prompt_tokens"]
    with_tools = chat(server, tools=[tool], tool_choice="auto").json()["usage"]["prompt_tokens"]
    assert with_tools > plain


def test_top_k_one_is_greedy(server: Server) -> None:
    greedy = texts(chat(server, temperature=0, ignore_eos=True))
    for seed in (1, 2):
        assert texts(chat(server, temperature=1.0, top_k=1, seed=seed, ignore_eos=True)) == greedy


def test_top_k_minus_one_zero_and_null_mean_no_filter_and_omitted_means_default(server: Server) -> None:
    def sampled(**top_k: object) -> str:
        return texts(chat(server, temperature=1.5, top_p=1.0, seed=11, ignore_eos=True, max_tokens=24, **top_k))[0]

    unfiltered = sampled(top_k=-1)
    assert sampled(top_k=0) == unfiltered
    assert sampled(top_k=None) == unfiltered  # Databricks: null means no limit
    # Omitted: generation_config.json's top_k (20 for tiny-llm).
    assert sampled() == sampled(top_k=20)
    assert sampled() != unfiltered


def test_max_tokens_null_means_no_model_default(server: Server) -> None:
    # tiny-llm's generation_config.json has max_new_tokens 64: omitting max_tokens uses it,
    # an explicit null (Azure, Databricks) lets generation run to the context instead.
    omitted = httpx.post(
        f"{server.url}{CHAT}", json={"model": "tiny-llm", "messages": HELLO, "ignore_eos": True}, timeout=60
    ).json()
    assert omitted["usage"]["completion_tokens"] == 64
    unlimited = chat(server, max_tokens=None, ignore_eos=True, temperature=0).json()
    usage = unlimited["usage"]
    assert usage["total_tokens"] == 2048  # tiny-llm's context (max_position_embeddings)
    assert unlimited["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repetition_penalty", 1.8),
        ("presence_penalty", 2.0),
        ("frequency_penalty", 2.0),
        ("min_p", 0.3),
        ("top_p", 0.3),
        ("temperature", 0.3),
    ],
)
def test_sampling_field_changes_the_output(server: Server, field: str, value: float) -> None:
    base = {"seed": 21, "ignore_eos": True, "max_tokens": 40, "top_k": -1}
    neutral = {
        "temperature": 1.0,
        "top_p": 1.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "min_p": 0.0,
    }
    plain = texts(chat(server, **base, **neutral))[0]
    changed = texts(chat(server, **base, **{**neutral, field: value}))[0]
    assert changed != plain


def test_seed_range_is_ovms(server: Server) -> None:
    assert chat(server, seed=0).status_code == 200
    assert chat(server, seed=2**32 - 1).status_code == 200
    for bad in (-1, 2**32):
        response = chat(server, seed=bad)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "seed"


@cache
def _decoded_vocab(model_dir: Path) -> dict[str, list[int]]:
    import openvino_genai as ov_genai

    tokenizer = ov_genai.Tokenizer(str(model_dir))
    size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    vocab: dict[str, list[int]] = {}
    for token_id in range(size):
        vocab.setdefault(tokenizer.decode([token_id], skip_special_tokens=False), []).append(token_id)
    return vocab


def test_stop_token_ids_end_the_text_without_the_token(server: Server, tiny_llm: Path) -> None:
    full = chat(server, temperature=0, ignore_eos=True, logprobs=True, max_tokens=12).json()["choices"][0]
    tokens = [entry["token"] for entry in full["logprobs"]["content"]]
    vocab = _decoded_vocab(tiny_llm)
    # A later token that decodes to exactly one id and does not occur earlier.
    position = next(
        k for k in range(2, len(tokens)) if len(vocab.get(tokens[k], [])) == 1 and tokens[k] not in tokens[:k]
    )
    (stop_id,) = vocab[tokens[position]]

    stopped = chat(server, temperature=0, ignore_eos=True, max_tokens=12, stop_token_ids=[stop_id]).json()
    choice = stopped["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] == position + 1  # the stop token was generated
    assert full["message"]["content"].startswith(choice["message"]["content"] + tokens[position])
    assert choice["message"]["content"] == full["message"]["content"][: len(choice["message"]["content"])]

    kept = chat(
        server, temperature=0, ignore_eos=True, max_tokens=12, stop_token_ids=[stop_id], include_stop_str_in_output=True
    ).json()
    assert kept["choices"][0]["message"]["content"] == choice["message"]["content"] + tokens[position]


def test_logprobs_have_openai_content_shape(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="tiny-llm", messages=HELLO, max_tokens=6, temperature=0, logprobs=True, top_logprobs=0
    )
    choice = completion.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    entries = choice.logprobs.content
    assert len(entries) == 6
    assert all(entry.logprob <= 0 and entry.bytes == list(entry.token.encode()) for entry in entries)
    assert all(entry.top_logprobs == [] for entry in entries)
    assert "".join(entry.token for entry in entries).startswith(choice.message.content[:3])  # type: ignore[index]
    without = client.chat.completions.create(model="tiny-llm", messages=HELLO, max_tokens=3, temperature=0)
    assert without.choices[0].logprobs is None


def test_top_logprobs_above_zero_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as excinfo:
        client.chat.completions.create(model="tiny-llm", messages=HELLO, max_tokens=3, logprobs=True, top_logprobs=2)
    assert excinfo.value.body["param"] == "top_logprobs"  # type: ignore[index]
    assert "only the chosen token" in excinfo.value.message


def test_streamed_logprobs_cover_every_token(server: Server) -> None:
    body = {"model": "tiny-llm", "messages": HELLO, "max_tokens": 7, "temperature": 0, "logprobs": True}
    with httpx.stream("POST", f"{server.url}{CHAT}", json={**body, "stream": True, "ignore_eos": True}) as response:
        chunks = [json.loads(event) for event in sse_events(response)[:-1]]
    entries = [
        entry
        for chunk in chunks
        for choice in chunk["choices"]
        for entry in (choice["logprobs"] or {}).get("content", [])
    ]
    assert len(entries) == 7
