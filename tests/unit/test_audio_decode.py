"""ovserve.core.audio: accepted formats decode to 16 kHz mono; every hostile upload is an AudioError."""

from __future__ import annotations

import numpy as np
import pytest

from ovserve.core.audio import SAMPLE_RATE, AudioError, decode_audio, sniff_container
from tests.audio_files import CONTAINERS, hostile_audio, make_audio, wav_bytes

MAX_SECONDS = 5.0


@pytest.mark.parametrize("container", sorted(CONTAINERS))
@pytest.mark.parametrize("rate", [8_000, 16_000, 44_100, 48_000])
@pytest.mark.parametrize("channels", [1, 2])
def test_accepted_formats_decode_to_16k_mono(container: str, rate: int, channels: int) -> None:
    audio = decode_audio(make_audio(container, rate, channels, seconds=1.0), MAX_SECONDS)
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    # Codecs pad or trim a few ms (encoder delay, frame size).
    assert abs(audio.seconds - 1.0) < 0.1, audio.seconds
    assert audio.source_channels == channels
    assert 0.1 < float(np.abs(audio.samples).max()) <= 1.0


@pytest.mark.parametrize(
    ("case", "expected"), list(hostile_audio(MAX_SECONDS).items()), ids=list(hostile_audio(MAX_SECONDS))
)
def test_hostile_audio_is_refused_naming_the_problem(case: str, expected: tuple[bytes, str]) -> None:
    data, words = expected
    with pytest.raises(AudioError) as raised:
        decode_audio(data, MAX_SECONDS)
    assert words in raised.value.message.lower(), raised.value.message
    assert raised.value.status == 400 and raised.value.param == "file"


def test_the_decode_stops_at_the_limit_when_no_duration_is_declared() -> None:
    # data size 0: FFmpeg reads a WAV whose header gives no size to its end, without a duration.
    data = wav_bytes(b"\x00\x00" * (SAMPLE_RATE * 8), data_size=0)
    with pytest.raises(AudioError, match="lasts"):
        decode_audio(data, MAX_SECONDS)


def test_a_header_declaring_4_gb_allocates_only_what_the_file_holds() -> None:
    audio = decode_audio(wav_bytes(b"\x00\x00" * SAMPLE_RATE, data_size=0xFFFFFFF0), MAX_SECONDS)
    assert audio.seconds == pytest.approx(1.0)


def test_the_container_is_chosen_from_magic_bytes_only() -> None:
    assert sniff_container(make_audio("wav")) == "wav"
    assert sniff_container(make_audio("webm")) == "matroska"
    assert sniff_container(b"#EXTM3U\n") is None
