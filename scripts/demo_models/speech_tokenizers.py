"""The tokenizers of the speech demo models (``scripts.demo_models.speech``), trained offline on the
local Python standard library sources.

Contract: :func:`build_whisper_tokenizer` writes a ``WhisperTokenizer`` (a byte-level BPE, then
Whisper's special tokens in Whisper's order, ``<|endoftext|>`` first, then the 1501 timestamp
tokens) into ``out_dir``; :func:`build_char_sentencepiece` writes SpeechT5's kind of tokenizer (a
character-level SentencePiece model) and returns its file. ``scripts.demo_models.tokenizer``'s
``Tokenizers`` trains each at most once per build.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# Whisper's languages, a few of them (the ids follow this order); "en" first as in Whisper.
LANGUAGES = ("en", "de", "fr", "es", "it", "pl", "zh", "ja")
_BPE_VOCAB = 2000
# openai/whisper-tiny's vocabulary (its multilingual tokenizer, timestamps included).
WHISPER_VOCABULARY = 51_865
_TIMESTAMPS = 1501  # <|0.00|> .. <|30.00|> every 0.02 s
_SPECIALS = (
    "<|endoftext|>",
    "<|startoftranscript|>",
    *[f"<|{language}|>" for language in LANGUAGES],
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
)


def _corpus() -> list[str]:
    stdlib_dir = Path(os.__file__).parent
    return [path.read_text(encoding="utf-8", errors="replace") for path in sorted(stdlib_dir.glob("*.py"))[:40]]


def _whole_stdlib() -> list[str]:
    """Every stdlib source file (tests included, site-packages not): ~30 MB, enough text for a BPE
    of Whisper's 50k text tokens."""
    stdlib_dir = Path(os.__file__).parent
    return [
        path.read_text(encoding="utf-8", errors="replace")
        for path in sorted(stdlib_dir.rglob("*.py"))
        if "site-packages" not in path.relative_to(stdlib_dir).parts
    ]


def build_whisper_tokenizer(out_dir: Path, vocabulary: int | None = None) -> Path:
    """Train a byte-level BPE and wrap it as a ``WhisperTokenizer`` with Whisper's special tokens:
    ~3.5k tokens in all, or exactly ``vocabulary`` (the BPE trained on the whole stdlib)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import WhisperTokenizer

    timestamps = [f"<|{index * 0.02:.2f}|>" for index in range(_TIMESTAMPS)]
    bpe_size = _BPE_VOCAB if vocabulary is None else vocabulary - len(_SPECIALS) - len(timestamps)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_size,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    backend.train_from_iterator(_corpus() if vocabulary is None else _whole_stdlib(), trainer)
    if vocabulary is not None and backend.get_vocab_size() != bpe_size:
        raise RuntimeError(
            f"the stdlib sources gave a BPE of {backend.get_vocab_size()} tokens, not the {bpe_size} a "
            f"{vocabulary}-token Whisper vocabulary needs"
        )
    model = json.loads(backend.to_str())["model"]
    tokenizer = WhisperTokenizer(
        vocab=model["vocab"],
        merges=[tuple(merge) if isinstance(merge, list) else tuple(merge.split(" ")) for merge in model["merges"]],
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        add_prefix_space=False,
    )
    tokenizer.add_tokens(list(_SPECIALS), special_tokens=True)
    tokenizer.add_tokens(timestamps)
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def build_char_sentencepiece(out_dir: Path) -> Path:
    """A character-level SentencePiece model (SpeechT5's tokenizer kind) trained on the stdlib sources."""
    import sentencepiece as spm

    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [line for text in _corpus()[:20] for line in text.splitlines() if line.strip()][:20_000]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(out_dir / "spm_char"),
        vocab_size=80,
        model_type="char",
        character_coverage=1.0,
        bos_id=0,
        pad_id=1,
        eos_id=2,
        unk_id=3,
        minloglevel=2,
    )
    return out_dir / "spm_char.model"
