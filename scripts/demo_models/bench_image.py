"""A random latent-consistency model at Stable Diffusion 1.5's size: the image-generation benchmark's model.

``bench-sd15-lcm`` is a diffusers ``LatentConsistencyModelPipeline`` whose parts have the sizes of
SD 1.5 and of an LCM distilled from it (SimianLuo/LCM_Dreamshaper_v7), so a denoising step, the
text encoder and the VAE cost what the real ones cost; only the weights are random (seeded):

- UNet: SD 1.5's ``unet/config.json`` (channels 320/640/1280/1280, 2 layers per block, three
  ``CrossAttnDownBlock2D`` and a ``DownBlock2D``, attention head dim 8, cross-attention dim 768,
  sample size 64, 4 latent channels) plus LCM's guidance embedding (``time_cond_proj_dim`` 256), ~860M
  parameters;
- VAE: SD 1.5's ``AutoencoderKL`` (channels 128/256/512/512, 2 layers per block, 4 latent channels,
  sample size 512: 512 x 512 images by default);
- text encoder: CLIP ViT-L/14's text tower (hidden 768, 12 layers, 12 heads, FFN 3072, 77
  positions) under the CLIP tokenizer trained offline (``tokenizer.build_clip_tokenizer``, ~1.5k
  tokens instead of 49,408: the embedding lookup is no measurable part of the cost);
- LCM's scheduler (``LCMScheduler`` as LCM_Dreamshaper_v7 ships it: SD's betas, 50 original steps).

The weights are rounded to float16 before they are saved, and the export writes fp16 IR: the IR
holds exactly the values of the float32 checkpoint kept in ``diffusers/``, so
``scripts/bench_images.py`` runs diffusers on the very weights the server runs. Both take 5.8 GiB
on disk (IR 1.9 GiB, checkpoint 3.9 GiB); the build takes ~4 CPU minutes and peaks at 7.5 GiB RSS.

Contract: ``BenchImageSpec`` is a ``build.DemoModel`` (an ``image.ImageSpec``: the same tokenizer,
export task and library); ``finalize`` checks the export and publishes the checkpoint beside it. It
is built only on request (``make_demo_models.py --benchmark_images``), never by the demo or the tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from scripts.demo_models.common import SEED, require_files
from scripts.demo_models.image import ImageSpec

BENCH_IMAGE_MODELS_VERSION = "ovserve-bench-image-models/1"
BENCH_IMAGE = "bench-sd15-lcm"
# Where bench-sd15-lcm keeps its diffusers checkpoint (the weights its IR was exported from).
CHECKPOINT_SUBDIR = "diffusers"

# SD 1.5's unet/config.json (runwayml/stable-diffusion-v1-5), and LCM_Dreamshaper_v7's guidance embedding.
_UNET: dict[str, Any] = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "center_input_sample": False,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    "block_out_channels": (320, 640, 1280, 1280),
    "layers_per_block": 2,
    "downsample_padding": 1,
    "mid_block_scale_factor": 1,
    "act_fn": "silu",
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
    "time_cond_proj_dim": 256,
}
# SD 1.5's vae/config.json.
_VAE: dict[str, Any] = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
    "block_out_channels": (128, 256, 512, 512),
    "layers_per_block": 2,
    "act_fn": "silu",
    "latent_channels": 4,
    "norm_num_groups": 32,
    "sample_size": 512,
}
# CLIP ViT-L/14's text tower (openai/clip-vit-large-patch14, SD 1.5's text encoder), less the vocabulary.
_TEXT: dict[str, Any] = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "projection_dim": 768,
    "hidden_act": "quick_gelu",
}
# LCM_Dreamshaper_v7's scheduler/scheduler_config.json.
_SCHEDULER: dict[str, Any] = {
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "num_train_timesteps": 1000,
    "original_inference_steps": 50,
    "prediction_type": "epsilon",
    "set_alpha_to_one": True,
    "steps_offset": 1,
    "timestep_spacing": "leading",
    "timestep_scaling": 10.0,
    "clip_sample": False,
}

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
class BenchImageSpec(ImageSpec):
    version: ClassVar[str] = BENCH_IMAGE_MODELS_VERSION

    def checkpoint(self, tokenizer_dir: Path, hf_dir: Path) -> Path:
        import torch
        from diffusers import AutoencoderKL, LatentConsistencyModelPipeline, LCMScheduler, UNet2DConditionModel
        from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

        tokenizer = CLIPTokenizer.from_pretrained(str(tokenizer_dir))
        torch.manual_seed(SEED)
        # Any: transformers' config classes take their fields as **kwargs, which mypy does not see.
        text_shape: dict[str, Any] = {
            "vocab_size": len(tokenizer),
            "max_position_embeddings": tokenizer.model_max_length,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            **_TEXT,
        }
        text_encoder = CLIPTextModel(CLIPTextConfig(**text_shape)).eval()
        # Any: through diffusers' lazy imports mypy does not see these classes' torch.nn.Module base.
        unet: Any = UNet2DConditionModel(**_UNET)
        vae: Any = AutoencoderKL(**_VAE)
        unet.eval()
        vae.eval()
        with torch.no_grad():
            # fp16-representable values: the fp16 IR and this float32 checkpoint hold the same weights.
            for part in (text_encoder, unet, vae):
                for tensor in (*part.parameters(), *part.buffers()):
                    if tensor.is_floating_point():
                        tensor.copy_(tensor.half().float())
        pipeline: Any = LatentConsistencyModelPipeline(
            vae=vae,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            unet=unet,
            scheduler=LCMScheduler(**_SCHEDULER),
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
        pipeline.save_pretrained(str(hf_dir))
        return hf_dir

    def finalize(self, tokenizer_dir: Path, hf_dir: Path, ov_dir: Path) -> None:
        require_files(ov_dir, _EXPORTED)
        # Moved, not copied (3.9 GiB): both are in the build's scratch directory, and the build drops hf_dir after.
        os.replace(hf_dir, ov_dir / CHECKPOINT_SUBDIR)


BENCH_IMAGE_SPEC = BenchImageSpec(BENCH_IMAGE)
