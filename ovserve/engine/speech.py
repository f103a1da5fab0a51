"""The speech models of an engine process: ``openvino_genai.WhisperPipeline`` (speech to text) and
``openvino_genai.Text2SpeechPipeline`` (text to speech, :class:`TextToSpeech`).

:class:`SpeechToText` takes 16 kHz mono float32 samples (the server decodes and resamples them,
``ovserve.core.audio``) and returns the transcript, its timestamped segments when asked, its
timestamped words when asked (only of a pipeline built with ``word_timestamps``: its decoder then
returns cross-attention scores, which the pipeline aligns to the audio with the model's
``alignment_heads``), and the language it was told or detected. Text is handed to ``on_delta`` as
the pipeline's streamer yields it; ``on_delta`` returning True stops the generation (a cancelled
request).

The pipeline cuts audio longer than 30 s into Whisper windows itself. Language codes are Whisper's
``<|xx|>`` tokens; a code the model has no token for is refused before the pipeline runs (the
pipeline would raise a bare ``Exception``).

:class:`TextToSpeech` never hands the pipeline more tokens than the model has text positions
(``max_text_positions`` of its config.json, less :data:`TOKEN_MARGIN`; the pipeline fails on a
shape exception past them): :meth:`TextToSpeech.split` cuts the text into pieces that fit
(``ovserve.engine.speech_text``, counted with the model's own tokenizer), :meth:`TextToSpeech.speak_piece`
speaks one, its edges faded and, after the first, :data:`PIECE_GAP_S` of silence before it, so the
pieces played one after the other are the whole speech without clicks at the seams.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ovserve.engine.messages import TranscribeRequest
from ovserve.engine.spec import EngineSpec
from ovserve.engine.speech_text import split_for_speech
from ovserve.json_types import JsonObject, json_list, json_object

log = logging.getLogger("ovserve.engine")


Timed = tuple[float, float, str]  # start s, end s, text


@dataclass(frozen=True)
class Transcript:
    text: str
    segments: list[Timed]
    words: list[Timed]
    language: str | None


class UnknownLanguageError(ValueError):
    pass


class WordTimestampsError(ValueError):
    """Word timestamps asked of a pipeline not built for them (the server checks first)."""


def _generation_config(model_dir: Path) -> JsonObject:
    try:
        config = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def model_languages(model_dir: Path) -> frozenset[str]:
    """The language codes a Whisper export knows (``lang_to_id`` of its generation_config.json)."""
    tokens = json_object(_generation_config(model_dir).get("lang_to_id"))
    return frozenset(token.strip("<|>") for token in tokens if isinstance(token, str))


def alignment_heads(model_dir: Path) -> list[tuple[int, int]]:
    """The (decoder layer, head) pairs whose cross-attention aligns text to audio (``alignment_heads``
    of a Whisper export's generation_config.json, as Hugging Face publishes them); word timestamps
    need them."""
    heads = json_list(_generation_config(model_dir).get("alignment_heads"))
    return [
        (layer, head)
        for pair in heads
        if isinstance(pair, list)
        and len(pair) == 2
        and isinstance(layer := pair[0], int)
        and isinstance(head := pair[1], int)
    ]


class SpeechToText:
    def __init__(self, spec: EngineSpec) -> None:
        import openvino_genai as ov_genai

        # word_timestamps at construction rewrites the decoder's cross-attention so that it also
        # returns its scores; a request may then ask for words (and others skip the extra pass).
        properties = {**spec.plugin_config, **({"word_timestamps": True} if spec.word_timestamps else {})}
        self.pipeline = ov_genai.WhisperPipeline(str(spec.model_path), spec.device, **properties)
        self.word_timestamps = spec.word_timestamps
        self.languages = model_languages(spec.model_path)
        self.multilingual = bool(self.pipeline.get_generation_config().is_multilingual)

    def transcribe(self, request: TranscribeRequest, on_delta: Callable[[str], bool]) -> Transcript:
        """``request``'s audio as text; ``on_delta`` gets the text as it comes (True: stop)."""
        if request.words and not self.word_timestamps:
            raise WordTimestampsError()
        audio, language = request.audio, request.language
        config = self.pipeline.get_generation_config()
        config.max_new_tokens = request.max_new_tokens
        config.return_timestamps = request.timestamps
        config.word_timestamps = request.words
        if self.multilingual:
            config.task = request.task
            if language is not None:
                if language not in self.languages:
                    raise UnknownLanguageError(language)
                config.language = f"<|{language}|>"
        if request.prompt:
            config.initial_prompt = request.prompt
        if request.temperature > 0:
            config.do_sample = True
            config.temperature = request.temperature
        else:
            config.do_sample = False

        def streamer(text: str) -> bool:
            return bool(on_delta(text))

        result = self.pipeline.generate(audio, config, streamer)
        text = result.texts[0] if result.texts else ""
        duration = len(audio) / 16_000
        segments = _timed([(chunk.start_ts, chunk.end_ts, chunk.text) for chunk in result.chunks or []], duration)
        # OpenAI's words carry no surrounding spaces; the pipeline's keep Whisper's leading one.
        timed_words = _timed([(word.start_ts, word.end_ts, word.word.strip()) for word in result.words or []], duration)
        detected = getattr(result, "language", None) or None
        return Transcript(text, segments, [word for word in timed_words if word[2]], language or _code(detected))


def _timed(pieces: list[tuple[float, float, str]], duration: float) -> list[Timed]:
    """The pipeline's (start, end, text) pieces within the audio, rounded to 10 ms. The last piece of
    a 30 s window may come without its end (-1, or an end before its start): it ends where the next
    piece starts, or with the audio, so the times never go back."""
    timed: list[Timed] = []
    for index, (start_ts, end_ts, text) in enumerate(pieces):
        start = min(max(0.0, float(start_ts)), duration)
        if end_ts >= start:
            end = float(end_ts)
        else:
            following = pieces[index + 1][0] if index + 1 < len(pieces) else duration
            end = max(start, float(following))
        timed.append((round(start, 2), round(min(end, duration), 2), text))
    return timed


class UnknownVoiceError(ValueError):
    pass


def read_speaker_embedding(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """A voice file: raw float32 with exactly the model's speaker-embedding size (OVMS's format)."""
    expected = int(np.prod(shape))
    data = path.read_bytes()
    if len(data) != expected * 4:
        raise ValueError(
            f"voice file {path} holds {len(data)} bytes; the model needs {expected} float32 ({expected * 4} bytes)"
        )
    return np.frombuffer(data, dtype=np.float32).reshape(shape).copy()


# SpeechT5's encoder, when its config.json does not say (transformers' SpeechT5Config default).
DEFAULT_TEXT_POSITIONS = 450
# Tokens kept free below the model's text positions. The count includes the tokenizer's special
# tokens already (tiny-speecht5, 450 positions: 448 characters are 450 tokens and pass, 449 fail);
# the margin covers a pipeline that would add one more than the standalone tokenizer does.
TOKEN_MARGIN = 4
PIECE_GAP_S = 0.15  # silence between two pieces: a sentence pause, and no click at the seam
FADE_S = 0.005  # a piece's edges ramp from and to silence over this


def text_positions(model_dir: Path) -> int:
    """``max_text_positions`` of the model's config.json (:data:`DEFAULT_TEXT_POSITIONS` without it)."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return DEFAULT_TEXT_POSITIONS
    positions = config.get("max_text_positions") if isinstance(config, dict) else None
    return positions if isinstance(positions, int) and positions > TOKEN_MARGIN else DEFAULT_TEXT_POSITIONS


def utf8_tokens(text: str) -> int:
    """A stand-in count for a model without a tokenizer we can load: no tokenizer makes more tokens
    than bytes (SpeechT5's makes one a character), plus two special tokens."""
    return len(text.encode("utf-8")) + 2


def faded(samples: np.ndarray, rate: int, gap_before: bool) -> np.ndarray:
    """``samples`` with both edges ramped over :data:`FADE_S`, after :data:`PIECE_GAP_S` of silence
    when ``gap_before``."""
    out = samples.astype(np.float32, copy=True)
    ramp = min(int(rate * FADE_S), len(out) // 2)
    if ramp > 0:
        shape = np.linspace(0.0, 1.0, ramp, endpoint=False, dtype=np.float32)
        out[:ramp] *= shape
        out[-ramp:] *= shape[::-1]
    if not gap_before:
        return out
    return np.concatenate([np.zeros(int(rate * PIECE_GAP_S), np.float32), out])


class TextToSpeech:
    """A SpeechT5-style ``Text2SpeechPipeline`` and its voices, read and checked at load."""

    def __init__(self, spec: EngineSpec) -> None:
        import openvino_genai as ov_genai

        self.pipeline = ov_genai.Text2SpeechPipeline(str(spec.model_path), spec.device, **spec.plugin_config)
        shape = tuple(int(dim) for dim in self.pipeline.get_speaker_embedding_shape())
        self.voices = {name: read_speaker_embedding(path, shape) for name, path in spec.voices.items()}
        self.max_tokens = text_positions(spec.model_path) - TOKEN_MARGIN
        self.count_tokens = utf8_tokens
        if (spec.model_path / "openvino_tokenizer.xml").is_file():
            try:
                tokenizer = ov_genai.Tokenizer(str(spec.model_path))
            except Exception as exc:  # the pipeline loaded it; a failure here costs only piece length
                log.warning("speech pieces counted in bytes: the tokenizer did not load (%s)", exc)
            else:
                self.count_tokens = lambda text: int(tokenizer.encode(text).input_ids.data.shape[-1])

    def split(self, text: str) -> list[str]:
        """``text`` in pieces of at most :attr:`max_tokens` tokens, in order (none blank)."""
        return split_for_speech(text, self.max_tokens, self.count_tokens)

    def speak_piece(self, text: str, voice: str | None, speed: float, first: bool) -> tuple[np.ndarray, int]:
        """float32 mono samples of one piece (from :meth:`split`) and their rate; a piece after the
        first starts with the pause that separates it from the one before."""
        import openvino as ov

        if voice is not None and voice not in self.voices:
            raise UnknownVoiceError(voice)
        properties: dict[str, Any] = {} if speed == 1.0 else {"speed": speed}
        if voice is None:
            result = self.pipeline.generate(text, **properties)
        else:
            result = self.pipeline.generate(text, ov.Tensor(self.voices[voice]), **properties)
        samples = np.asarray(result.speeches[0].data, dtype=np.float32).reshape(-1)
        rate = int(result.output_sample_rate)
        return faded(samples, rate, gap_before=not first), rate

    def synthesize(self, text: str, voice: str | None, speed: float) -> tuple[np.ndarray, int]:
        """float32 mono samples of the whole ``text`` and their rate (its pieces joined)."""
        parts = [
            self.speak_piece(piece, voice, speed, first=index == 0) for index, piece in enumerate(self.split(text))
        ]
        if not parts:
            return np.zeros(0, np.float32), 16_000
        return np.concatenate([samples for samples, _ in parts]), parts[0][1]


def _code(token: str | None) -> str | None:
    return token.strip("<|>") if token else None
