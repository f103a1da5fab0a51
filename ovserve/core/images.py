"""Image generation on the core: a request's ask checked against its model's limits, and the job
that runs it on the model's engine.

Contract: :func:`prepare_images` takes an :class:`ImageAsk` (what a dialect's request asks, its
fields named by ``param`` paths for errors) and the served model, and refuses with a 400 naming the
field everything the model's settings (``ovserve.engine.spec.ImageSettings``, OVMS's graph options)
do not allow: a size that is not a multiple of the model's VAE scale or over ``max_resolution``
(or, with static shapes, not one of them), ``n`` over ``max_num_images_per_prompt``, steps over
``max_num_inference_steps``, a guidance scale or strength out of range, an unknown LoRA adapter,
and work (width x height x n x steps) over ``max_pixel_steps``. It returns an :class:`ImageJob`.

:class:`ImageJob` is a :class:`~ovserve.core.engine_work.ModelWork`: the envelope admits it and
holds the model's engine for it like any request. An edit's image and mask are decoded inside the
admission (:meth:`ImageJob.before_engine`, ``ovserve.core.image_decode``: the VLM pixel limits,
then resized to the output size); :meth:`ImageJob.run` yields the engine's partial images and
its result. Leaving it early cancels the engine request at its next denoising step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ovserve.core.engine_work import ModelWork
from ovserve.core.image_decode import decode_image, open_image
from ovserve.engine.messages import ImageParams, ImageProgress, ImageRequest, ImageResult
from ovserve.errors import BadRequestError
from ovserve.models.served import ServedModel

TASK = "image_generation"
# Guidance beyond this only saturates the image (diffusers' pipelines use 1-20); refused as absurd.
MAX_GUIDANCE_SCALE = 100.0
MAX_PARTIAL_IMAGES = 3
# A LoRA alpha far outside this range only breaks the weights.
MAX_LORA_ALPHA = 10.0
# OpenAI's usage counts image tokens; ovserve counts one per 16 x 16 pixels (a latent patch).
PIXELS_PER_IMAGE_TOKEN = 16 * 16


@dataclass(frozen=True, kw_only=True)
class ImageAsk:
    """What a dialect's image request asks, in the core's terms; ``None``: the model's default."""

    prompt: str
    size: tuple[int, int] | None = None  # None: auto (the model's default, an edit's input size)
    n: int = 1
    steps: int | None = None
    guidance_scale: float | None = None
    rng_seed: int | None = None
    strength: float | None = None
    max_sequence_length: int | None = None
    prompt_2: str | None = None
    prompt_3: str | None = None
    negative_prompt: str | None = None
    negative_prompt_2: str | None = None
    negative_prompt_3: str | None = None
    adapter: str | None = None  # the LoRA alias the request's model named
    lora_alphas: dict[str, float] = field(default_factory=dict)
    output_format: str = "png"
    output_compression: int = 100
    partial_images: int = 0
    image: bytes | None = None  # an edit's input image (encoded)
    mask: bytes | None = None  # an edit's mask (encoded; transparent: repaint)


@dataclass(kw_only=True)
class ImageJob(ModelWork):
    """One image request's work (see the module doc)."""

    params: ImageParams
    ask: ImageAsk
    prompt_tokens: int = 0
    image: np.ndarray | None = None
    mask: np.ndarray | None = None
    steps_run: int = field(default=0, init=False)

    @property
    def size(self) -> str:
        return f"{self.params.width}x{self.params.height}"

    @property
    def input_image_tokens(self) -> int:
        return image_tokens(self.params.width, self.params.height) if self.ask.image is not None else 0

    @property
    def output_image_tokens(self) -> int:
        return self.params.n * image_tokens(self.params.width, self.params.height)

    async def before_engine(self) -> None:
        """An edit's image and mask, decoded within the pixel limits and sized to the output."""
        if self.ask.image is None:
            return
        size = None if self.ask.size is None else (self.params.width, self.params.height)
        self.image, (width, height) = await asyncio.to_thread(_decoded_input, self.ask.image, size, self.model)
        if size is None:  # auto: the input's own size, fitted to the model
            self.params = dataclasses.replace(self.params, width=width, height=height)
            check_work(self.model, self.params)
        if self.ask.mask is not None:
            self.mask = await asyncio.to_thread(_decoded_mask, self.ask.mask, self.ask.image, (width, height))

    async def run(self) -> AsyncIterator[ImageProgress | ImageResult]:
        """The engine's partial images, then its result; closing early cancels the engine request."""
        params, image, mask = self.params, self.image, self.mask
        events = self.model.engine.generate_images(lambda request_id: ImageRequest(request_id, params, image, mask))
        try:
            async for event in events:
                self.started()
                if isinstance(event, ImageResult):
                    self.steps_run = event.steps
                yield event
        finally:
            await events.aclose()


def image_tokens(width: int, height: int) -> int:
    return math.ceil(width / 16) * math.ceil(height / 16)


