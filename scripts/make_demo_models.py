"""Build small random-weight OpenVINO models for demos, tests and benchmarks, fully offline.

Why: the test suite and the demo need real OpenVINO GenAI model directories (IR + tokenizer IRs +
chat template + generation_config.json) but CI has no network access and no room for real weights.
This script trains a tiny byte-level BPE tokenizer on the local Python standard library sources,
wraps it with a Qwen2.5-style chat template (tools, tool calls, tool responses), creates
random-weight ``Qwen2ForCausalLM`` checkpoints and exports them with optimum-intel in-process.

Output layout (``OUT_DIR``)::

    tiny-llm/                    Qwen2, hidden 128, 2 layers, fp16 IR (main model)
    tiny-draft/                  Qwen2, hidden 64, 1 layer, fp16 IR (speculative-decoding draft)
    tiny-vlm/                    LLaVA: CLIP 56 px / patch 14 + tiny-llm-shaped Qwen2, fp16 IR
    bench-qwen2.5-0.5b-int8/     Qwen2.5-0.5B shape, int8 weights (only with --benchmark)
    bench-llava-clip-l336/       LLaVA: CLIP ViT-L/14 at 336 px + tiny-llm-shaped Qwen2 (only with
                                 --benchmark_vlm)
    tiny-embed/                  BERT, hidden 64, 2 layers, fp16 IR: embeddings (served with MEAN pooling)
    tiny-rerank/                 BERT cross-encoder (one-label classifier), hidden 64, 2 layers, fp16 IR
    bench-bert-base-embed/       BERT-base shape, fp16: the embeddings benchmark (only with --benchmark)
    bench-bert-base-rerank/      BERT-base-shaped cross-encoder, fp16: the rerank benchmark (only with --benchmark)

Every model directory holds ``openvino_model.{xml,bin}`` (tiny-vlm: the language, text-embeddings
and vision-embeddings IRs plus ``preprocessor_config.json``), ``openvino_{de,}tokenizer.{xml,bin}``,
``config.json``, ``generation_config.json``, the HF tokenizer files and, written last, the marker
``.ovserve-demo-complete``. A directory without a matching marker is rebuilt. Builds happen in a
scratch directory inside ``OUT_DIR`` and are renamed into place, so a killed run never leaves a
half-written model that looks complete.

Everything is seeded, so the same library versions produce the same tokenizer and weights.

Usage::

    python scripts/make_demo_models.py OUT_DIR [--force] [--benchmark] [--benchmark_vlm]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Must be set before huggingface_hub / transformers are imported: nothing here may touch the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Silences the fork warning of the Rust tokenizers pool; training is fast either way.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Bump whenever the tokenizer, template, shapes or export settings change: existing model
# directories whose marker holds another version are rebuilt.
DEMO_MODELS_VERSION = "ovserve-demo-models/1"
MARKER_NAME = ".ovserve-demo-complete"
LOCK_NAME = ".ovserve-demo.lock"
SCRATCH_PREFIX = ".build-"
_HAVE_FLOCK = importlib.util.find_spec("fcntl") is not None

TINY_LLM = "tiny-llm"
TINY_DRAFT = "tiny-draft"
TINY_VLM = "tiny-vlm"
BENCH_MODEL = "bench-qwen2.5-0.5b-int8"
BENCH_VLM = "bench-llava-clip-l336"

SEED = 1234
TOKENIZER_VOCAB_SIZE = 4000
# Cap on the training text: ~1.5 MB of stdlib sources trains in well under a second.
TOKENIZER_CORPUS_CHARS = 1_500_000

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

# Files the server and openvino_genai need; checked after every export.
_COMMON_FILES = (
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
REQUIRED_FILES = ("openvino_model.xml", "openvino_model.bin", *_COMMON_FILES)
REQUIRED_VLM_FILES = (
    "openvino_language_model.xml",
    "openvino_language_model.bin",
    "openvino_text_embeddings_model.xml",
    "openvino_text_embeddings_model.bin",
    "openvino_vision_embeddings_model.xml",
    "openvino_vision_embeddings_model.bin",
    "preprocessor_config.json",
    *_COMMON_FILES,
)


@dataclass(frozen=True)
class VisionSpec:
    """The CLIP vision tower of a LLaVA-style demo model."""

    image_size: int
    patch_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int


@dataclass(frozen=True)
class ModelSpec:
    """Shape, init and export settings of one demo model."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    # Std-dev of the re-initialised embedding / lm_head weights. The defaults of HF init (0.02)
    # make a random tiny model emit "\n" forever; N(0, 1) embeddings with a wider, untied head give
    # varied greedy text and seed-dependent sampling.
    embed_std: float | None
    lm_head_std: float | None
    weight_format: str  # "fp16" or "int8"
    generation_defaults: dict[str, Any]
    rope_theta: float = 10000.0
    # Set for a LLaVA-style VLM: the fields above then describe its Qwen2 language model.
    vision: VisionSpec | None = None


