"""encode_audio: /audio/speech's files. ``pcm`` is OpenAI's 24 kHz whatever the model's rate (a
client plays it at 24000 Hz unasked), the whole waveform kept; the containers keep the model's rate."""

from __future__ import annotations

import numpy as np
import pytest

from ovserve.core.audio import PCM_SAMPLE_RATE, SPEECH_FORMATS, decode_audio, encode_audio


def _tone(rate: int, seconds: float, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


@pytest.mark.parametrize("rate", [16_000, 22_050, 24_000, 48_000])
def test_pcm_is_24k_whatever_the_model_rate_and_keeps_the_pitch(rate: int) -> None:
    data, content_type, out_rate = encode_audio(_tone(rate, 1.0), rate, "pcm")
    samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767
    assert (content_type, out_rate) == ("audio/pcm", PCM_SAMPLE_RATE)
    assert abs(len(samples) - PCM_SAMPLE_RATE) <= 64  # one second stays one second: the tail is flushed
    spectrum = np.abs(np.fft.rfft(samples))
    peak_hz = np.argmax(spectrum) * PCM_SAMPLE_RATE / len(samples)
    assert abs(peak_hz - 440.0) < 5  # played at 24 kHz it is the same tone


def test_pcm_of_nothing_is_empty_and_out_of_range_samples_are_clipped() -> None:
    assert encode_audio(np.zeros(0, dtype=np.float32), 16_000, "pcm")[0] == b""
    loud = np.array([np.nan, 5.0, -5.0, np.inf] * 100, dtype=np.float32)
    samples = np.frombuffer(encode_audio(loud, 24_000, "pcm")[0], dtype="<i2")
    assert samples.max() <= 32767 and samples.min() >= -32767 and len(samples) == 400


@pytest.mark.parametrize("response_format", sorted(set(SPEECH_FORMATS) - {"aac"}))  # ADTS is no upload format
def test_containers_keep_the_model_rate(response_format: str) -> None:
    data, _, out_rate = encode_audio(_tone(16_000, 0.5), 16_000, response_format)
    assert out_rate == 16_000
    assert decode_audio(data, 60).seconds == pytest.approx(0.5, abs=0.1)
