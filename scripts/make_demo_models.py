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
    tiny-llm-64k/                tiny-llm with a 65,536-token context (derived: no export), for agents such
                                 as Claude Code whose prompts do not fit 2,048 tokens
    bench-qwen2.5-0.5b-int8/     Qwen2.5-0.5B shape, int8 weights (only with --benchmark)
    bench-llava-clip-l336/       LLaVA: CLIP ViT-L/14 at 336 px + tiny-llm-shaped Qwen2 (only with
                                 --benchmark_vlm)
    tiny-embed/                  BERT, hidden 64, 2 layers, fp16 IR: embeddings (served with MEAN pooling)
    tiny-rerank/                 BERT cross-encoder (one-label classifier), hidden 64, 2 layers, fp16 IR
    bench-bert-base-embed/       BERT-base shape, fp16: the embeddings benchmark (only with --benchmark)
    bench-bert-base-rerank/      BERT-base-shaped cross-encoder, fp16: the rerank benchmark (only with --benchmark)
    tiny-whisper/                Whisper: 80 mel bins, 30 s windows, d_model 64, 2+2 layers, fp16 IR
                                 (encoder + decoder IRs): speech to text, served by WhisperPipeline
    tiny-speecht5/               SpeechT5, hidden 64, + HiFi-GAN vocoder, fp16 IR, voices/{alloy,echo}.bin
                                 (speaker embeddings): text to speech, served by Text2SpeechPipeline
    tiny-image/                  Stable Diffusion 1.5 shape (CLIP text encoder hidden 32, UNet 32/64 channels,
                                 VAE scale factor 8), fp16 IR in diffusers' layout (model_index.json, unet/,
                                 vae_{en,de}coder/, text_encoder/, tokenizer/, scheduler/), graph.pbtxt
                                 (OVMS's ImageGenCalculator) and loras/tiny-style.safetensors: text to image,
                                 image to image and inpainting
    bench-whisper-tiny/          Whisper at openai/whisper-tiny's size (d_model 384, 4+4 layers, 51,865 tokens),
                                 fp32 IR, plus its transformers checkpoint in transformers/ (only with
                                 --benchmark_speech): scripts/bench_audio.py
    bench-sd15-lcm/              a latent-consistency model at Stable Diffusion 1.5's size (UNet 320-1280 channels,
                                 CLIP ViT-L/14 text encoder, SD's VAE), fp16 IR, plus its diffusers checkpoint in
                                 diffusers/ (only with --benchmark_images): scripts/bench_images.py

Every model directory holds ``openvino_model.{xml,bin}`` (tiny-vlm: the language, text-embeddings
and vision-embeddings IRs plus ``preprocessor_config.json``), ``openvino_{de,}tokenizer.{xml,bin}``,
``config.json``, ``generation_config.json``, the HF tokenizer files (tiny-image: diffusers' layout,
see ``scripts/demo_models/image.py``) and, written last, the marker ``.ovserve-demo-complete``. A
directory without a matching marker is rebuilt. Builds happen in a scratch directory inside
``OUT_DIR`` and are renamed into place, so a killed run never leaves a half-written model that looks
complete.

Everything is seeded, so the same library versions produce the same files, except for the retrieval
models' WordPiece vocabulary (see ``scripts/demo_models/tokenizer.py``). This file
is the entry point and the catalogue (which models each call builds); the builders, one module per
model kind, are in ``scripts/demo_models/``.

Usage::

    python scripts/make_demo_models.py OUT_DIR [--force] [--benchmark] [--benchmark_vlm] [--benchmark_speech]
        [--benchmark_images]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python scripts/make_demo_models.py`: make `scripts` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.demo_models.bench_image import BENCH_IMAGE, BENCH_IMAGE_SPEC
from scripts.demo_models.build import DemoModel, build
from scripts.demo_models.common import log
from scripts.demo_models.image import TINY_IMAGE, TINY_IMAGE_LORA, TINY_IMAGE_SPEC, with_lora
from scripts.demo_models.llm import BENCH_MODEL, BENCH_SPEC, TINY_DRAFT_SPEC, TINY_LLM_SPEC
from scripts.demo_models.retrieval import (
    BENCH_EMBED,
    BENCH_EMBED_SPEC,
    BENCH_RERANK,
    BENCH_RERANK_SPEC,
    TINY_EMBED_SPEC,
    TINY_RERANK_SPEC,
)
from scripts.demo_models.speech import (
    BENCH_WHISPER,
    BENCH_WHISPER_SPEC,
    TINY_SPEECHT5,
    TINY_SPEECHT5_SPEC,
    TINY_WHISPER,
    TINY_WHISPER_SPEC,
)
from scripts.demo_models.tokenizer import build_tokenizer, build_vlm_tokenizer, build_wordpiece_tokenizer
from scripts.demo_models.variants import TINY_LLM_LONG_SPEC, derive
from scripts.demo_models.vlm import BENCH_VLM, BENCH_VLM_SPEC, TINY_VLM_SPEC

# What tests and benchmarks import from here; the builders behind these names live in scripts/demo_models/.
__all__ = [
    "BENCH_EMBED",
    "BENCH_IMAGE",
    "BENCH_MODEL",
    "BENCH_RERANK",
    "BENCH_VLM",
    "BENCH_WHISPER",
    "TINY_DRAFT_SPEC",
    "TINY_EMBED_SPEC",
    "TINY_IMAGE",
    "TINY_IMAGE_LORA",
    "TINY_IMAGE_SPEC",
    "TINY_LLM_LONG_SPEC",
    "TINY_LLM_SPEC",
    "TINY_RERANK_SPEC",
    "TINY_SPEECHT5",
    "TINY_SPEECHT5_SPEC",
    "TINY_VLM_SPEC",
    "TINY_WHISPER",
    "TINY_WHISPER_SPEC",
    "_build_hf_model",
    "build_benchmark_images",
    "build_benchmark_model",
    "build_benchmark_vlm",
    "build_benchmark_whisper",
    "build_checkpoint",
    "build_demo_models",
    "build_image_models",
    "build_retrieval_checkpoint",
    "build_retrieval_models",
    "build_tokenizer",
    "build_vlm_tokenizer",
    "build_wordpiece_tokenizer",
    "main",
]

DEMO_SPECS: list[DemoModel] = [TINY_LLM_SPEC, TINY_DRAFT_SPEC, TINY_VLM_SPEC]
RETRIEVAL_SPECS: list[DemoModel] = [TINY_EMBED_SPEC, TINY_RERANK_SPEC]
SPEECH_SPECS: list[DemoModel] = [TINY_WHISPER_SPEC, TINY_SPEECHT5_SPEC]
IMAGE_SPECS: list[DemoModel] = [TINY_IMAGE_SPEC]


def build_checkpoint(model: DemoModel, tokenizer_dir: Path, hf_dir: Path) -> Path:
    """Save ``model``'s seeded random Hugging Face checkpoint (what a user downloads from the Hub) to ``hf_dir``."""
    return model.checkpoint(tokenizer_dir, hf_dir)


# The names tests/e2e/test_export.py and tests/e2e/test_export_retrieval.py import.
_build_hf_model = build_retrieval_checkpoint = build_checkpoint


def build_demo_models(out_dir: Path, force: bool = False) -> dict[str, Path]:
    """Build (or reuse) ``tiny-llm``, ``tiny-draft``, ``tiny-vlm`` and ``tiny-llm-64k`` in ``out_dir``;
    returns name -> directory."""
    built = build(DEMO_SPECS, out_dir, force)
    return {**built, **_variants(built, out_dir, force)}


def _variants(built: dict[str, Path], out_dir: Path, force: bool) -> dict[str, Path]:
    variant = TINY_LLM_LONG_SPEC
    return {variant.name: derive(variant, built[variant.base], out_dir, force)}


def build_benchmark_model(out_dir: Path, force: bool = False) -> Path:
    """Build (or reuse) the int8 Qwen2.5-0.5B-shaped benchmark model; returns its directory."""
    return build([BENCH_SPEC], out_dir, force)[BENCH_MODEL]


def build_benchmark_vlm(out_dir: Path, force: bool = False) -> Path:
    """Build (or reuse) the LLaVA with a CLIP ViT-L/14-336 vision tower; returns its directory."""
    return build([BENCH_VLM_SPEC], out_dir, force)[BENCH_VLM]


def build_benchmark_whisper(out_dir: Path, force: bool = False) -> Path:
    """Build (or reuse) the whisper-tiny-sized model with its transformers checkpoint; returns its directory."""
    return build([BENCH_WHISPER_SPEC], out_dir, force)[BENCH_WHISPER]


def build_benchmark_images(out_dir: Path, force: bool = False) -> Path:
    """Build (or reuse) the SD-1.5-sized LCM model with its diffusers checkpoint; returns its directory."""
    return build([BENCH_IMAGE_SPEC], out_dir, force)[BENCH_IMAGE]


def build_retrieval_models(
    out_dir: Path, force: bool = False, *, benchmark: bool = False, benchmark_rerank: bool = False
) -> dict[str, Path]:
    """Build (or reuse) ``tiny-embed`` and ``tiny-rerank`` (and with ``benchmark`` the BERT-base-shaped
    ``bench-bert-base-embed``) in ``out_dir``; returns name -> directory."""
    bench = [*([BENCH_EMBED_SPEC] if benchmark else []), *([BENCH_RERANK_SPEC] if benchmark_rerank else [])]
    return build([*RETRIEVAL_SPECS, *bench], out_dir, force)


def build_speech_models(out_dir: Path, force: bool = False) -> dict[str, Path]:
    """Build (or reuse) ``tiny-whisper`` and ``tiny-speecht5`` in ``out_dir``; returns name -> directory."""
    return build(SPEECH_SPECS, out_dir, force)


def build_image_models(out_dir: Path, force: bool = False) -> dict[str, Path]:
    """Build (or reuse) ``tiny-image`` in ``out_dir``; returns name -> path: tiny-image's directory and,
    as ``tiny-image-lora``, its LoRA adapter file (``loras/tiny-style.safetensors`` inside it)."""
    return with_lora(build(IMAGE_SPECS, out_dir, force))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out_dir", type=Path, help="directory to create the model directories in")
    parser.add_argument("--force", action="store_true", help="rebuild even if a model is up to date")
    parser.add_argument(
        "--benchmark",
        action="store_true",
        help=f"also build {BENCH_MODEL} and {BENCH_EMBED} (random Qwen2.5-0.5B shape, int8 weights; ~35 s on 2 "
        "cores, 360 MB; BERT-base shape, fp16)",
    )
    parser.add_argument(
        "--benchmark_vlm",
        action="store_true",
        help=f"also build {BENCH_VLM} (LLaVA with a CLIP ViT-L/14-336 vision tower, fp16, ~620 MB)",
    )
    parser.add_argument(
        "--benchmark_speech",
        action="store_true",
        help=f"also build {BENCH_WHISPER} (openai/whisper-tiny's size, fp32, ~300 MB with its transformers copy)",
    )
    parser.add_argument(
        "--benchmark_images",
        action="store_true",
        help=f"also build {BENCH_IMAGE} (SD 1.5's size, LCM scheduler, fp16, 5.8 GiB with its diffusers copy)",
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    specs = [*DEMO_SPECS, *([BENCH_SPEC] if args.benchmark else []), *([BENCH_VLM_SPEC] if args.benchmark_vlm else [])]
    specs += [*RETRIEVAL_SPECS, *([BENCH_EMBED_SPEC, BENCH_RERANK_SPEC] if args.benchmark else [])]
    specs += [*SPEECH_SPECS, *([BENCH_WHISPER_SPEC] if args.benchmark_speech else [])]
    specs += [*IMAGE_SPECS, *([BENCH_IMAGE_SPEC] if args.benchmark_images else [])]
    # One build, so each tokenizer is trained once for all models.
    built = build(specs, args.out_dir, force=args.force)
    built.update(_variants(built, args.out_dir, args.force))
    built = with_lora(built)
    for name, path in built.items():
        log(f"{name}: {path}")
    log(f"total {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
