"""Uploaded audio -> 16 kHz mono float32 samples, with PyAV (FFmpeg), in bounded memory and time.

Contract: :func:`decode_audio` returns the samples of the first audio stream of ``data`` or raises
:class:`AudioError` (a 400 naming the problem); nothing the bytes contain can make it raise anything
else, read a file or a URL, or hold more than ``max_seconds`` of 16 kHz samples.

How it is bounded:

- The body was already capped by ``--max_request_mb`` (aiohttp's ``client_max_size``).
- The container is chosen from the file's magic bytes, never by FFmpeg's probe: only wav, flac,
  mp3, ogg, webm/matroska and mp4/m4a are opened, each with its demuxer named. Probing could pick a
  playlist demuxer (hls, concat) that opens the files or URLs the upload names.
- Before any decoding, the stream must be audio with a sample rate in 1 kHz..384 kHz and at most
  8 channels, and a declared duration (the stream's, else the container's) over ``max_seconds`` is
  refused at once.
- While decoding, the resampled output is counted, and decoding stops with a 400 as soon as it
  passes ``max_seconds`` (a header may lie); the input frames are counted too, so a stream of
  empty or tiny frames cannot spin forever.
- Non-finite samples (a float WAV of NaNs) and audio with no samples are refused.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import numpy as np

from ovserve.errors import BadRequestError

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000
MIN_INPUT_RATE = 1_000
MAX_INPUT_RATE = 384_000
MAX_CHANNELS = 8
# Whisper reads at most 30 s per window; an input frame carries at most ~1 s at sane settings.
_MAX_FRAMES_PER_SECOND = 2_000


class AudioError(BadRequestError):
    default_code = "invalid_audio"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="file")


@dataclass(frozen=True)
class DecodedAudio:
    samples: np.ndarray  # float32, mono, SAMPLE_RATE
    source_rate: int
    source_channels: int
    container: str

    @property
    def seconds(self) -> float:
        return len(self.samples) / SAMPLE_RATE


def sniff_container(data: bytes) -> str | None:
    """FFmpeg's demuxer for ``data`` from its magic bytes; None when it is none of the accepted formats."""
    head = data[:16]
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head[:3] == b"ID3" or (len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0):
        return "mp3"
    return None


def decode_audio(data: bytes, max_seconds: float) -> DecodedAudio:
    """The 16 kHz mono float32 samples of ``data`` (see the module docstring for the bounds)."""
    if not data:
        raise AudioError("the audio file is empty")
    container_name = sniff_container(data)
    if container_name is None:
        raise AudioError(
            "the file is not audio in a supported format (wav, flac, mp3, ogg, webm, mp4/m4a)",
        )
    import av

    try:
        container = av.open(io.BytesIO(data), mode="r", format=container_name, metadata_errors="ignore")
    except (av.FFmpegError, ValueError, OSError) as exc:
        raise AudioError(f"the {container_name} file cannot be read: {_reason(exc)}") from None
    try:
        return _decode(container, container_name, max_seconds)
    except (av.FFmpegError, ValueError, OSError, MemoryError, EOFError) as exc:
        raise AudioError(f"the {container_name} audio cannot be decoded: {_reason(exc)}") from None
    except AudioError:
        raise
    except Exception as exc:
        # PyAV surfaces some FFmpeg states as other exceptions (an AttributeError for a missing
        # codec context was one): whatever the bytes did, the upload is what was wrong.
        log.warning("unexpected error decoding a %s upload: %r", container_name, exc)
        raise AudioError(f"the {container_name} audio cannot be decoded") from None
    finally:
        container.close()


def _decode(container: object, container_name: str, max_seconds: float) -> DecodedAudio:
    import av

    assert isinstance(container, av.container.InputContainer)
    if not container.streams.audio:
        raise AudioError(f"the {container_name} file has no audio stream")
    stream = container.streams.audio[0]
    codec = stream.codec_context
    if codec is None:  # FFmpeg has no decoder for the stream's codec
        raise AudioError(f"the {container_name} file's audio codec is not supported")
    rate = int(codec.sample_rate or 0)
    channels = int(codec.channels or 0)
    if not MIN_INPUT_RATE <= rate <= MAX_INPUT_RATE:
        raise AudioError(f"the audio's sample rate {rate} Hz is outside {MIN_INPUT_RATE}..{MAX_INPUT_RATE} Hz")
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioError(f"the audio has {channels} channels; at most {MAX_CHANNELS} are accepted")
    declared = _declared_seconds(container, stream)
    if declared is not None and declared > max_seconds:
        raise AudioError(f"the audio lasts {declared:.1f} s; at most {max_seconds:g} s are accepted")

    limit = int(max_seconds * SAMPLE_RATE)
    frame_limit = max(1_000, int(max_seconds * _MAX_FRAMES_PER_SECOND))
    resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
    parts: list[np.ndarray] = []
    total = 0
    for frames, frame in enumerate(container.decode(stream), start=1):
        if frames > frame_limit:
            raise AudioError("the audio has too many frames for its length")
        if frame.sample_rate != rate or len(frame.layout.channels) > MAX_CHANNELS:
            raise AudioError("the audio changes its sample rate or channel layout midway")
        for out in resampler.resample(frame):
            total = _append(parts, out, total, limit, max_seconds)
    for out in resampler.resample(None):
        total = _append(parts, out, total, limit, max_seconds)
    if total == 0:
        raise AudioError("the audio has no samples")
    samples = np.concatenate(parts).astype(np.float32, copy=False)
    if not np.isfinite(samples).all():
        raise AudioError("the audio contains samples that are not finite numbers (NaN or infinity)")
    return DecodedAudio(samples, rate, channels, container_name)


