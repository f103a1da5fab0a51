"""Random LLaVA models: a CLIP vision tower on a tiny-llm-shaped Qwen2 (tiny-vlm, bench-llava-clip-l336).

Contract: ``VisionLanguageModelSpec`` is llm.py's kind with a vision tower. Its tokenizer is the BPE
tokenizer plus ``<image>``; its checkpoint adds fan-in scaled vision, projector and language
weights and a flat ``preprocessor_config.json``, which ``finalize`` copies into the export
(openvino_genai reads that file; the exporter writes only the nested processor_config.json).
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.demo_models.llm import TINY_LLM_SPEC, TOKENIZER_AND_CONFIG_FILES, LanguageModelSpec
from scripts.demo_models.tokenizer import IMAGE_TOKEN, Tokenizers

TINY_VLM = "tiny-vlm"
BENCH_VLM = "bench-llava-clip-l336"
# Greedy by default: tests compare outputs across images and between unary and streaming.
GREEDY = {"do_sample": False, "max_new_tokens": 64}


@dataclass(frozen=True)
class VisionSpec:
    """The CLIP vision tower of a LLaVA-style demo model."""

    image_size: int
    patch_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int


@dataclass(frozen=True, kw_only=True)
class VisionLanguageModelSpec(LanguageModelSpec):
    """A LLaVA: the inherited fields describe its Qwen2 language model, ``vision`` its CLIP tower."""

    task = "image-text-to-text"
    required_files = (
        "openvino_language_model.xml",
        "openvino_language_model.bin",
        "openvino_text_embeddings_model.xml",
        "openvino_text_embeddings_model.bin",
        "openvino_vision_embeddings_model.xml",
        "openvino_vision_embeddings_model.bin",
        "preprocessor_config.json",
        *TOKENIZER_AND_CONFIG_FILES,
    )

    vision: VisionSpec

    def tokenizer(self, tokenizers: Tokenizers) -> Path:
        return tokenizers.vlm

    def checkpoint(self, tokenizer_dir: Path, hf_dir: Path) -> Path:
        super().checkpoint(tokenizer_dir, hf_dir)
        # Constructed directly: the AutoImageProcessor path wants torchvision, which is not installed.
        from transformers import CLIPImageProcessor

        CLIPImageProcessor(
            size={"shortest_edge": self.vision.image_size},
            crop_size={"height": self.vision.image_size, "width": self.vision.image_size},
        ).save_pretrained(str(hf_dir))
        return hf_dir

    def _new_model(self, text_config: Any, token_ids: dict[str, int]) -> Any:
        from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

        vision = self.vision
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
            "image_token_id": token_ids[IMAGE_TOKEN],
            # "default" drops the CLS feature: (image_size / patch_size)^2 tokens per image.
            "vision_feature_select_strategy": "default",
            "vision_feature_layer": -2,
            "image_seq_length": (vision.image_size // vision.patch_size) ** 2,
            "tie_word_embeddings": text_config.tie_word_embeddings,
        }
        return LlavaForConditionalGeneration(LlavaConfig(**llava_kwargs)).eval()

    def _init_weights(self, model: Any, generator: Any) -> None:
        import torch

        super()._init_weights(model, generator)
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

    def finalize(self, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None:
        # Without the flat file the vision encoder fails with a shape mismatch (shared/feasibility.md).
        shutil.copy2(hf_dir / "preprocessor_config.json", ov_dir / "preprocessor_config.json")
        super().finalize(tokenizer_dir, hf_dir, ov_dir)


def on_language_model(language: LanguageModelSpec, vision: VisionSpec, **changes: Any) -> VisionLanguageModelSpec:
    """A LLaVA whose language model is ``language`` with ``changes`` (at least a new ``name``)."""
    fields = {field.name: getattr(language, field.name) for field in dataclasses.fields(language)}
    return VisionLanguageModelSpec(**{**fields, **changes}, vision=vision)


# tiny-llm's language model. 56 px images in 14 px patches give 16 image tokens per image
# ("default" feature strategy drops CLS), so a request with images stays short.
TINY_VLM_SPEC = on_language_model(
    TINY_LLM_SPEC,
    VisionSpec(image_size=56, patch_size=14, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4),
    name=TINY_VLM,
    generation_defaults=GREEDY,
)

# LLaVA-1.5's vision tower (CLIP ViT-L/14 at 336 px: 304M weights, 576 image tokens) on a
# tiny-llm-shaped language model: the vision encoder is as costly as a real LLaVA's, while text
# streams decode fast, so a benchmark sees what an image request's encoding does to them.
BENCH_VLM_SPEC = on_language_model(
    TINY_LLM_SPEC,
    VisionSpec(image_size=336, patch_size=14, hidden_size=1024, intermediate_size=4096, num_layers=24, num_heads=16),
    name=BENCH_VLM,
    max_position_embeddings=4096,
    generation_defaults=GREEDY,
)
