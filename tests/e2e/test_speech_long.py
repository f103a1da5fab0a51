"""Speech input longer than the model's text positions, end to end: tiny-speecht5 has 450
(``max_text_positions``) and its tokenizer is one token a character plus two special tokens, so
449 characters were a 500 (an OpenVINO shape exception). Every input up to the documented 4,096
characters must be spoken whole: cut into pieces that fit, spoken in order, joined by short pauses.

The random model says every piece in the same 32 ms, so the audio grows with the input by its
pieces and the pauses between them: that is what is measured."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from ovserve.core.audio import decode_audio
from tests.conftest import Server

MODEL = "tiny-speecht5"
PCM_RATE = 24_000
SENTENCE = "The quick brown fox jumps over the lazy dog. "  # 45 characters


def text(length: int) -> str:
    return (SENTENCE * (length // len(SENTENCE) + 1))[:length]


def speak(server: Server, spoken: str, response_format: str = "pcm") -> httpx.Response:
    payload = {"model": MODEL, "input": spoken, "voice": "alloy", "response_format": response_format}
    return httpx.post(f"{server.url}/v3/audio/speech", json=payload, timeout=120)


def pcm_seconds(response: httpx.Response) -> float:
    assert response.status_code == 200, response.text
    assert response.headers["x-sample-rate"] == str(PCM_RATE)
    assert len(response.content) % 2 == 0
    return len(response.content) / 2 / PCM_RATE


def test_the_model_has_450_text_positions(speech_models: dict[str, Path]) -> None:
    """The premise of the lengths below."""
    config = json.loads((speech_models[MODEL] / "config.json").read_text())
    assert config["max_text_positions"] == 450


def test_inputs_up_to_4096_characters_are_spoken_whole(tts_server: Server) -> None:
    durations = {length: pcm_seconds(speak(tts_server, text(length))) for length in (100, 449, 1_000, 4_096)}
    print("speech seconds by input characters:", durations)
    assert durations[100] < durations[449] < durations[1_000] < durations[4_096]
    # 449 characters are at least two pieces: both spoken, with the pause between them (0.15 s).
    assert durations[449] >= 2 * durations[100] + 0.1
    assert durations[4_096] >= 9 * durations[100]


def test_4097_characters_are_a_400_naming_input(tts_server: Server) -> None:
    response = speak(tts_server, text(4_097))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "input"


def test_a_4000_letter_word_is_cut_between_letters(tts_server: Server) -> None:
    assert pcm_seconds(speak(tts_server, "Say " + "a" * 4_000 + " now.")) > pcm_seconds(speak(tts_server, "a" * 440))


@pytest.mark.parametrize(
    "spoken",
    [
        "Привет, мир! Как дела? " * 120,  # Cyrillic, 2,760 characters
        "今日は晴れです。" * 400,  # no spaces at all, 3,200 characters
        "e\u0301" * 2_000,  # 4,000 code points of accented letters and no space
        "Hello.\n\n" + " " * 1_500 + "\n\t" * 600 + "World.",  # pieces of whitespace in between
    ],
    ids=["cyrillic", "japanese", "combining", "whitespace"],
)
def test_unicode_and_whitespace_inputs_are_spoken(tts_server: Server, spoken: str) -> None:
    assert len(spoken) <= 4_096
    assert pcm_seconds(speak(tts_server, spoken)) > 0


def test_a_long_wav_is_one_valid_file_of_the_whole_speech(tts_server: Server) -> None:
    long = speak(tts_server, text(1_000), "wav")
    assert long.status_code == 200, long.text
    seconds = decode_audio(long.content, 600).seconds
    assert abs(seconds - pcm_seconds(speak(tts_server, text(1_000)))) < 0.01
    samples = np.frombuffer(long.content[44:], dtype="<i2")
    assert np.count_nonzero(samples == 0) >= 0.1 * 16_000  # the pauses between pieces are silence


def test_pcm_streams_each_piece_as_it_is_made(tts_server: Server) -> None:
    """pcm goes out as the pieces of a long input are made, and adds up to the joined speech."""
    payload = {"model": MODEL, "input": text(4_096), "voice": "alloy", "response_format": "pcm"}
    with httpx.stream("POST", f"{tts_server.url}/v3/audio/speech", json=payload, timeout=120) as response:
        assert response.status_code == 200
        # Chunked: written as the pieces come (a whole file has a Content-Length).
        assert response.headers["transfer-encoding"] == "chunked" and "content-length" not in response.headers
        streamed = response.read()
    wav = speak(tts_server, text(4_096), "wav")
    assert abs(len(streamed) / 2 / PCM_RATE - decode_audio(wav.content, 600).seconds) < 0.02