TINY_LLM_SPEC = ModelSpec(
    name=TINY_LLM,
    hidden_size=128,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    embed_std=1.0,
    lm_head_std=0.15,
    weight_format="fp16",
    generation_defaults={
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.05,
        "max_new_tokens": 64,
    },
)

# Different sampling defaults from tiny-llm on purpose, so tests can tell whether the server
# applies each model's own generation_config.json.
TINY_DRAFT_SPEC = ModelSpec(
    name=TINY_DRAFT,
    hidden_size=64,
    intermediate_size=128,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    embed_std=1.0,
    lm_head_std=0.15,
    weight_format="fp16",
    generation_defaults={
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.9,
        "top_k": 40,
        "repetition_penalty": 1.0,
        "max_new_tokens": 32,
    },
)

# A LLaVA whose language model has tiny-llm's shape. 56 px images in 14 px patches give 16 image
# tokens per image ("default" feature strategy drops CLS), so a request with images stays short.
# Greedy by default: tests compare outputs across images and between unary and streaming.
TINY_VLM_SPEC = ModelSpec(
    name=TINY_VLM,
    hidden_size=128,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    embed_std=1.0,
    lm_head_std=0.15,
    weight_format="fp16",
    generation_defaults={"do_sample": False, "max_new_tokens": 64},
    vision=VisionSpec(image_size=56, patch_size=14, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4),
)

# Qwen2.5-0.5B-Instruct's shape, so the engine does the same per-layer work as the real model.
# The vocabulary is the tiny tokenizer's (4000, not 151936): the real head adds ~136M weights
# (~27% of the int8 bytes read per decoded token), so this model decodes somewhat faster than
# the real one. Default HF init is kept: the benchmark runs with ignore_eos and output text is
# irrelevant.
BENCH_SPEC = ModelSpec(
    name=BENCH_MODEL,
    hidden_size=896,
    intermediate_size=4864,
    num_layers=24,
    num_heads=14,
    num_kv_heads=2,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
    embed_std=None,
    lm_head_std=None,
    weight_format="int8",
    rope_theta=1_000_000.0,
    generation_defaults={
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.05,
        "max_new_tokens": 512,
    },
)


# LLaVA-1.5's vision tower (CLIP ViT-L/14 at 336 px: 304M weights, 576 image tokens) on a
# tiny-llm-shaped language model: the vision encoder is as costly as a real LLaVA's, while text
# streams decode fast, so a benchmark sees what an image request's encoding does to them.
BENCH_VLM_SPEC = ModelSpec(
    name=BENCH_VLM,
    hidden_size=128,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    embed_std=1.0,
    lm_head_std=0.15,
    weight_format="fp16",
    generation_defaults={"do_sample": False, "max_new_tokens": 64},
    vision=VisionSpec(
        image_size=336, patch_size=14, hidden_size=1024, intermediate_size=4096, num_layers=24, num_heads=16
    ),
)


