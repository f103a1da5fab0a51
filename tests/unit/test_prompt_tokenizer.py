"""PromptTokenizer: bounded work, early refusal. Its one owner thread (no first-use deadlock in a
fresh process) is tried in ``tests/e2e/test_tokenizer_processes.py``: fresh processes take seconds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ovserve.models.tokenizer import CHUNK_CHARS, PromptTokenizer, PromptTooLongError


class _CountingTokenizer:
    """The real tokenizer, with its encode calls counted."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.encoded_chars: list[int] = []

    def encode(self, text: str, **kwargs: Any) -> Any:
        self.encoded_chars.append(len(text))
        return self.inner.encode(text, **kwargs)

    def get_vocab(self) -> Any:
        return self.inner.get_vocab()


@pytest.fixture(scope="module")
def raw_tokenizer(tiny_llm: Path) -> Any:
    import openvino_genai

    return openvino_genai.Tokenizer(str(tiny_llm))


def test_ids_match_the_tokenizer_and_long_fitting_text_is_exact(raw_tokenizer: Any) -> None:
    tokenizer = PromptTokenizer(raw_tokenizer, "tiny-llm")
    text = "the quick brown fox jumps over the lazy dog. " * (3 * CHUNK_CHARS // 45)
    expected = [int(i) for i in raw_tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]]
    ids = asyncio.run(tokenizer.encode(text, add_special_tokens=False, limit=len(expected)))
    assert ids == expected


def test_text_too_long_by_its_length_alone_is_refused_without_tokenizing(raw_tokenizer: Any) -> None:
    counting = _CountingTokenizer(raw_tokenizer)
    tokenizer = PromptTokenizer(counting, "tiny-llm")
    assert tokenizer.max_token_bytes is not None
    calls_after_warm_up = len(counting.encoded_chars)
    text = "x" * (20 * 1024 * 1024)
    with pytest.raises(PromptTooLongError) as refused:
        asyncio.run(tokenizer.encode(text, add_special_tokens=False, limit=2047, param="messages"))
    assert len(counting.encoded_chars) == calls_after_warm_up  # refused without a single encode call
    assert refused.value.param == "messages" and refused.value.code == "context_length_exceeded"
    assert refused.value.at_least > 2047


def test_without_a_vocabulary_a_long_text_is_counted_in_chunks_and_refused_early(raw_tokenizer: Any) -> None:
    counting = _CountingTokenizer(raw_tokenizer)
    tokenizer = PromptTokenizer(counting, "tiny-llm")
    tokenizer.max_token_bytes = None  # as for a tokenizer whose vocabulary cannot be read
    counting.encoded_chars.clear()
    text = "word " * (2 * 1024 * 1024 // 5)
    with pytest.raises(PromptTooLongError):
        asyncio.run(tokenizer.encode(text, add_special_tokens=False, limit=2047))
    # Every call was one bounded chunk, and counting stopped long before the end of the text.
    assert counting.encoded_chars and max(counting.encoded_chars) <= CHUNK_CHARS
    assert sum(counting.encoded_chars) < len(text) // 10


def test_a_long_text_with_fewer_bytes_than_the_limit_is_encoded_once(raw_tokenizer: Any) -> None:
    counting = _CountingTokenizer(raw_tokenizer)
    tokenizer = PromptTokenizer(counting, "tiny-llm")
    counting.encoded_chars.clear()
    text = "the quick brown fox jumps over the lazy dog. " * (2 * CHUNK_CHARS // 45)
    ids = asyncio.run(tokenizer.encode(text, add_special_tokens=False, limit=len(text.encode()) + 8))
    # One pass over the whole text, no counting pass in chunks before it.
    assert counting.encoded_chars == [len(text)]
    assert ids == [int(i) for i in raw_tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]]


def test_a_batch_of_texts_that_normalize_to_nothing_counts_each_of_them(retrieval_models: dict[str, Path]) -> None:
    # A BERT tokenizer (the reranker's) answers such a batch with one row, not one per text: the
    # counts no longer lined up with the texts (a 500 for rerank documents of control characters).
    import openvino_genai

    raw = openvino_genai.Tokenizer(str(retrieval_models["tiny-rerank"]))
    tokenizer = PromptTokenizer(raw, "tiny-rerank")
    texts = ["", "\x17", "\x0f"]
    assert len(raw.encode(texts, add_special_tokens=True).attention_mask.data) == 1  # the engine's quirk
    alone = [len(raw.encode(text, add_special_tokens=True).input_ids.data[0]) for text in texts]
    counted = asyncio.run(tokenizer.count_each(texts, limit=64, truncate=True, param="documents"))
    assert counted == alone
