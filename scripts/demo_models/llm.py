"""Random Qwen2 language models: tiny-llm, tiny-draft and the int8 Qwen2.5-0.5B-shaped benchmark model.

Contract: ``LanguageModelSpec`` is a ``build.DemoModel``. ``checkpoint`` saves a seeded random
``Qwen2ForCausalLM`` with the spec's sampling defaults as ``generation_config.json`` and the BPE
tokenizer's files; ``finalize`` puts the canonical tokenizer files back into the export and checks
it: the required files exist and the tokenizer IR embeds ``CHAT_TEMPLATE`` unchanged, since
openvino_genai reads the template from there. vlm.py's kind extends this one through the
``_new_model`` and ``_init_weights`` hooks.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from scripts.demo_models.common import SEED, read_json, require_files, write_json
from scripts.demo_models.tokenizer import (
    CHAT_TEMPLATE,
    EOS_TOKEN,
    PAD_TOKEN,
    Tokenizers,
    special_token_ids,
    vocab_size,
)

# Bump whenever the tokenizer, template, shapes or export settings change: existing model
# directories whose marker holds another version are rebuilt.
DEMO_MODELS_VERSION = "ovserve-demo-models/1"
TINY_LLM = "tiny-llm"
TINY_DRAFT = "tiny-draft"
BENCH_MODEL = "bench-qwen2.5-0.5b-int8"

# Files the server and openvino_genai need from any generative model; checked after every export.
TOKENIZER_AND_CONFIG_FILES = (
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
)

# Qwen2.5-Instruct's sampling defaults (its generation_config.json).
QWEN25_SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}


@dataclass(frozen=True, kw_only=True)
class LanguageModelSpec:
    """Shape, init and export settings of one random Qwen2 model."""

    version: ClassVar[str] = DEMO_MODELS_VERSION
    task: ClassVar[str] = "text-generation-with-past"
    required_files: ClassVar[tuple[str, ...]] = (
        "openvino_model.xml",
        "openvino_model.bin",
        *TOKENIZER_AND_CONFIG_FILES,
    )

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

    def tokenizer(self, tokenizers: Tokenizers) -> Path:
        return tokenizers.bpe

    def checkpoint(self, tokenizer_dir: Path, hf_dir: Path) -> Path:
        """Save a seeded random model plus the tokenizer files to ``hf_dir``."""
        import torch
        from transformers import GenerationConfig, Qwen2Config

        ids = special_token_ids(tokenizer_dir)
        eos_id, pad_id = ids[EOS_TOKEN], ids[PAD_TOKEN]
        config_kwargs: dict[str, Any] = {  # the config classes take their fields as **kwargs
            "vocab_size": vocab_size(tokenizer_dir),
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "max_position_embeddings": self.max_position_embeddings,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": self.tie_word_embeddings,
            # Like Qwen2.5: no BOS is prepended by the tokenizer, <|endoftext|> doubles as bos/pad.
            "bos_token_id": pad_id,
            "eos_token_id": eos_id,
            "pad_token_id": pad_id,
            "use_sliding_window": False,
        }
        config = Qwen2Config(**config_kwargs)
        torch.manual_seed(SEED)
        model = self._new_model(config, ids)
        with torch.no_grad():
            self._init_weights(model, torch.Generator().manual_seed(SEED))
        model.generation_config = GenerationConfig(
            bos_token_id=pad_id,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
            **self.generation_defaults,
        )
        model.save_pretrained(str(hf_dir))
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy2(tokenizer_dir / name, hf_dir / name)
        return hf_dir

    def _new_model(self, text_config: Any, token_ids: dict[str, int]) -> Any:
        """The model with HF's seeded init; ``text_config`` is its Qwen2Config."""
        from transformers import Qwen2ForCausalLM

        return Qwen2ForCausalLM(text_config).eval()

    def _init_weights(self, model: Any, generator: Any) -> None:
        """Re-initialise weights from ``generator`` (under ``torch.no_grad``), in a fixed order."""
        import torch

        if self.embed_std is not None:
            embed = model.get_input_embeddings().weight
            embed.copy_(torch.randn(embed.shape, generator=generator) * self.embed_std)
        if self.lm_head_std is not None and not self.tie_word_embeddings:
            head = model.get_output_embeddings().weight
            head.copy_(torch.randn(head.shape, generator=generator) * self.lm_head_std)

    def finalize(self, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None:
        """Normalise tokenizer files and check the export before the directory is published."""
        # The exporter re-saves the tokenizer through transformers, which (v5) moves the template to
        # chat_template.jinja and renames the class; put back the canonical files so there is one
        # template source in tokenizer_config.json, identical to the one embedded in the tokenizer IR.
        (ov_dir / "chat_template.jinja").unlink(missing_ok=True)
        shutil.copy2(tokenizer_dir / "tokenizer.json", ov_dir / "tokenizer.json")
        tokenizer_config = read_json(tokenizer_dir / "tokenizer_config.json")
        tokenizer_config["model_max_length"] = self.max_position_embeddings
        write_json(ov_dir / "tokenizer_config.json", tokenizer_config)
        # optimum-intel records the checkpoint path (our scratch dir, deleted soon) as the
        # quantization "tokenizer"; drop the dangling, run-dependent path.
        openvino_config_path = ov_dir / "openvino_config.json"
        if openvino_config_path.exists():
            openvino_config = read_json(openvino_config_path)
            quantization = openvino_config.get("quantization_config")
            if isinstance(quantization, dict) and "tokenizer" in quantization:
                quantization["tokenizer"] = None
                write_json(openvino_config_path, openvino_config)
        # Written by the exporter from the checkpoint; copied again in case a future optimum drops it.
        if not (ov_dir / "generation_config.json").exists():
            shutil.copy2(hf_dir / "generation_config.json", ov_dir / "generation_config.json")
        require_files(ov_dir, self.required_files)

        import openvino as ov

        # openvino_genai reads the chat template from the tokenizer IR, not from tokenizer_config.json.
        rt_info = ov.Core().read_model(ov_dir / "openvino_tokenizer.xml").get_rt_info()
        embedded = rt_info["chat_template"].astype(str) if "chat_template" in rt_info else None
        if embedded != CHAT_TEMPLATE:
            raise RuntimeError("the chat template embedded in openvino_tokenizer.xml differs from CHAT_TEMPLATE")


TINY_LLM_SPEC = LanguageModelSpec(
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
    generation_defaults={**QWEN25_SAMPLING, "max_new_tokens": 64},
)

# tiny-llm at half the width and depth (a draft shares the main model's tokenizer and context).
# Different sampling defaults from tiny-llm on purpose, so tests can tell whether the server
# applies each model's own generation_config.json.
TINY_DRAFT_SPEC = dataclasses.replace(
    TINY_LLM_SPEC,
    name=TINY_DRAFT,
    hidden_size=64,
    intermediate_size=128,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    generation_defaults={
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.9,
        "top_k": 40,
        "repetition_penalty": 1.0,
        "max_new_tokens": 32,
    },
)

# Qwen2.5-0.5B-Instruct's shape, so the engine does the same per-layer work as the real model.
# The vocabulary is the tiny tokenizer's (4000, not 151936): the real head adds ~136M weights
# (~27% of the int8 bytes read per decoded token), so this model decodes somewhat faster than
# the real one. Default HF init is kept: the benchmark runs with ignore_eos and output text is
# irrelevant.
BENCH_SPEC = LanguageModelSpec(
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
    generation_defaults={**QWEN25_SAMPLING, "max_new_tokens": 512},
)
