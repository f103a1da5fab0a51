"""Random Whisper-shaped speech-to-text models, served by ``openvino_genai.WhisperPipeline``.

Whisper's real shape where the pipeline depends on it (80 mel bins, 30 s windows of 3000 frames,
1500 encoder positions, the special tokens ``<|startoftranscript|>``, languages, ``<|transcribe|>``,
``<|translate|>``, ``<|notimestamps|>`` and the 1501 timestamp tokens ``<|0.00|>``..``<|30.00|>`` right
after it). The text vocabulary is a byte-level BPE trained on the local stdlib sources (no
download); the special tokens, ``<|endoftext|>`` first, are appended after it in Whisper's order (the
pipeline's word timestamps take every id below ``<|endoftext|>`` for text), and
``generation_config.json`` carries the ids the pipeline reads (``lang_to_id``, ``task_to_id``,
``no_timestamps_token_id``, suppress lists) and the ``alignment_heads`` of word timestamps: every
head of the last half of the decoder layers, Whisper's default for a model nobody measured. Only
the "space + letters" tokens have output weights, so the greedy text is words (" make make ..."),
which word timestamps split and time.

- ``tiny-whisper``: tiny everywhere else (d_model 64, 2+2 layers, ~3.5k tokens), fp16 IR: the tests' model.
- ``bench-whisper-tiny``: openai/whisper-tiny's size (d_model 384, 4+4 layers, 6 heads, FFN 1536,
  51,865 tokens: the output projection over the vocabulary is much of a decoding step's cost), fp32
  IR, and the same weights as a transformers checkpoint in its ``transformers/`` subdirectory, so
  ``scripts/bench_audio.py`` runs transformers' pipeline on exactly what the server runs.

Contract: ``WhisperSpec`` is a ``build.DemoModel``; the export (task
``automatic-speech-recognition-with-past``) is checked for the encoder, decoder and tokenizer IRs.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from scripts.demo_models.common import SEED, read_json, require_files, write_json
from scripts.demo_models.speech_tokenizers import LANGUAGES
from scripts.demo_models.tokenizer import Tokenizers

# 2: <|endoftext|> after the text vocabulary (as in Whisper), alignment_heads in generation_config.json,
# greedy text made of words.
SPEECH_MODELS_VERSION = "ovserve-speech-models/2"
TINY_WHISPER = "tiny-whisper"
BENCH_WHISPER = "bench-whisper-tiny"
# Where bench-whisper-tiny keeps its transformers checkpoint (the weights its IR was exported from).
CHECKPOINT_SUBDIR = "transformers"
# The tokens tiny-whisper writes: byte-level BPE's "Ġ" (a space) then letters, i.e. one word each.
_WORD_TOKEN = re.compile(r"Ġ[A-Za-z]+")


@dataclass(frozen=True)
class WhisperSpec:
    version: ClassVar[str] = SPEECH_MODELS_VERSION
    task: ClassVar[str] = "automatic-speech-recognition-with-past"

    name: str
    d_model: int = 64
    layers: int = 2  # encoder layers, and as many decoder layers
    heads: int = 4
    # Whisper's 51,865 tokens instead of ~3.5k (WHISPER_VOCABULARY).
    full_vocabulary: bool = False
    weight_format: str = "fp16"
    # Publish the transformers checkpoint too, in CHECKPOINT_SUBDIR (a benchmark against transformers).
    keep_checkpoint: bool = False
    # The decoder position from which the model writes <|endoftext|> (see _end_windows_at); None: never,
    # every window then runs to the token budget.
    eos_after: int | None = None

    def tokenizer(self, tokenizers: Tokenizers) -> Path:
        return tokenizers.whisper_full if self.full_vocabulary else tokenizers.whisper

    def checkpoint(self, tokenizer_dir: Path, hf_dir: Path) -> Path:
        import torch
        from transformers import (
            WhisperConfig,
            WhisperFeatureExtractor,
            WhisperForConditionalGeneration,
            WhisperTokenizer,
        )

        tokenizer = WhisperTokenizer.from_pretrained(str(tokenizer_dir))
        ids = _special_ids(tokenizer)
        torch.manual_seed(SEED)
        shape: dict[str, Any] = {
            "vocab_size": len(tokenizer),
            "num_mel_bins": 80,
            "d_model": self.d_model,
            "encoder_layers": self.layers,
            "decoder_layers": self.layers,
            "encoder_attention_heads": self.heads,
            "decoder_attention_heads": self.heads,
            "encoder_ffn_dim": self.d_model * 4,
            "decoder_ffn_dim": self.d_model * 4,
            "max_source_positions": 1500,
            "max_target_positions": 448,
            "pad_token_id": ids["<|endoftext|>"],
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|endoftext|>"],
            "decoder_start_token_id": ids["<|startoftranscript|>"],
            "begin_suppress_tokens": [ids["<|endoftext|>"]],
            "suppress_tokens": [],
        }
        model = WhisperForConditionalGeneration(WhisperConfig(**shape)).eval()
        vocab: dict[str, int] = tokenizer.get_vocab()
        words = [index for token, index in vocab.items() if _WORD_TOKEN.fullmatch(token)]
        with torch.no_grad():
            # Wider output weights than the default init, so the greedy pick does not hover near 0.
            model.proj_out.weight.normal_(0.0, 0.5)
            # proj_out is tied to the decoder's embeddings: a zero row gives a token a logit of 0
            # whatever the state, below the best of the random ones. Zeroed for every token but the
            # "space + letters" ones: the special tokens (<|endoftext|>, languages, tasks,
            # timestamps...), so greedy output is never empty and never only markers (where the
            # pipeline needs them it forces them: the task and timestamp tokens; language
            # detection, all equal, picks the first, "en"); and the other text tokens, so the text
            # is words separated by spaces (" self self ..."), which word timestamps split and time.
            kept = torch.zeros(len(tokenizer), dtype=torch.bool)
            kept[words] = True
            model.proj_out.weight[~kept] = 0.0
            if self.eos_after is not None:
                _end_windows_at(model, ids["<|endoftext|>"], self.eos_after)
        model.save_pretrained(str(hf_dir))
        tokenizer.save_pretrained(str(hf_dir))
        WhisperFeatureExtractor(feature_size=80).save_pretrained(str(hf_dir))
        heads = [[layer, head] for layer in range(self.layers // 2, self.layers) for head in range(self.heads)]
        write_json(hf_dir / "generation_config.json", _generation_config(ids, tokenizer.get_vocab().get("Ġ"), heads))
        return hf_dir

    def finalize(self, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None:
        require_files(
            ov_dir,
            (
                "openvino_encoder_model.xml",
                "openvino_decoder_model.xml",
                "openvino_tokenizer.xml",
                "openvino_detokenizer.xml",
                "preprocessor_config.json",
            ),
        )
        # The export rewrites generation_config.json from the model's config; the pipeline needs ours.
        write_json(ov_dir / "generation_config.json", read_json(hf_dir / "generation_config.json"))
        if self.keep_checkpoint:
            shutil.copytree(hf_dir, ov_dir / CHECKPOINT_SUBDIR)


def _end_windows_at(model: Any, eot: int, position: int) -> None:
    """Make greedy decoding end every window with <|endoftext|> once it reaches decoder ``position``,
    as a real Whisper ends a window of speech after its ~100 tokens: a benchmark then decodes the same
    realistic number of tokens per window on every implementation, none of them bound by its own
    token budget (ovserve's is 224 per window).

    The decoder positions from ``position`` on get a large shared direction, which dominates the
    residual stream through the random layers, so the final layer norm turns it into a hidden state
    of norm ~sqrt(d_model) along that direction; <|endoftext|>'s output row, that direction scaled
    by 5, then gives it a logit of ~5 sqrt(d_model) (~98 at d_model 384), above the best of the
    other random rows (~4.4 sigma, ~43). Before ``position`` its logit is ~N(0, 5^2): never the best.
    The row is also <|endoftext|>'s input embedding (tied); it is no window's input."""
    import torch

    direction = torch.randn(model.config.d_model)
    direction /= direction.norm()
    model.model.decoder.embed_positions.weight[position:] += 100.0 * direction
    model.proj_out.weight[eot] = 5.0 * direction


def _special_ids(tokenizer: Any) -> dict[str, int]:
    vocab: dict[str, int] = tokenizer.get_vocab()
    return {token: index for token, index in vocab.items() if token.startswith("<|") and token.endswith("|>")}


def _generation_config(ids: dict[str, int], space: int | None, alignment_heads: list[list[int]]) -> dict[str, Any]:
    eot = ids["<|endoftext|>"]
    return {
        "alignment_heads": alignment_heads,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "decoder_start_token_id": ids["<|startoftranscript|>"],
        # As Whisper: no transcript starts with a bare space or ends at once.
        "begin_suppress_tokens": [eot] if space is None else [space, eot],
        "suppress_tokens": [],
        "is_multilingual": True,
        "lang_to_id": {f"<|{language}|>": ids[f"<|{language}|>"] for language in LANGUAGES},
        "task_to_id": {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        "no_timestamps_token_id": ids["<|notimestamps|>"],
        "prev_sot_token_id": ids["<|startofprev|>"],
        "max_initial_timestamp_index": 50,
        "max_length": 448,
        "return_timestamps": False,
        "forced_decoder_ids": None,
    }


TINY_WHISPER_SPEC = WhisperSpec(TINY_WHISPER)
# openai/whisper-tiny's shape (FFN 4 x d_model = 1536), fp32 so the IR holds exactly the checkpoint's
# weights; 97 text tokens per 30 s window (positions 4..100), about what Whisper writes for 30 s of speech.
BENCH_WHISPER_SPEC = WhisperSpec(
    BENCH_WHISPER,
    d_model=384,
    layers=4,
    heads=6,
    full_vocabulary=True,
    weight_format="fp32",
    keep_checkpoint=True,
    eos_after=100,
)


TINY_SPEECHT5 = "tiny-speecht5"
# The voices written next to tiny-speecht5 (raw float32 speaker embeddings, as OVMS reads them).
SPEECHT5_VOICES = ("alloy", "echo")
_SPEAKER_DIM = 512


@dataclass(frozen=True)
class SpeechT5Spec:
    """A random SpeechT5 text-to-speech model with a random HiFi-GAN vocoder, for
    ``openvino_genai.Text2SpeechPipeline``; two voices (speaker embeddings) in ``voices/``."""

    version: ClassVar[str] = SPEECH_MODELS_VERSION
    weight_format: ClassVar[str] = "fp16"
    task: ClassVar[str] = "text-to-audio"

    name: str
    hidden_size: int = 64

    def tokenizer(self, tokenizers: Tokenizers) -> Path:
        return tokenizers.speecht5

    def model_kwargs(self, hf_dir: Path) -> dict[str, Any]:
        return {"vocoder": str(hf_dir / "vocoder")}

    def checkpoint(self, tokenizer_dir: Path, hf_dir: Path) -> Path:
        import torch
        from transformers import (
            SpeechT5Config,
            SpeechT5ForTextToSpeech,
            SpeechT5HifiGan,
            SpeechT5HifiGanConfig,
            SpeechT5Tokenizer,
        )

        tokenizer = SpeechT5Tokenizer(str(tokenizer_dir))
        torch.manual_seed(SEED)
        size = self.hidden_size
        shape: dict[str, Any] = {
            "vocab_size": len(tokenizer),
            "hidden_size": size,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "encoder_ffn_dim": size * 2,
            "decoder_ffn_dim": size * 2,
            "speech_decoder_prenet_units": size,
            "speech_decoder_postnet_units": size,
            "speech_decoder_postnet_layers": 2,
            "speaker_embedding_dim": _SPEAKER_DIM,
            "num_mel_bins": 80,
        }
        SpeechT5ForTextToSpeech(SpeechT5Config(**shape)).eval().save_pretrained(str(hf_dir))
        tokenizer.save_pretrained(str(hf_dir))
        vocoder_shape: dict[str, Any] = {"model_in_dim": 80, "upsample_initial_channel": 32}  # untyped **kwargs
        vocoder = SpeechT5HifiGan(SpeechT5HifiGanConfig(**vocoder_shape)).eval()
        with torch.no_grad():
            # HiFi-GAN's default init leaves a random vocoder's output near 1e-9, silence once
            # quantized to 16 bits: wider output weights make the voices audibly (and testably) differ.
            vocoder.conv_post.weight.normal_(0.0, 1.0)
            for block in vocoder.upsampler:
                block.weight.normal_(0.0, 0.3)
        vocoder.save_pretrained(str(hf_dir / "vocoder"))
        return hf_dir

    def finalize(self, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None:
        import numpy as np

        require_files(
            ov_dir,
            (
                "openvino_encoder_model.xml",
                "openvino_decoder_model.xml",
                "openvino_postnet.xml",
                "openvino_vocoder.xml",
                "openvino_tokenizer.xml",
            ),
        )
        voices = ov_dir / "voices"
        voices.mkdir()
        rng = np.random.default_rng(SEED)
        for voice in SPEECHT5_VOICES:
            (voices / f"{voice}.bin").write_bytes(rng.normal(0.0, 0.1, _SPEAKER_DIM).astype(np.float32).tobytes())


TINY_SPEECHT5_SPEC = SpeechT5Spec(TINY_SPEECHT5)
