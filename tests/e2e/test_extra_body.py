"""The openai SDK carries every OVMS extension field in ``extra_body``, and each one takes effect.

One test per field, each asserting what a user would see change.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

HELLO = [{"role": "user", "content": "Write a short poem about the sea."}]


def create(client: openai.OpenAI, max_tokens: int = 12, **extra: object) -> openai.types.chat.ChatCompletion:
    sent = {key: extra.pop(key) for key in ("temperature", "seed", "stop") if key in extra}
    return client.chat.completions.create(
        model="tiny-llm",
        messages=HELLO,  # type: ignore[arg-type]
        max_tokens=max_tokens,
        extra_body=extra,
        **sent,  # type: ignore[arg-type]
    )


def text(completion: openai.types.chat.ChatCompletion, index: int = 0) -> str:
    return completion.choices[index].message.content or ""


def test_extra_body_ignore_eos_generates_exactly_max_tokens(client: openai.OpenAI) -> None:
    completion = create(client, max_tokens=30, ignore_eos=True, temperature=0)
    assert completion.usage is not None and completion.usage.completion_tokens == 30


def test_extra_body_top_k_one_equals_greedy(client: openai.OpenAI) -> None:
    greedy = create(client, temperature=0, ignore_eos=True)
    assert text(create(client, top_k=1, temperature=1.0, seed=9, ignore_eos=True)) == text(greedy)


def test_extra_body_min_p_near_one_equals_greedy(client: openai.OpenAI) -> None:
    greedy = create(client, temperature=0, ignore_eos=True, repetition_penalty=1.0)
    sampled = create(client, min_p=0.99, top_k=-1, temperature=1.0, seed=9, ignore_eos=True, repetition_penalty=1.0)
    assert text(sampled) == text(greedy)


def test_extra_body_repetition_penalty_changes_the_output(client: openai.OpenAI) -> None:
    sampling = {"temperature": 1.0, "seed": 4, "top_k": -1, "max_tokens": 40, "ignore_eos": True}
    plain = create(client, repetition_penalty=1.0, **sampling)  # type: ignore[arg-type]
    penalised = create(client, repetition_penalty=2.0, **sampling)  # type: ignore[arg-type]
    assert text(plain) != text(penalised)
    assert text(create(client, repetition_penalty=1.0, **sampling)) == text(plain)  # type: ignore[arg-type]


def test_extra_body_include_stop_str_in_output_keeps_the_stop_string(client: openai.OpenAI) -> None:
    full = text(create(client, max_tokens=30, temperature=0, ignore_eos=True))
    stop = next(full[i : i + 2] for i in range(4, len(full) - 2) if full[i : i + 2].isascii() and full[i].isalpha())
    prefix = full[: full.index(stop)]
    assert text(create(client, max_tokens=30, temperature=0, ignore_eos=True, stop=[stop])) == prefix
    kept = create(client, max_tokens=30, temperature=0, ignore_eos=True, stop=[stop], include_stop_str_in_output=True)
    assert text(kept) == prefix + stop


def test_extra_body_skip_special_tokens_false_shows_special_tokens(client: openai.OpenAI) -> None:
    # Random weights: which seed makes tiny-llm emit a special token depends on the build, so the
    # first seed whose raw text shows one is compared with the same sampling, tokens skipped.
    # Temperature 2 flattens the distribution: about 1 token in 800 is one of its 5 special tokens.
    sampling = {"temperature": 2.0, "top_k": -1, "top_p": 1.0, "repetition_penalty": 1.0, "ignore_eos": True}
    for seed in range(40):
        shown = text(create(client, max_tokens=200, skip_special_tokens=False, seed=seed, **sampling))
        if "<|im_start|>" in shown or "<|im_end|>" in shown:
            break
    else:
        pytest.fail("no seed in 0..39 made tiny-llm emit <|im_start|> or <|im_end|>")
    hidden = text(create(client, max_tokens=200, seed=seed, **sampling))
    assert "<|im_start|>" not in hidden and "<|im_end|>" not in hidden
    special = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>")
    for token in special:
        shown = shown.replace(token, "")
    assert shown == hidden


def test_extra_body_best_of_runs_beam_search(client: openai.OpenAI) -> None:
    completion = create(client, n=2, best_of=3, ignore_eos=True)
    assert len(completion.choices) == 2
    assert text(completion, 0) != text(completion, 1)
    again = create(client, n=2, best_of=3, ignore_eos=True)
    assert [text(again, 0), text(again, 1)] == [text(completion, 0), text(completion, 1)]


def test_extra_body_length_penalty_reaches_beam_search(client: openai.OpenAI) -> None:
    for penalty in (0.5, 1.5):
        assert len(create(client, best_of=2, length_penalty=penalty).choices) == 1
    with pytest.raises(openai.BadRequestError) as excinfo:
        create(client, best_of=2, length_penalty="long")
    assert excinfo.value.body["param"] == "length_penalty"  # type: ignore[index]


def test_extra_body_stop_token_ids_stop_generation(client: openai.OpenAI, tiny_llm: Path) -> None:
    import openvino_genai

    # The greedy answer's tokens (from logprobs) and their ids (from the vocabulary): stopping on
    # the id of the 4th token must end the answer right there.
    full = client.chat.completions.create(
        model="tiny-llm",
        messages=HELLO,  # type: ignore[arg-type]
        max_tokens=12,
        temperature=0,
        logprobs=True,
        extra_body={"ignore_eos": True},
    )
    assert full.choices[0].logprobs is not None and full.choices[0].logprobs.content is not None
    tokens = [entry.token for entry in full.choices[0].logprobs.content]
    vocab = openvino_genai.Tokenizer(str(tiny_llm)).get_vocab()
    stop_token = tokens[3]
    stop_id = vocab[stop_token.encode()]
    stopped = client.chat.completions.create(
        model="tiny-llm",
        messages=HELLO,  # type: ignore[arg-type]
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True, "stop_token_ids": [stop_id]},
    )
    assert stopped.choices[0].finish_reason == "stop"
    # The stop token counts as generated but is not part of the text (vLLM, MindIE).
    assert stopped.usage is not None and stopped.usage.completion_tokens == tokens.index(stop_token) + 1
    assert text(stopped) == "".join(tokens[: tokens.index(stop_token)])


def test_extra_body_chat_template_kwargs_reach_the_template(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as excinfo:
        create(client, chat_template_kwargs={"bos_token": "x"})
    assert "chat_template_kwargs" in excinfo.value.message
    assert create(client, chat_template_kwargs={"enable_thinking": False}).choices


def test_extra_body_speculative_knobs_are_refused_by_a_plain_pipeline(client: openai.OpenAI) -> None:
    # They would not change a plain pipeline's output, but a client sending them expects drafting:
    # the 400 says which pipelines take them (see tests/e2e/test_graphs.py for those pipelines).
    for knob in ({"num_assistant_tokens": 5}, {"assistant_confidence_threshold": 0.4}, {"max_ngram_size": 2}):
        with pytest.raises(openai.BadRequestError) as excinfo:
            create(client, **knob)
        assert "speculative" in excinfo.value.message or "prompt_lookup" in excinfo.value.message
