"""Word timestamps end to end: tiny-whisper served with ``--enable_word_timestamps``, called with the
real ``openai`` SDK (``timestamp_granularities=["word"]``).

The model's weights are random, so its words are nonsense; what is checked is what a client relies
on: every word has a start and an end inside the audio, the words follow each other in time, they
spell the transcript, and OpenAI's shape (``words`` only, or ``words`` and ``segments`` when both
granularities are asked). A model served without the flag answers a word request with a 400.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.audio_files import make_audio
from tests.conftest import Server, start_server

MODEL = "tiny-whisper"


@pytest.fixture(scope="module")
def words_server(speech_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("words-server"),
        speech_models[MODEL],
        "--task",
        "speech_to_text",
        "--enable_word_timestamps",
        model_name=MODEL,
    )
    yield running
    running.stop()


@pytest.fixture()
def client(words_server: Server) -> openai.OpenAI:
    return words_server.client()


def _wav(seconds: float) -> tuple[str, bytes]:
    return ("tone.wav", make_audio("wav", 16_000, 1, seconds))


def _assert_timed_in_order(words: Sequence[Any], seconds: float) -> None:
    assert words, "no words"
    for word in words:
        assert word.word and word.word == word.word.strip(), word
        assert 0.0 <= word.start <= word.end <= seconds, word
    starts = [word.start for word in words]
    ends = [word.end for word in words]
    assert starts == sorted(starts) and ends == sorted(ends), list(zip(starts, ends, strict=True))


def _letters(text: str) -> str:
    return re.sub(r"\s", "", text)


def test_words_are_timed_in_order_within_the_audio_and_spell_the_text(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(
        model=MODEL, file=_wav(3.0), response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert result.words is not None
    _assert_timed_in_order(result.words, 3.0)
    assert _letters("".join(word.word for word in result.words)) == _letters(result.text)
    assert result.segments is None  # OpenAI: words only, unless segments are asked too
    again = client.audio.transcriptions.create(
        model=MODEL, file=_wav(3.0), response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert again.words == result.words  # greedy: the same words at the same times


def test_both_granularities_give_both_lists(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(
        model=MODEL, file=_wav(3.0), response_format="verbose_json", timestamp_granularities=["word", "segment"]
    )
    assert result.segments and result.words is not None
    _assert_timed_in_order(result.words, 3.0)
    assert "".join(segment.text for segment in result.segments) == result.text


def test_words_of_long_audio_continue_into_the_second_window(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(
        model=MODEL, file=_wav(35.0), response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert result.words is not None
    _assert_timed_in_order(result.words, 35.0)
    assert result.words[-1].end > 30.0, result.words[-3:]


def test_segments_without_words_still_work_on_a_words_engine(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(model=MODEL, file=_wav(3.0), response_format="verbose_json")
    assert result.segments and result.words is None


@pytest.mark.parametrize(
    ("path", "fields", "words"),
    [
        ("transcriptions", {"timestamp_granularities[]": "word"}, "verbose_json"),
        ("translations", {"timestamp_granularities[]": "word", "response_format": "verbose_json"}, "translations"),
    ],
)
def test_word_requests_that_cannot_be_answered_are_400s(
    words_server: Server, path: str, fields: dict[str, str], words: str
) -> None:
    response = httpx.post(
        f"{words_server.url}/v3/audio/{path}", data={"model": MODEL, **fields}, files={"file": _wav(1.0)}, timeout=60
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "timestamp_granularities[]" and words in error["message"], error
