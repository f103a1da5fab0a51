"""Audio files made in the tests with PyAV: a tone in any accepted container, rate and layout."""

from __future__ import annotations

import io

import numpy as np

# container -> (PyAV format name, codec, sample format the encoder takes)
CONTAINERS = {
    "wav": ("wav", "pcm_s16le", "s16"),
    "flac": ("flac", "flac", "s16"),
    "mp3": ("mp3", "libmp3lame", "s16p"),
    "ogg": ("ogg", "libopus", "flt"),
    "webm": ("webm", "libopus", "flt"),
}


def tone(seconds: float, rate: int, channels: int, frequency: float = 440.0) -> np.ndarray:
    """float32 [channels, samples] in -0.5..0.5."""
    t = np.arange(int(seconds * rate), dtype=np.float64) / rate
    mono = 0.5 * np.sin(2 * np.pi * frequency * t)
    return np.stack([mono * (0.5 + 0.5 * c) for c in range(channels)]).astype(np.float32)


def make_audio(container: str, rate: int = 16_000, channels: int = 1, seconds: float = 1.0) -> bytes:
    """``seconds`` of a tone encoded as ``container`` (opus resamples to 48 kHz: webm ignores ``rate``)."""
    import av

    format_name, codec, sample_format = CONTAINERS[container]
    if codec == "libopus":
        rate = 48_000
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=format_name) as output:
        stream = output.add_stream(codec, rate=rate)
        stream.layout = "mono" if channels == 1 else "stereo"
        samples = tone(seconds, rate, channels)
        chunk = 1024
        for start in range(0, samples.shape[1], chunk):
            part = samples[:, start : start + chunk]
            if sample_format == "s16":
                data = (part.T * 32767).astype(np.int16).reshape(1, -1)
            elif sample_format == "s16p":
                data = (part * 32767).astype(np.int16)
            elif sample_format == "fltp":
                data = np.ascontiguousarray(part)
            else:
                data = np.ascontiguousarray(part.T).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(data, format=sample_format, layout=stream.layout.name)
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buffer.getvalue()
