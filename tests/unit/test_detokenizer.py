"""Streaming detokenization on a real openvino_genai tokenizer (the demo model's).

The joined deltas of a stream must equal the sequence decoded alone, whether a step's windows
were decoded in one ragged batch with other streams' or a token-piece table gave them; the table
must refuse a tokenizer whose decoding looks across tokens, and turn itself off if a sequence
ever shows that it does.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from ovserve.engine.detokenizer import DecodeBatch, Detokenizer, IncrementalDetokenizer, TokenPieces

VOCAB = 4000  # the demo models' vocabulary (scripts/make_demo_models.py)


@pytest.fixture(scope="module")
def tokenizer(tiny_llm: Path) -> Any:
    import openvino_genai

    return openvino_genai.Tokenizer(str(tiny_llm))


class CountingTokenizer:
    """The real tokenizer, counting decode calls; ``rewrite`` post-processes decoded texts the
    way a detokenizer with a regex step would."""

    def __init__(self, tokenizer: Any, rewrite: Any = None) -> None:
        self._tokenizer = tokenizer
        self.rewrite = rewrite
        self.decode_calls = 0

    def decode(self, sequences: Any, skip_special_tokens: bool = True) -> Any:
        self.decode_calls += 1
        texts = self._tokenizer.decode(sequences, skip_special_tokens=skip_special_tokens)
        if self.rewrite is None:
            return texts
        return [self.rewrite(str(text)) for text in texts] if isinstance(texts, list) else self.rewrite(str(texts))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def stream_together(detokenizer: Detokenizer, sequences: list[list[int]], skip: bool, seed: int) -> list[str]:
    """Stream every sequence at once, a few tokens per step, every step's decodes in one batch."""
    rng = random.Random(seed)
    decoders = [IncrementalDetokenizer(skip) for _ in sequences]
    texts = ["" for _ in sequences]
    taken = [0 for _ in sequences]
    while any(taken[index] < len(sequence) for index, sequence in enumerate(sequences)):
        batch = DecodeBatch(detokenizer)
        for index, sequence in enumerate(sequences):
            if taken[index] >= len(sequence):
                continue
            new = sequence[taken[index] : taken[index] + rng.randint(1, 3)]
            taken[index] += len(new)

            def place(delta: str, index: int = index) -> None:
                texts[index] += delta

            batch.add(decoders[index], new, taken[index] >= len(sequence), place)
        batch.run()
    return texts


def random_sequences(rng: random.Random, count: int) -> list[list[int]]:
    # Every id, special and partial-UTF-8 ones included, in sequences of different lengths.
    return [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 48))] for _ in range(count)]


@pytest.mark.parametrize("skip", [True, False], ids=["skip_special", "keep_special"])
@pytest.mark.parametrize("with_pieces", [True, False], ids=["pieces", "detokenizer"])
def test_streams_decoded_together_join_to_each_sequence_decoded_alone(
    tokenizer: Any, skip: bool, with_pieces: bool
) -> None:
    detokenizer = Detokenizer(tokenizer)
    if with_pieces:
        detokenizer.learn_pieces(VOCAB)
        assert detokenizer.pieces is not None
    rng = random.Random(7)
    for round_ in range(20):
        sequences = random_sequences(rng, 8)
        expected = [str(tokenizer.decode(sequence, skip_special_tokens=skip)) for sequence in sequences]
        assert stream_together(detokenizer, sequences, skip, seed=round_) == expected
    if with_pieces:
        assert detokenizer.pieces is not None and detokenizer.pieces.enabled


def test_a_ragged_batch_keeps_the_pad_token_out_of_shorter_sequences(tokenizer: Any) -> None:
    # openvino_genai pads a batch's shorter sequences with the pad token, whose text shows when
    # special tokens are kept; streaming with skip_special_tokens false was garbled by it.
    sequences = [[71, 80, 81, 82, 83], [71], [], [72, 73]]
    texts = Detokenizer(tokenizer).decode(sequences, skip=False)
    assert texts == [str(tokenizer.decode(sequence, skip_special_tokens=False)) for sequence in sequences]


def test_steps_of_tokens_with_pieces_call_no_detokenizer(tokenizer: Any) -> None:
    counting = CountingTokenizer(tokenizer)
    detokenizer = Detokenizer(counting)
    detokenizer.learn_pieces(VOCAB)
    pieces = detokenizer.pieces
    assert pieces is not None
    plain = [token for token in range(VOCAB) if pieces.text([token], True) is not None]
    sequence = random.Random(3).sample(plain, 40)
    decoder = IncrementalDetokenizer(skip_special_tokens=True)
    deltas: list[str] = []
    counting.decode_calls = 0
    for index, token in enumerate(sequence):
        batch = DecodeBatch(detokenizer)
        batch.add(decoder, [token], index == len(sequence) - 1, deltas.append)
        batch.run()
    # The first token has no text before it (a leading space may be stripped there): decoded;
    # the last step decodes the whole sequence to check what was sent. Nothing in between.
    assert counting.decode_calls == 2
    assert "".join(deltas) == str(tokenizer.decode(sequence, skip_special_tokens=True))


def clean_up_spaces(text: str) -> str:
    # HF's clean_up_tokenization_spaces, as openvino_tokenizers adds it to a detokenizer.
    return re.sub(r" ([.?!,]|'[ms]|'|'[rv]e|n't)", r"\1", text)


def test_pieces_are_refused_for_a_detokenizer_that_cleans_up_spaces(tokenizer: Any) -> None:
    assert TokenPieces.build(Detokenizer(CountingTokenizer(tokenizer)), VOCAB) is not None
    assert TokenPieces.build(Detokenizer(CountingTokenizer(tokenizer, clean_up_spaces)), VOCAB) is None


def end_words_with_e(text: str) -> str:
    # A word-suffix vocabulary (CLIP's "</w>"): the suffix becomes a space and the text is
    # right-stripped, so a token's text alone lacks the space it has before the next one.
    return text.replace("e", "e ").rstrip()


def test_pieces_are_refused_for_a_detokenizer_that_strips_the_text_end(tokenizer: Any) -> None:
    assert TokenPieces.build(Detokenizer(CountingTokenizer(tokenizer, end_words_with_e)), VOCAB) is None


def test_a_sequence_that_disagrees_with_its_pieces_turns_them_off(tokenizer: Any) -> None:
    counting = CountingTokenizer(tokenizer)
    detokenizer = Detokenizer(counting)
    detokenizer.learn_pieces(VOCAB)
    pieces = detokenizer.pieces
    assert pieces is not None
    words = [token for token in range(VOCAB) if re.fullmatch(r" [a-z]+", pieces.text([token], True) or "")]
    sequence = words[:3]
    counting.rewrite = lambda text: text.replace(" ", "")  # the detokenizer changes its mind
    decoder = IncrementalDetokenizer(skip_special_tokens=True)
    deltas: list[str] = []
    for index, token in enumerate(sequence):
        batch = DecodeBatch(detokenizer)
        batch.add(decoder, [token], index == len(sequence) - 1, deltas.append)
        batch.run()
    assert decoder.joined_pieces and decoder.diverged
    assert not pieces.enabled
    # Never resent: the client keeps what it got, and later streams use the detokenizer.
    assert "".join(deltas) == decoder.emitted
