"""Tokenizers of the demo models, trained offline on the local Python standard library sources.

Contract: each ``build_*`` function writes Hugging Face tokenizer files (``tokenizer.json``,
``tokenizer_config.json``) into ``out_dir`` and returns it. ``Tokenizers`` trains each at most once
per build, in the build's scratch directory. The BPE files are the same on every run with the same
library versions; the WordPiece vocabulary is not: a few tokens and most ids change with every
training, even twice in one process (presumably ties broken in the Rust trainer's hash-map order),
so the retrieval models of two builds tokenize, and therefore embed and score, differently.

- ``build_tokenizer``: byte-level BPE (vocab 4000) with Qwen2.5's chat template and specials, for
  the language models. ``build_vlm_tokenizer`` adds LLaVA's ``<image>`` to it, keeping every other id.
- ``build_wordpiece_tokenizer``: lower-casing WordPiece with BERT's specials and the single/pair
  templates a cross-encoder needs, for the retrieval models.
- ``build_clip_tokenizer``: CLIP's lower-casing BPE (words end in ``</w>``) with CLIP's vocabulary
  layout, for the image model's text encoder.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any

from scripts.demo_models.common import log, read_json, write_json

TOKENIZER_VOCAB_SIZE = 4000
RETRIEVAL_VOCAB_SIZE = 3000
# Cap on the training text: ~1.5 MB of stdlib sources trains in well under a second.
TOKENIZER_CORPUS_CHARS = 1_500_000
# tiny-llm's context; each language model's export rewrites it to its own.
MODEL_MAX_LENGTH = 2048

# Ids follow list order (0..6) because they are passed to the BPE trainer first.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
]
# As in Qwen2.5/Qwen3, the tool-call and think markers are added tokens that are *not* special:
# decoding with skip_special_tokens=True keeps them, so the server can parse tool calls and
# reasoning from the decoded text. The chat-control tokens are special and get skipped.
NON_SPECIAL_ADDED_TOKENS = {"<tool_call>", "</tool_call>", "<think>", "</think>"}
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
# LLaVA's image placeholder. Only tiny-vlm's tokenizer has it, appended after training (id =
# trained vocab size) so every other id matches tiny-llm's tokenizer.
IMAGE_TOKEN = "<image>"
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# CLIP's merges are learned on less text: a tiny text encoder needs no more, and it trains in ~1 s.
CLIP_VOCAB_SIZE = 1500
CLIP_CORPUS_CHARS = 400_000
# CLIP's text encoder has 77 positions; the image pipelines pad and cut every prompt to this.
CLIP_MAX_LENGTH = 77

# Qwen2.5's template (system default, <tools> block, <tool_call> JSON, <tool_response> grouped
# into one user turn), kept to the Jinja subset that both HF transformers and the minja engine of
# openvino_genai.Tokenizer.apply_chat_template render identically. One deliberate extension:
# tool-call ``arguments`` may be a JSON string (OpenAI wire format) or an object; strings are
# inserted verbatim instead of being JSON-quoted a second time.
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" }}
    {{- "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments " }}
    {{- "within <tool_call></tool_call> XML tags:\n<tool_call>\n" }}
    {{- "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first)
        or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


def _corpus() -> list[str]:
    """A fixed slice of the stdlib sources: always present offline, and varied enough for BPE."""
    stdlib_dir = Path(os.__file__).parent
    texts: list[str] = []
    total = 0
    for path in sorted(stdlib_dir.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if total + len(text) > TOKENIZER_CORPUS_CHARS:
            break
        texts.append(text)
        total += len(text)
    return texts


def _save_fast_tokenizer(tokenizer: Any, out_dir: Path) -> None:
    # transformers 5 would write chat_template.jinja and tokenizer_class "TokenizersBackend";
    # keeping the template in tokenizer_config.json and naming a class that transformers 4.x
    # also knows makes the files loadable by both and by the openvino_tokenizers converter.
    tokenizer.save_pretrained(str(out_dir), save_jinja_files=False)
    config_path = out_dir / "tokenizer_config.json"
    tokenizer_config = read_json(config_path)
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    write_json(config_path, tokenizer_config)


def build_tokenizer(out_dir: Path) -> Path:
    """Train the byte-level BPE tokenizer and save it as an HF ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    started = time.monotonic()
    backend = Tokenizer(models.BPE())
    # GPT-2 style byte-level pre-tokenisation: lossless for any UTF-8 input (emoji, CJK) and
    # supported by the openvino_tokenizers converter.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer)

    # The trainer registers all its special tokens as special; flip the markers to non-special
    # (see NON_SPECIAL_ADDED_TOKENS) by editing the serialised form, which keeps their ids.
    serialized = json.loads(backend.to_str())
    for added in serialized["added_tokens"]:
        if added["content"] in NON_SPECIAL_ADDED_TOKENS:
            added["special"] = False
    backend = Tokenizer.from_str(json.dumps(serialized))

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    _save_fast_tokenizer(tokenizer, out_dir)
    log(f"tokenizer: vocab {backend.get_vocab_size()} trained in {time.monotonic() - started:.1f} s")
    return out_dir