async def prepare_images(model: ServedModel, ask: ImageAsk, *, edit: bool) -> ImageJob:
    """The job of ``ask`` on ``model`` once every limit was checked (see the module doc)."""
    model.require_task(TASK)
    settings = model.spec.images
    if edit and ask.image is None:
        raise BadRequestError("'image' is required: the image to edit", param="image")
    if not edit and ask.strength is not None:
        raise BadRequestError("'strength' applies to edits (/images/edits) only", param="strength")
    if ask.mask is not None and ask.image is None:
        raise BadRequestError("a 'mask' needs the 'image' it applies to", param="mask")
    width, height = ask.size or _default_size(model)
    params = ImageParams(
        prompt=ask.prompt,
        width=width,
        height=height,
        n=ask.n,
        steps=ask.steps if ask.steps is not None else settings.default_num_inference_steps,
        prompt_2=ask.prompt_2,
        prompt_3=ask.prompt_3,
        negative_prompt=ask.negative_prompt,
        negative_prompt_2=ask.negative_prompt_2,
        negative_prompt_3=ask.negative_prompt_3,
        guidance_scale=ask.guidance_scale,
        # openvino_genai's default seed is 42: every unseeded request would draw the same image.
        rng_seed=ask.rng_seed if ask.rng_seed is not None else random.getrandbits(32),
        strength=ask.strength,
        max_sequence_length=ask.max_sequence_length,
        adapters=_adapters(model, ask),
        output_format=ask.output_format,
        output_compression=ask.output_compression,
        partial_images=ask.partial_images,
    )
    if ask.size is not None or ask.image is None:
        check_size(model, width, height, param="size")
    _check_limits(model, params)
    _check_pipeline(model, params, edit=edit)
    check_work(model, params)
    model.check_available()  # a model unloaded on purpose passes: the request's lease loads it
    # The text encoder reads at most its context: a longer prompt is cut there, and counts as much.
    counts = await model.tokenizer.count_each([ask.prompt], limit=model.context_length, truncate=True, param="prompt")
    return ImageJob(model=model, params=params, ask=ask, prompt_tokens=counts[0])


def check_size(model: ServedModel, width: int, height: int, *, param: str) -> None:
    settings = model.spec.images
    multiple = vae_scale_factor(model.spec.model_path)
    if width % multiple or height % multiple:
        raise BadRequestError(
            f"the size {width}x{height} is not a multiple of {multiple} pixels on each side, as model "
            f"'{model.name}' needs",
            param=param,
        )
    max_width, max_height = settings.max_resolution
    if width > max_width or height > max_height:
        raise BadRequestError(
            f"the size {width}x{height} is over model '{model.name}''s max_resolution {max_width}x{max_height}",
            param=param,
        )
    if settings.resolution and (width, height) not in settings.resolution:
        shapes = ", ".join(f"{w}x{h}" for w, h in settings.resolution)
        raise BadRequestError(f"model '{model.name}' is compiled for the sizes {shapes} only", param=param)


def _check_limits(model: ServedModel, params: ImageParams) -> None:
    settings = model.spec.images
    if params.n > settings.max_num_images_per_prompt:
        raise BadRequestError(
            f"n is {params.n}; model '{model.name}' makes at most {settings.max_num_images_per_prompt} images "
            "per request (max_num_images_per_prompt)",
            param="n",
        )
    if settings.num_images_per_prompt is not None and params.n != settings.num_images_per_prompt:
        raise BadRequestError(f"model '{model.name}' is compiled for n={settings.num_images_per_prompt}", param="n")
    if params.steps > settings.max_num_inference_steps:
        raise BadRequestError(
            f"num_inference_steps is {params.steps}; model '{model.name}' allows at most "
            f"{settings.max_num_inference_steps} (max_num_inference_steps)",
            param="num_inference_steps",
        )
    if settings.guidance_scale is not None and params.guidance_scale not in (None, settings.guidance_scale):
        raise BadRequestError(
            f"model '{model.name}' is compiled for guidance_scale {settings.guidance_scale:g}", param="guidance_scale"
        )


# openvino_genai's image-to-image and inpainting default (what an edit without 'strength' runs with).
DEFAULT_STRENGTH = 0.8


def _check_pipeline(model: ServedModel, params: ImageParams, *, edit: bool) -> None:
    """What the model's pipeline would fail on (a 500) rather than refuse: refused here as the 400
    it is."""
    negatives = ("negative_prompt", "negative_prompt_2", "negative_prompt_3")
    asked = next((name for name in negatives if getattr(params, name) is not None), None)
    if asked is not None and pipeline_class(model.spec.model_path).startswith("LatentConsistency"):
        raise BadRequestError(
            f"model '{model.name}' is a latent-consistency model, which takes no negative prompt", param=asked
        )
    strength = params.strength if params.strength is not None else DEFAULT_STRENGTH
    if edit and int(params.steps * strength) < 1:
        raise BadRequestError(
            f"an edit runs strength x num_inference_steps denoising steps: {strength:g} x {params.steps} is none; "
            "ask more steps or a higher strength",
            param="strength",
        )


