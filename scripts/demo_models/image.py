"""A random Stable-Diffusion-1.5-shaped image model, served by openvino_genai's image pipelines.

``tiny-image`` is a diffusers ``StableDiffusionPipeline`` with SD 1.5's structure where the pipelines
depend on it and tiny sizes elsewhere: a CLIP text encoder (hidden 32, 2 layers, 77 positions) under
a CLIP tokenizer trained offline (``tokenizer.build_clip_tokenizer``), a UNet with cross-attention
(channels 32/64, one layer per block, 4 latent channels, sample size 8), an ``AutoencoderKL`` with
four blocks of 16 channels, so its scale factor is SD's 8 (sizes must be multiples of 8; the default
size is 8 x 8 = 64 x 64 pixels), and SD's Euler discrete scheduler. Exported with optimum-intel's
``text-to-image`` task (diffusers library), it holds ``model_index.json``, ``scheduler/``,
``text_encoder/``, ``tokenizer/`` (with ``openvino_{de,}tokenizer``), ``unet/``, ``vae_decoder/`` and
``vae_encoder/``: ``Text2ImagePipeline``, ``Image2ImagePipeline`` and ``InpaintingPipeline`` all load
it. Beside the export:

- ``graph.pbtxt``: OVMS's image-generation graph (``ImageGenCalculator``) as its export writes it,
  with a few of the calculator's options set so a demo stays quick (4 steps unless asked, at most
  512 x 512);
- ``loras/tiny-style.safetensors``: a random rank-4 LoRA over the UNet's attention projections in
  the kohya layout (``lora_unet_<module>.lora_down/lora_up/alpha``) that openvino_genai's ``Adapter``
  matches to this UNet; it changes the images visibly (most pixels at alpha 1).

A random UNet draws noise-like images, but deterministic ones: the same seed gives the same image,
and the prompt, the negative prompt, the seed, the guidance scale and the adapter's alpha each change it.

Contract: ``ImageSpec`` is a ``build.DemoModel`` whose ``library_name`` makes ``common.export``
export it as a diffusers pipeline; ``finalize`` checks the export and writes the graph and the adapter.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from scripts.demo_models.common import SEED, require_files
from scripts.demo_models.tokenizer import Tokenizers

IMAGE_MODELS_VERSION = "ovserve-image-models/1"
TINY_IMAGE = "tiny-image"
# The name under which the builders list tiny-image's adapter file (not a model directory of its own).
TINY_IMAGE_LORA = "tiny-image-lora"
# The adapter's alias and file, relative to the model directory (OVMS resolves a LoRA path against the graph's).
LORA_ALIAS = "tiny-style"
LORA_PATH = f"loras/{LORA_ALIAS}.safetensors"
_LORA_RANK = 4

# OVMS's graph for image generation (its graph export's template), the options in the order it writes them.
GRAPH_PBTXT = """# ovserve demo model tiny-image (scripts/make_demo_models.py): OVMS's image generation graph
input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"