def _log(message: str) -> None:
    print(f"[make_demo_models] {message}", flush=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def is_complete(model_dir: Path) -> bool:
    """True if ``model_dir`` was fully built by this version of the script."""
    marker = model_dir / MARKER_NAME
    try:
        return marker.read_text(encoding="utf-8").strip() == DEMO_MODELS_VERSION
    except OSError:
        return False


@contextlib.contextmanager
def _build_lock(out_dir: Path) -> Iterator[None]:
    """Serialise concurrent builders (e.g. pytest-xdist workers) on one OUT_DIR."""
    if not _HAVE_FLOCK:  # Windows: no flock; the rename-into-place still keeps models consistent.
        yield
        return
    import fcntl

    with open(out_dir / LOCK_NAME, "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


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
        model_max_length=TINY_LLM_SPEC.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    # transformers 5 would write chat_template.jinja and tokenizer_class "TokenizersBackend";
    # keeping the template in tokenizer_config.json and naming a class that transformers 4.x
    # also knows makes the files loadable by both and by the openvino_tokenizers converter.
    tokenizer.save_pretrained(str(out_dir), save_jinja_files=False)
    config_path = out_dir / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    _write_json(config_path, tokenizer_config)
    _log(f"tokenizer: vocab {backend.get_vocab_size()} trained in {time.monotonic() - started:.1f} s")
    return out_dir


def build_vlm_tokenizer(base_dir: Path, out_dir: Path) -> Path:
    """tiny-vlm's tokenizer: the base tokenizer plus the special ``<image>`` token."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(base_dir))
    tokenizer.add_tokens([AddedToken(IMAGE_TOKEN, special=True, normalized=False)], special_tokens=True)
    tokenizer.save_pretrained(str(out_dir), save_jinja_files=False)
    config_path = out_dir / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    _write_json(config_path, tokenizer_config)
    return out_dir


def special_token_ids(tokenizer_dir: Path) -> dict[str, int]:
    """Ids of the added tokens (SPECIAL_TOKENS, and ``<image>`` if present) in ``tokenizer.json``."""
    serialized = json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    return {added["content"]: int(added["id"]) for added in serialized["added_tokens"]}


def _vocab_size(tokenizer_dir: Path) -> int:
    serialized = json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    ids = [*serialized["model"]["vocab"].values(), *(int(added["id"]) for added in serialized["added_tokens"])]
    return max(ids) + 1


def _build_hf_model(spec: ModelSpec, tokenizer_dir: Path, hf_dir: Path) -> None:
    """Save a seeded random ``Qwen2ForCausalLM`` (or LLaVA around one) plus tokenizer files to ``hf_dir``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    ids = special_token_ids(tokenizer_dir)
    eos_id, pad_id = ids[EOS_TOKEN], ids[PAD_TOKEN]
    config_kwargs: dict[str, Any] = {
        "vocab_size": _vocab_size(tokenizer_dir),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "rope_theta": spec.rope_theta,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": spec.tie_word_embeddings,
        # Like Qwen2.5: no BOS is prepended by the tokenizer, <|endoftext|> doubles as bos/pad.
        "bos_token_id": pad_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "use_sliding_window": False,
    }
    config = Qwen2Config(**config_kwargs)

    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(config).eval() if spec.vision is None else _llava(spec.vision, config, ids[IMAGE_TOKEN])
    with torch.no_grad():
        generator = torch.Generator().manual_seed(SEED)
        if spec.embed_std is not None:
            embed = model.get_input_embeddings().weight
            embed.copy_(torch.randn(embed.shape, generator=generator) * spec.embed_std)
        if spec.lm_head_std is not None and not spec.tie_word_embeddings:
            head = model.get_output_embeddings().weight
            head.copy_(torch.randn(head.shape, generator=generator) * spec.lm_head_std)
        if spec.vision is not None:
            # With HF's init (std 0.02) attention is near uniform and its output tiny next to the
            # N(0, 1) embeddings in the residual stream: greedy text follows the last token and
            # two different images gave the same output. Fan-in scaled weights in the vision
            # tower, the projector and the language model make the context, images included,
            # steer the output (red vs blue differ from the first tokens).
            language_model = model.model.language_model
            modules = [*model.model.vision_tower.modules(), *model.model.multi_modal_projector.modules()]
            for module in [*modules, *language_model.modules()]:
                if isinstance(module, torch.nn.Linear | torch.nn.Conv2d):
                    fan_in = module.weight[0].numel()
                    module.weight.copy_(torch.randn(module.weight.shape, generator=generator) / fan_in**0.5)

    model.generation_config = GenerationConfig(
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        **spec.generation_defaults,
    )
    model.save_pretrained(str(hf_dir))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tokenizer_dir / name, hf_dir / name)
    if spec.vision is not None:
        _image_processor(spec.vision).save_pretrained(str(hf_dir))
    del model


def _llava(vision: VisionSpec, text_config: Any, image_token_id: int) -> Any:
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    # Keyword dicts, as for Qwen2Config: the config classes take their fields as **kwargs.
    vision_kwargs: dict[str, Any] = {
        "hidden_size": vision.hidden_size,
        "intermediate_size": vision.intermediate_size,
        "num_hidden_layers": vision.num_layers,
        "num_attention_heads": vision.num_heads,
        "image_size": vision.image_size,
        "patch_size": vision.patch_size,
        "projection_dim": vision.hidden_size,
    }
    llava_kwargs: dict[str, Any] = {
        "vision_config": CLIPVisionConfig(**vision_kwargs),
        "text_config": text_config,
        "image_token_id": image_token_id,
        # "default" drops the CLS feature: (image_size / patch_size)^2 tokens per image.
        "vision_feature_select_strategy": "default",
        "vision_feature_layer": -2,
        "image_seq_length": (vision.image_size // vision.patch_size) ** 2,
        "tie_word_embeddings": text_config.tie_word_embeddings,
    }
    return LlavaForConditionalGeneration(LlavaConfig(**llava_kwargs)).eval()


def _image_processor(vision: VisionSpec) -> Any:
    # Constructed directly: the AutoImageProcessor path wants torchvision, which is not installed.
    from transformers import CLIPImageProcessor

    return CLIPImageProcessor(
        size={"shortest_edge": vision.image_size},
        crop_size={"height": vision.image_size, "width": vision.image_size},
    )


@contextlib.contextmanager
def _quiet_export(scratch: Path) -> Iterator[None]:
    """Mute the exporter's expected noise and keep its temp files next to the output.

    Tracing a random checkpoint prints a dozen TracerWarnings and transformers progress bars that
    drown the progress lines. optimum-intel's int8 step writes through ``tempfile.mkdtemp()`` and
    then renames into the output, which fails across filesystems (e.g. a tmpfs /tmp), so temp
    files go to the scratch directory on the output's filesystem. All settings are restored, since
    tests call this in-process.
    """
    import torch
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    progress_bars = hf_logging.is_progress_bar_enabled()
    saved_tempdir = tempfile.tempdir
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    tempfile.tempdir = str(scratch)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            yield
    finally:
        tempfile.tempdir = saved_tempdir
        hf_logging.set_verbosity(verbosity)
        if progress_bars:
            hf_logging.enable_progress_bar()


def _export(spec: ModelSpec, hf_dir: Path, ov_dir: Path) -> None:
    """Export ``hf_dir`` to OpenVINO IR like ``optimum-cli export openvino --weight-format ...``."""
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    common: dict[str, Any] = {
        "model_name_or_path": str(hf_dir),
        "output": ov_dir,
        "task": "text-generation-with-past" if spec.vision is None else "image-text-to-text",
        "convert_tokenizer": True,
        "library_name": "transformers",
        "local_files_only": True,
    }
    if spec.weight_format == "fp16":
        main_export(ov_config=OVConfig(dtype="fp16"), **common)
    elif spec.weight_format == "int8":
        # Same two steps as the CLI's --weight-format int8 (optimum/commands/export/openvino.py):
        # export with the quantization config (which also keeps the KV-cache precision hint
        # off, as for any int8 CLI export) then compress the weights with nncf.
        from optimum.exporters.openvino.__main__ import _main_quantize

        quantization_config: dict[str, Any] = {
            "bits": 8,
            "sym": False,
            "group_size": -1,
            "ratio": 1.0,
            "dtype": "int8",
            "quant_method": "default",
        }
        main_export(ov_config=OVConfig(quantization_config=quantization_config), **common)
        # In offline mode OVModel.from_pretrained looks a local directory up as a Hub cache
        # entry, fails, and logs "Could not infer whether the model was already converted";
        # harmless (it keeps export=False, which is right), so keep it out of the progress output.
        reload_logger = logging.getLogger("optimum.intel.openvino.modeling_base")
        saved_level = reload_logger.level
        reload_logger.setLevel(logging.ERROR)
        try:
            _main_quantize(
                model_name_or_path=str(hf_dir),
                task="text-generation-with-past",
                library_name="transformers",
                quantization_config=quantization_config,
                output=ov_dir,
                cache_dir=str(hf_dir.parent / "hf-cache"),
            )
        finally:
            reload_logger.setLevel(saved_level)
    else:
        raise ValueError(f"unsupported weight format {spec.weight_format!r}")


def _finalize_export(spec: ModelSpec, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None:
    """Normalise tokenizer files and check the export before the directory is published."""
    # The exporter re-saves the tokenizer through transformers, which (v5) moves the template to
    # chat_template.jinja and renames the class; put back the canonical files so there is one
    # template source in tokenizer_config.json, identical to the one embedded in the tokenizer IR.
    (ov_dir / "chat_template.jinja").unlink(missing_ok=True)
    shutil.copy2(tokenizer_dir / "tokenizer.json", ov_dir / "tokenizer.json")
    tokenizer_config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["model_max_length"] = spec.max_position_embeddings
    _write_json(ov_dir / "tokenizer_config.json", tokenizer_config)
    # optimum-intel records the checkpoint path (our scratch dir, deleted soon) as the
    # quantization "tokenizer"; drop the dangling, run-dependent path.
    openvino_config_path = ov_dir / "openvino_config.json"
    if openvino_config_path.exists():
        openvino_config = json.loads(openvino_config_path.read_text(encoding="utf-8"))
        quantization = openvino_config.get("quantization_config")
        if isinstance(quantization, dict) and "tokenizer" in quantization:
            quantization["tokenizer"] = None
            _write_json(openvino_config_path, openvino_config)
    # Written by the exporter from the checkpoint; copied again in case a future optimum drops it.
    if not (ov_dir / "generation_config.json").exists():
        shutil.copy2(hf_dir / "generation_config.json", ov_dir / "generation_config.json")
    if spec.vision is not None:
        # openvino_genai reads a *flat* preprocessor_config.json; the exporter writes the nested
        # processor_config.json only, and without the flat file the vision encoder fails with a
        # shape mismatch (shared/feasibility.md).
        shutil.copy2(hf_dir / "preprocessor_config.json", ov_dir / "preprocessor_config.json")
    required = REQUIRED_FILES if spec.vision is None else REQUIRED_VLM_FILES
    missing = [name for name in required if not (ov_dir / name).is_file()]
    if missing:
        raise RuntimeError(f"export into {ov_dir} is missing {missing}")

    import openvino as ov

    # openvino_genai reads the chat template from the tokenizer IR, not from tokenizer_config.json.
    rt_info = ov.Core().read_model(ov_dir / "openvino_tokenizer.xml").get_rt_info()
    embedded = rt_info["chat_template"].astype(str) if "chat_template" in rt_info else None
    if embedded != CHAT_TEMPLATE:
        raise RuntimeError("the chat template embedded in openvino_tokenizer.xml differs from CHAT_TEMPLATE")


def _build_one(spec: ModelSpec, out_dir: Path, scratch: Path, tokenizer_dir: Path) -> Path:
    """Build ``spec`` in ``scratch`` and atomically move it to ``out_dir / spec.name``."""
    started = time.monotonic()
    hf_dir = scratch / "hf" / spec.name
    ov_dir = scratch / "ov" / spec.name
    with _quiet_export(scratch):
        _log(f"{spec.name}: creating random checkpoint")
        _build_hf_model(spec, tokenizer_dir, hf_dir)
        _log(f"{spec.name}: exporting to OpenVINO ({spec.weight_format})")
        _export(spec, hf_dir, ov_dir)
    _finalize_export(spec, tokenizer_dir, hf_dir, ov_dir)
    (ov_dir / MARKER_NAME).write_text(DEMO_MODELS_VERSION + "\n", encoding="utf-8")

    target = out_dir / spec.name
    if target.exists():
        # Move the stale copy aside first: rename cannot replace a non-empty directory, and the
        # stale copy must not be half-deleted in place.
        os.replace(target, scratch / f"stale-{spec.name}")
    os.replace(ov_dir, target)
    shutil.rmtree(hf_dir, ignore_errors=True)
    _log(f"{spec.name}: done in {time.monotonic() - started:.1f} s -> {target}")
    return target


def _build(specs: list[ModelSpec], out_dir: Path, force: bool) -> dict[str, Path]:
    # Absolute, because optimum-intel takes a relative path that is not "./..." for a Hub model id.
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {}
    todo: list[ModelSpec] = []
    for spec in specs:
        target = out_dir / spec.name
        if not force and is_complete(target):
            _log(f"{spec.name}: up to date, skipping ({target})")
            result[spec.name] = target
        else:
            todo.append(spec)
    if not todo:
        return result

    with _build_lock(out_dir):
        if _HAVE_FLOCK:
            # Holding the lock, any other scratch dir belongs to a builder that was killed.
            for leftover in out_dir.glob(f"{SCRATCH_PREFIX}*"):
                shutil.rmtree(leftover, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=out_dir))
        try:
            tokenizer_dir: Path | None = None
            vlm_tokenizer_dir: Path | None = None
            for spec in todo:
                target = out_dir / spec.name
                # Another process may have finished it while we waited for the lock.
                if not force and is_complete(target):
                    _log(f"{spec.name}: built by another process, skipping")
                    result[spec.name] = target
                    continue
                if tokenizer_dir is None:
                    tokenizer_dir = build_tokenizer(scratch / "tokenizer")
                if spec.vision is not None and vlm_tokenizer_dir is None:
                    vlm_tokenizer_dir = build_vlm_tokenizer(tokenizer_dir, scratch / "tokenizer-vlm")
                spec_tokenizer = tokenizer_dir if spec.vision is None else vlm_tokenizer_dir
                assert spec_tokenizer is not None
                result[spec.name] = _build_one(spec, out_dir, scratch, spec_tokenizer)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return result


def build_demo_models(out_dir: Path, force: bool = False) -> dict[str, Path]:
    """Build (or reuse) ``tiny-llm``, ``tiny-draft`` and ``tiny-vlm`` in ``out_dir``; returns name -> directory."""
    return _build([TINY_LLM_SPEC, TINY_DRAFT_SPEC, TINY_VLM_SPEC], Path(out_dir), force)


def build_benchmark_model(out_dir: Path, force: bool = False) -> Path:
    """Build (or reuse) the int8 Qwen2.5-0.5B-shaped benchmark model; returns its directory."""
    return _build([BENCH_SPEC], Path(out_dir), force)[BENCH_MODEL]


def build_benchmark_vlm(out_dir: Path, force: bool = False) -> Path:
    """Build (or reuse) the LLaVA with a CLIP ViT-L/14-336 vision tower; returns its directory."""
    return _build([BENCH_VLM_SPEC], Path(out_dir), force)[BENCH_VLM]


# -- retrieval models: a tiny embedding model and a tiny cross-encoder reranker -------------------
#
# BERT-shaped, as the sentence-transformers models OVMS's embeddings demo serves: a WordPiece
# tokenizer whose post-processor writes [CLS] text [SEP] (and [CLS] query [SEP] document [SEP] for
# pairs, which the reranker needs), trained on the same stdlib corpus. The embedding model is served
# with MEAN pooling and normalisation (OVMS's documented setup for e.g. all-MiniLM-L6-v2); the
# reranker is a BertForSequenceClassification with one label, whose score the pipeline passes
# through a sigmoid.

RETRIEVAL_MODELS_VERSION = "ovserve-retrieval-models/1"
TINY_EMBED = "tiny-embed"
TINY_RERANK = "tiny-rerank"
BENCH_EMBED = "bench-bert-base-embed"
BENCH_RERANK = "bench-bert-base-rerank"
RETRIEVAL_VOCAB_SIZE = 3000
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@dataclass(frozen=True)
class RetrievalSpec:
    name: str
    kind: str  # "embeddings" or "rerank"
    hidden_size: int
    layers: int
    heads: int
    max_position_embeddings: int = 512
    # A random classifier head scores every pair ~0.5; a wider one spreads the scores, so that
    # sorting by relevance is visible in tests.
    classifier_std: float = 2.0


TINY_EMBED_SPEC = RetrievalSpec(TINY_EMBED, "embeddings", hidden_size=64, layers=2, heads=4)
TINY_RERANK_SPEC = RetrievalSpec(TINY_RERANK, "rerank", hidden_size=64, layers=2, heads=4)
# BERT-base shape (110M parameters with a real vocabulary; ~88M here), fp16: the embeddings benchmark.
BENCH_EMBED_SPEC = RetrievalSpec(BENCH_EMBED, "embeddings", hidden_size=768, layers=12, heads=12)
# The same shape with a one-label head (bge-reranker-base's size class): the rerank benchmark.
BENCH_RERANK_SPEC = RetrievalSpec(BENCH_RERANK, "rerank", hidden_size=768, layers=12, heads=12)


def is_retrieval_complete(model_dir: Path) -> bool:
    marker = model_dir / MARKER_NAME
    try:
        return marker.read_text(encoding="utf-8").strip() == RETRIEVAL_MODELS_VERSION
    except OSError:
        return False


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


def build_retrieval_checkpoint(spec: RetrievalSpec, tokenizer_dir: Path, hf_dir: Path) -> Path:
    """Save a seeded random BERT (``BertModel``, or a one-label ``BertForSequenceClassification`` for
    a reranker) plus the tokenizer to ``hf_dir``: what a user would download from the Hub."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    tokenizer = bert_tokenizer_class().from_pretrained(str(tokenizer_dir))
    torch.manual_seed(SEED)
    shape: dict[str, Any] = {  # BertConfig's keyword arguments are untyped (**kwargs)
        "vocab_size": len(tokenizer),
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "intermediate_size": spec.hidden_size * 4,
        "max_position_embeddings": spec.max_position_embeddings,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = BertConfig(**shape)
    model: Any
    if spec.kind == "rerank":
        config.num_labels = 1
        model = BertForSequenceClassification(config).eval()
        with torch.no_grad():
            model.classifier.weight.normal_(0.0, spec.classifier_std)
    else:
        model = BertModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(str(hf_dir))
    tokenizer.save_pretrained(str(hf_dir))
    return hf_dir


def _build_retrieval_one(spec: RetrievalSpec, out_dir: Path, scratch: Path, tokenizer_dir: Path) -> Path:
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    started = time.monotonic()
    hf_dir = scratch / "hf" / spec.name
    ov_dir = scratch / "ov" / spec.name
    with _quiet_export(scratch):
        _log(f"{spec.name}: creating random checkpoint")
        build_retrieval_checkpoint(spec, tokenizer_dir, hf_dir)
        _log(f"{spec.name}: exporting to OpenVINO (fp16)")
        main_export(
            model_name_or_path=str(hf_dir),
            output=ov_dir,
            task="feature-extraction" if spec.kind == "embeddings" else "text-classification",
            convert_tokenizer=True,
            library_name="transformers",
            local_files_only=True,
            ov_config=OVConfig(dtype="fp16"),
        )
    missing = [name for name in ("openvino_model.xml", "openvino_tokenizer.xml") if not (ov_dir / name).is_file()]
    if missing:
        raise RuntimeError(f"export into {ov_dir} is missing {missing}")
    (ov_dir / MARKER_NAME).write_text(RETRIEVAL_MODELS_VERSION + "\n", encoding="utf-8")
    target = out_dir / spec.name
    if target.exists():
        os.replace(target, scratch / f"stale-{spec.name}")
    os.replace(ov_dir, target)
    shutil.rmtree(hf_dir, ignore_errors=True)
    _log(f"{spec.name}: done in {time.monotonic() - started:.1f} s -> {target}")
    return target


def build_retrieval_models(
    out_dir: Path, force: bool = False, *, benchmark: bool = False, benchmark_rerank: bool = False
) -> dict[str, Path]:
    """Build (or reuse) ``tiny-embed`` and ``tiny-rerank`` (and with ``benchmark`` the BERT-base-shaped
    ``bench-bert-base-embed``, with ``benchmark_rerank`` ``bench-bert-base-rerank``) in ``out_dir``;
    returns name -> directory."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = [TINY_EMBED_SPEC, TINY_RERANK_SPEC] + ([BENCH_EMBED_SPEC] if benchmark else [])
    specs += [BENCH_RERANK_SPEC] if benchmark_rerank else []
    result = {
        spec.name: out_dir / spec.name for spec in specs if not force and is_retrieval_complete(out_dir / spec.name)
    }
    if len(result) == len(specs):
        return result
    with _build_lock(out_dir):
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=out_dir))
        try:
            tokenizer_dir: Path | None = None
            for spec in specs:
                target = out_dir / spec.name
                if not force and is_retrieval_complete(target):
                    result[spec.name] = target
                    continue
                if tokenizer_dir is None:
                    tokenizer_dir = build_wordpiece_tokenizer(scratch / "tokenizer-wordpiece")
                result[spec.name] = _build_retrieval_one(spec, out_dir, scratch, tokenizer_dir)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out_dir", type=Path, help="directory to create the model directories in")
    parser.add_argument("--force", action="store_true", help="rebuild even if a model is up to date")
    parser.add_argument(
        "--benchmark",
        action="store_true",
        help=f"also build {BENCH_MODEL} (random Qwen2.5-0.5B shape, int8 weights; ~35 s on 2 cores, 360 MB)",
    )
    parser.add_argument(
        "--benchmark_vlm",
        action="store_true",
        help=f"also build {BENCH_VLM} (LLaVA with a CLIP ViT-L/14-336 vision tower, fp16, ~620 MB)",
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    specs = [TINY_LLM_SPEC, TINY_DRAFT_SPEC, TINY_VLM_SPEC] + ([BENCH_SPEC] if args.benchmark else [])
    specs += [BENCH_VLM_SPEC] if args.benchmark_vlm else []
    # One _build call, so the tokenizer is trained once for all models.
    built = _build(specs, args.out_dir, force=args.force)
    bench = args.benchmark
    built.update(build_retrieval_models(args.out_dir, force=args.force, benchmark=bench, benchmark_rerank=bench))
    for name, path in built.items():
        _log(f"{name}: {path}")
    _log(f"total {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
