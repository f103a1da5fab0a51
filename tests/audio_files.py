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


def wav_bytes(
    samples: bytes,
    *,
    rate: int = 16_000,
    channels: int = 1,
    bits: int = 16,
    format_tag: int = 1,
    data_size: int | None = None,
    block_align: int | None = None,
) -> bytes:
    """A RIFF/WAVE file written by hand, so that every header field can lie."""
    import struct

    align = block_align if block_align is not None else channels * bits // 8
    fmt = struct.pack("<HHIIHH", format_tag, channels, rate, rate * align, align, bits)
    size = len(samples) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", size) + samples
    return b"RIFF" + struct.pack("<I", min(len(body), 0xFFFFFFFF)) + body


def _silence(seconds: float, rate: int = 16_000) -> bytes:
    return b"\x00\x00" * int(seconds * rate)


def hostile_audio(max_seconds: float) -> dict[str, tuple[bytes, str]]:
    """Uploads that must each be a 400 whose message contains the given words (lower case)."""
    noise = bytes(range(256)) * 64
    nan = np.full(1600, np.nan, dtype=np.float32).tobytes()
    too_long = _silence(max_seconds + 2, 8_000)
    return {
        "empty file": (b"", "empty"),
        "plain text": (b"root:x:0:0:root:/root:/bin/bash\n" * 10, "not audio"),
        "png image": (b"\x89PNG\r\n\x1a\n" + noise, "not audio"),
        "hls playlist naming a local file": (
            b"#EXTM3U\n#EXTINF:10,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n",
            "not audio",
        ),
        "ffconcat script": (b"ffconcat version 1.0\nfile '/etc/passwd'\n", "not audio"),
        "wav magic then garbage": (b"RIFF\x24\x00\x00\x00WAVE" + noise, "cannot"),
        "wav header without samples": (wav_bytes(b""), "no samples"),
        "wav sample rate 0": (wav_bytes(_silence(1), rate=0), "wav"),
        "wav sample rate 1 MHz": (wav_bytes(_silence(1), rate=1_000_000), "sample rate"),
        "wav with 64 channels": (wav_bytes(_silence(1), channels=64), "channels"),
        "wav longer than the limit": (wav_bytes(too_long, rate=8_000), "lasts"),
        "wav of NaN floats": (wav_bytes(nan, bits=32, format_tag=3), "not finite"),
        "wav with an unknown codec": (wav_bytes(_silence(1), format_tag=0x7777), "wav"),
        "wav of infinities": (
            wav_bytes(np.full(1600, np.inf, dtype=np.float32).tobytes(), bits=32, format_tag=3),
            "not finite",
        ),
        "ogg cut inside its first page": (make_audio("ogg", seconds=1.0)[:60], "ogg"),
        "wav with 0 bits per sample": (wav_bytes(_silence(1), bits=0, block_align=2), "wav"),
        "flac magic then garbage": (b"fLaC" + noise, "flac"),
        "ogg magic then garbage": (b"OggS" + noise, "ogg"),
        "webm magic then garbage": (b"\x1a\x45\xdf\xa3" + noise, "matroska"),
        "mp4 box then garbage": (b"\x00\x00\x00\x20ftypisom" + noise, "mp4"),
        "id3 tag then garbage": (b"ID3\x04\x00\x00\x00\x00\x00\x00" + noise, "mp3"),
        "mp3 frame sync then garbage": (b"\xff\xfb\x90\x00" + noise, "mp3"),
        "flac cut to its header": (make_audio("flac", seconds=1.0)[:42], "flac"),
    }