def build_vlm_tokenizer(base_dir: Path, out_dir: Path) -> Path:
    """tiny-vlm's tokenizer: the base tokenizer plus the special ``<image>`` token."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(base_dir))
    tokenizer.add_tokens([AddedToken(IMAGE_TOKEN, special=True, normalized=False)], special_tokens=True)
    _save_fast_tokenizer(tokenizer, out_dir)
    return out_dir


def special_token_ids(tokenizer_dir: Path) -> dict[str, int]:
    """Ids of the added tokens (SPECIAL_TOKENS, and ``<image>`` if present) in ``tokenizer.json``."""
    serialized = read_json(tokenizer_dir / "tokenizer.json")
    return {added["content"]: int(added["id"]) for added in serialized["added_tokens"]}


def vocab_size(tokenizer_dir: Path) -> int:
    """One past the largest id in ``tokenizer.json``, added tokens included: the model's embedding rows."""
    serialized = read_json(tokenizer_dir / "tokenizer.json")
    ids = [*serialized["model"]["vocab"].values(), *(int(added["id"]) for added in serialized["added_tokens"])]
    return max(ids) + 1


def bert_tokenizer_class() -> Any:
    """transformers' BertTokenizerFast (exported lazily, so invisible to type checkers)."""
    import transformers

    return getattr(transformers, "BertTokenizerFast")  # noqa: B009


def build_wordpiece_tokenizer(out_dir: Path) -> Path:
    """A lower-casing WordPiece tokenizer with BERT's specials and single/pair templates."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    BertTokenizerFast = bert_tokenizer_class()

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=RETRIEVAL_VOCAB_SIZE, special_tokens=BERT_SPECIALS, show_progress=False
    )
    backend.train_from_iterator(_corpus(), trainer)
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tokenizer = BertTokenizerFast(tokenizer_object=backend, model_max_length=512)
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def build_clip_tokenizer(out_dir: Path) -> Path:
    """A ``CLIPTokenizer``: CLIP's normalizer, pre-tokenizer and ``</w>`` word ends around merges
    trained on the stdlib sources, in CLIP's vocabulary layout: the 256 byte symbols, the same
    with ``</w>``, a token per merge, then ``<|startoftext|>`` and ``<|endoftext|>``.

    The layout matters beyond HF: with every byte symbol in the vocabulary (both forms), no input
    falls back to the unknown token, which the openvino_tokenizers BPE would fail on (an emoji or
    CJK prompt raised ``ragged_offset < outputs[2].get_size()`` with a trained-only vocabulary).
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    started = time.monotonic()
    backend = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    # CLIP's pipeline as transformers' CLIPTokenizer builds it, so the merges fit the tokenizer that uses them.
    backend.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    words = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(words), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=CLIP_VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        end_of_word_suffix="</w>",
        min_frequency=2,
        show_progress=False,
    )
    corpus, total = [], 0
    for text in _corpus():
        corpus.append(text)
        total += len(text)
        if total >= CLIP_CORPUS_CHARS:
            break
    backend.train_from_iterator(corpus, trainer)
    # Pairs, not "a b" strings: the tokenizers BPE that CLIPTokenizer builds takes only pairs
    # (its annotation says list[str]).
    merges: Any = [tuple(pair) for pair in json.loads(backend.to_str())["model"]["merges"]]
    symbols = list(bytes_to_unicode().values())
    vocab: dict[str, int] = {}
    for token in [*symbols, *(symbol + "</w>" for symbol in symbols), *("".join(pair) for pair in merges)]:
        vocab.setdefault(token, len(vocab))
    vocab.setdefault("<|startoftext|>", len(vocab))
    vocab.setdefault("<|endoftext|>", len(vocab))
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=CLIP_MAX_LENGTH)
    tokenizer.save_pretrained(str(out_dir))
    log(f"CLIP tokenizer: vocab {len(vocab)} trained in {time.monotonic() - started:.1f} s")
    return out_dir


class Tokenizers:
    """The tokenizers of one build, each trained on first use into ``scratch`` and reused after."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch

    @functools.cached_property
    def bpe(self) -> Path:
        return build_tokenizer(self._scratch / "tokenizer")

    @functools.cached_property
    def vlm(self) -> Path:
        return build_vlm_tokenizer(self.bpe, self._scratch / "tokenizer-vlm")

    @functools.cached_property
    def wordpiece(self) -> Path:
        return build_wordpiece_tokenizer(self._scratch / "tokenizer-wordpiece")

    @functools.cached_property
    def whisper(self) -> Path:
        from scripts.demo_models.speech_tokenizers import build_whisper_tokenizer

        return build_whisper_tokenizer(self._scratch / "tokenizer-whisper")

    @functools.cached_property
    def whisper_full(self) -> Path:
        from scripts.demo_models.speech_tokenizers import WHISPER_VOCABULARY, build_whisper_tokenizer

        return build_whisper_tokenizer(self._scratch / "tokenizer-whisper-full", WHISPER_VOCABULARY)

    @functools.cached_property
    def speecht5(self) -> Path:
        from scripts.demo_models.speech_tokenizers import build_char_sentencepiece

        return build_char_sentencepiece(self._scratch / "tokenizer-speecht5")

    @functools.cached_property
    def clip(self) -> Path:
        return build_clip_tokenizer(self._scratch / "tokenizer-clip")