node: {
  name: "ImageGenExecutor"
  calculator: "ImageGenCalculator"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  input_side_packet: "IMAGE_GEN_NODE_RESOURCES:pipes"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  node_options: {
      [type.googleapis.com / mediapipe.ImageGenCalculatorOptions]: {
          models_path: "./"
          device: "CPU"
          max_resolution: "512x512"
          default_num_inference_steps: 4
          max_num_inference_steps: 50
      }
  }
}
"""

_EXPORTED = (
    "model_index.json",
    "scheduler/scheduler_config.json",
    "text_encoder/openvino_model.xml",
    "tokenizer/openvino_tokenizer.xml",
    "tokenizer/openvino_detokenizer.xml",
    "unet/openvino_model.xml",
    "vae_decoder/openvino_model.xml",
    "vae_encoder/openvino_model.xml",
)


@dataclass(frozen=True)
class ImageSpec:
    version: ClassVar[str] = IMAGE_MODELS_VERSION
    task: ClassVar[str] = "text-to-image"
    library_name: ClassVar[str] = "diffusers"

    name: str
    weight_format: str = "fp16"

    def tokenizer(self, tokenizers: Tokenizers) -> Path:
        return tokenizers.clip

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        """Around the checkpoint and the export: diffusers' logger and progress bars muted, then restored."""
        return _quiet_diffusers()

    def checkpoint(self, tokenizer_dir: Path, hf_dir: Path) -> Path:
        import torch
        from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
        from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

        tokenizer = CLIPTokenizer.from_pretrained(str(tokenizer_dir))
        torch.manual_seed(SEED)
        text_shape: dict[str, Any] = {
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "max_position_embeddings": tokenizer.model_max_length,
            "projection_dim": 32,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        }
        text_encoder = CLIPTextModel(CLIPTextConfig(**text_shape)).eval()
        # Any: through diffusers' lazy imports mypy does not see these classes' torch.nn.Module base.
        unet: Any = UNet2DConditionModel(
            sample_size=8,
            in_channels=4,
            out_channels=4,
            block_out_channels=(32, 64),
            layers_per_block=1,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=text_shape["hidden_size"],
            attention_head_dim=8,
        )
        # Four blocks: a scale factor of 2^3 = 8, SD's (a VAE's factor is 2 per block after the first).
        vae: Any = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            block_out_channels=(16, 16, 16, 16),
            layers_per_block=1,
            latent_channels=4,
            norm_num_groups=8,
            sample_size=64,
        )
        # SD 1.5's scheduler settings (steps_offset 1: diffusers warns about the old default 0).
        scheduler = EulerDiscreteScheduler(
            beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1
        )
        pipeline: Any = StableDiffusionPipeline(
            vae=vae,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            unet=unet,
            scheduler=scheduler,
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
        pipeline.save_pretrained(str(hf_dir))
        _save_lora(unet, hf_dir / Path(LORA_PATH).name)
        return hf_dir

    def finalize(self, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None:
        require_files(ov_dir, _EXPORTED)
        (ov_dir / "graph.pbtxt").write_text(GRAPH_PBTXT, encoding="utf-8")
        lora = ov_dir / LORA_PATH
        lora.parent.mkdir()
        shutil.copyfile(hf_dir / lora.name, lora)


def _save_lora(unet: Any, path: Path) -> None:
    """A random LoRA for ``unet``'s attention projections (q, k, v, out of self- and cross-attention),
    in the kohya layout; alpha = rank, so the update is exactly ``up @ down``."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(SEED)
    tensors: dict[str, Any] = {}
    for name, module in unet.named_modules():
        if not isinstance(module, torch.nn.Linear) or ".attn" not in name:
            continue
        if not name.endswith((".to_q", ".to_k", ".to_v", ".to_out.0")):
            continue
        key = "lora_unet_" + name.replace(".", "_")
        # N(0, 0.5) factors: big enough that alpha 1 changes most pixels of a 64 x 64 image.
        tensors[f"{key}.lora_down.weight"] = torch.randn(_LORA_RANK, module.in_features, generator=generator) * 0.5
        tensors[f"{key}.lora_up.weight"] = torch.randn(module.out_features, _LORA_RANK, generator=generator) * 0.5
        tensors[f"{key}.alpha"] = torch.tensor(float(_LORA_RANK))
    if not tensors:
        raise RuntimeError("the tiny UNet has no attention projections to adapt")
    save_file(tensors, str(path))


@contextlib.contextmanager
def _quiet_diffusers() -> Iterator[None]:
    """diffusers' logger (notes on optional parts it does without, e.g. accelerate) and its progress
    bars (loading the pipeline's components again for the export), muted; both restored after."""
    from diffusers.utils import logging as diffusers_logging

    verbosity = diffusers_logging.get_verbosity()
    progress_bars = diffusers_logging.is_progress_bar_enabled()
    diffusers_logging.set_verbosity_error()
    diffusers_logging.disable_progress_bar()
    try:
        yield
    finally:
        diffusers_logging.set_verbosity(verbosity)
        if progress_bars:
            diffusers_logging.enable_progress_bar()


def with_lora(built: dict[str, Path]) -> dict[str, Path]:
    """``built`` plus ``tiny-image-lora``: the adapter file inside tiny-image, when tiny-image is there."""
    return {**built, TINY_IMAGE_LORA: built[TINY_IMAGE] / LORA_PATH} if TINY_IMAGE in built else built


TINY_IMAGE_SPEC = ImageSpec(TINY_IMAGE)