def _append(parts: list[np.ndarray], frame: object, total: int, limit: int, max_seconds: float) -> int:
    array = np.asarray(frame.to_ndarray(), dtype=np.float32).reshape(-1)  # type: ignore[attr-defined]
    total += len(array)
    if total > limit:
        raise AudioError(f"the audio lasts more than {max_seconds:g} s, the most accepted")
    parts.append(array)
    return total


def _declared_seconds(container: object, stream: object) -> float | None:
    duration = getattr(stream, "duration", None)
    time_base = getattr(stream, "time_base", None)
    if duration is not None and time_base is not None and duration > 0:
        return float(duration * time_base)
    total = getattr(container, "duration", None)  # microseconds
    if total is not None and total > 0:
        return float(total) / 1_000_000
    return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    # FFmpeg messages name the BytesIO object's repr; keep the reason, not the address.
    return text.split(": '<_io.BytesIO")[0][:200]


# /audio/speech's response formats: (container, codec, encoder sample format, content type).
SPEECH_FORMATS: dict[str, tuple[str, str, str, str]] = {
    "mp3": ("mp3", "libmp3lame", "s16p", "audio/mpeg"),
    "opus": ("ogg", "libopus", "s16", "audio/ogg"),
    "aac": ("adts", "aac", "fltp", "audio/aac"),
    "flac": ("flac", "flac", "s16", "audio/flac"),
    "wav": ("wav", "pcm_s16le", "s16", "audio/wav"),
}
PCM_CONTENT_TYPE = "audio/pcm"
# OpenAI's ``pcm`` is headerless 24 kHz 16-bit mono, and clients play it at that rate without asking
# (the SDK's examples open their output device at 24000): pcm is resampled to it. The containers
# name their own rate, so they keep the model's.
PCM_SAMPLE_RATE = 24_000


def encode_audio(samples: np.ndarray, rate: int, response_format: str) -> tuple[bytes, str, int]:
    """float32 mono ``samples`` at ``rate`` as a file of ``response_format`` (SPEECH_FORMATS, or
    ``pcm``: raw 16-bit little-endian at :data:`PCM_SAMPLE_RATE`), its content type and its rate."""
    import av

    clipped = np.clip(np.nan_to_num(samples.astype(np.float32, copy=False)), -1.0, 1.0)
    if response_format == "pcm":
        return _resampled_pcm(clipped, rate, PCM_SAMPLE_RATE), PCM_CONTENT_TYPE, PCM_SAMPLE_RATE
    pcm = (clipped * 32767).astype("<i2")

    container_name, codec, sample_format, content_type = SPEECH_FORMATS[response_format]
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container_name) as output:
        stream = output.add_stream(codec, rate=rate)
        assert isinstance(stream, av.audio.stream.AudioStream)
        stream.layout = "mono"
        if sample_format == "fltp":
            frame = av.AudioFrame.from_ndarray(clipped.reshape(1, -1), format="fltp", layout="mono")
        else:
            frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format=sample_format, layout="mono")
        frame.sample_rate = rate
        # The encoder takes frames of its own size: a resampler-free FIFO through encode().
        for packet in stream.encode(frame):
            output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buffer.getvalue(), content_type, rate


def _resampled_pcm(clipped: np.ndarray, rate: int, target_rate: int) -> bytes:
    """``clipped`` (float32 mono in [-1, 1] at ``rate``) as 16-bit little-endian samples at ``target_rate``,
    through FFmpeg's resampler (flushed, so the tail is not lost)."""
    import av

    if rate == target_rate or clipped.size == 0:
        return (clipped * 32767).astype("<i2").tobytes()
    resampler = av.AudioResampler(format="s16", layout="mono", rate=target_rate)
    frame = av.AudioFrame.from_ndarray(clipped.reshape(1, -1), format="flt", layout="mono")
    frame.sample_rate = rate
    parts = [out.to_ndarray().reshape(-1) for out in (*resampler.resample(frame), *resampler.resample(None))]
    return np.concatenate(parts).astype("<i2").tobytes() if parts else b""