def check_work(model: ServedModel, params: ImageParams) -> None:
    """The request's work (pixels x images x steps) within the model's ``max_pixel_steps``."""
    work = params.width * params.height * params.n * params.steps
    limit = model.spec.images.max_pixel_steps
    if work > limit:
        raise BadRequestError(
            f"the request asks {params.width}x{params.height} pixels x {params.n} images x {params.steps} steps "
            f"= {work:,} pixel-steps; model '{model.name}' allows {limit:,} per request (max_pixel_steps): "
            "ask fewer or smaller images, or fewer steps",
            param="size",
            code="image_work_too_large",
        )


def _adapters(model: ServedModel, ask: ImageAsk) -> tuple[tuple[str, float], ...]:
    """The LoRA adapters (alias, alpha) the request switches on: its model's alias, then its
    ``lora_alphas`` over them (an alpha for an adapter of the model not in the alias adds it)."""
    settings = model.spec.images
    mix = settings.adapter_mix(ask.adapter) if ask.adapter is not None else {}
    for alias, alpha in ask.lora_alphas.items():
        if alias not in settings.lora_adapters:
            known = ", ".join(sorted(settings.lora_adapters)) or "none"
            raise BadRequestError(
                f"model '{model.name}' has no LoRA adapter '{alias[:60]}' (it has: {known})",
                param=f"lora_alphas.{alias}",
            )
        if not -MAX_LORA_ALPHA <= alpha <= MAX_LORA_ALPHA:
            raise BadRequestError(
                f"a LoRA alpha must be between -{MAX_LORA_ALPHA:g} and {MAX_LORA_ALPHA:g}", param=f"lora_alphas.{alias}"
            )
        mix[alias] = alpha
    return tuple(mix.items())


def _default_size(model: ServedModel) -> tuple[int, int]:
    settings = model.spec.images
    if settings.default_resolution is not None:
        return settings.default_resolution
    if settings.resolution:
        return settings.resolution[0]
    side = native_side(model.spec.model_path)
    return side, side


def _config(model_path: Path, folder: str) -> dict[str, object]:
    try:
        config = json.loads((model_path / folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def pipeline_class(model_path: Path) -> str:
    """The diffusers pipeline the export came from (``model_index.json``'s ``_class_name``)."""
    try:
        index = json.loads((model_path / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    name = index.get("_class_name") if isinstance(index, dict) else None
    return name if isinstance(name, str) else ""


def vae_scale_factor(model_path: Path) -> int:
    """Pixels per latent cell: 2 ** (VAE blocks - 1), as diffusers computes it (8 for SD)."""
    config = _config(model_path, "vae_decoder")
    blocks = config.get("block_out_channels")
    return 2 ** (len(blocks) - 1) if isinstance(blocks, list) and blocks else 8


def native_side(model_path: Path) -> int:
    """The side the model was trained at: its denoiser's sample size times the VAE scale."""
    for folder in ("unet", "transformer"):
        sample = _config(model_path, folder).get("sample_size")
        if isinstance(sample, int) and sample > 0:
            return sample * vae_scale_factor(model_path)
    return 512


def _decoded_input(data: bytes, size: tuple[int, int] | None, model: ServedModel) -> tuple[np.ndarray, tuple[int, int]]:
    """The edit's input image as uint8 RGB at ``size`` (None: its own size, rounded down to the
    model's multiple and checked against its limits)."""
    if size is None:
        with open_image(data, "image") as image:
            width, height = image.size
        multiple = vae_scale_factor(model.spec.model_path)
        size = (max(width // multiple, 1) * multiple, max(height // multiple, 1) * multiple)
        check_size(model, *size, param="image")
    pixels = decode_image(data, "image")
    if pixels.shape[1::-1] != size:
        from PIL import Image

        pixels = np.asarray(Image.fromarray(pixels).resize(size, Image.Resampling.LANCZOS))
    return np.ascontiguousarray(pixels), size


def _decoded_mask(data: bytes, image: bytes, size: tuple[int, int]) -> np.ndarray:
    """The mask as uint8 [H, W, 3], 255 where the image is repainted: OpenAI's transparent pixels
    (a mask with alpha), else white ones (a grey mask, diffusers' convention). It must have the
    image's own dimensions."""
    from PIL import Image

    with open_image(image, "image") as picture:
        image_size = picture.size
    with open_image(data, "mask") as mask:
        if mask.size != image_size:
            raise BadRequestError(
                f"the mask is {mask.size[0]}x{mask.size[1]} pixels; it must have the image's dimensions "
                f"({image_size[0]}x{image_size[1]})",
                param="mask",
            )
        mask.load()
        if mask.has_transparency_data:
            repaint = np.asarray(mask.convert("RGBA"))[..., 3] == 0
        else:
            repaint = np.asarray(mask.convert("L")) >= 128
    plane = Image.fromarray((repaint * 255).astype(np.uint8), "L").resize(size, Image.Resampling.NEAREST)
    return np.ascontiguousarray(np.repeat(np.asarray(plane)[..., np.newaxis], 3, axis=2))
