"""Image generation in the engine process: openvino_genai's image pipelines over one set of weights.

Contract: :class:`ImageGenerator` builds an ``InpaintingPipeline`` from the model directory and
derives the ``Image2ImagePipeline`` and ``Text2ImagePipeline`` from it, sharing its compiled
models (as OVMS does); a model family openvino_genai cannot inpaint falls back to
image-to-image, then to text-to-image only, and a request for what the model cannot do is
refused (:class:`ImageTaskError`). Every LoRA adapter of the model's settings is compiled in at
construction; a request switches them on with its alphas (none: all off).

:meth:`ImageGenerator.generate` runs one request on the calling thread (the pipelines release
the GIL), calling ``on_step(step, steps, decode)`` after every denoising step: ``decode()`` turns
the current latent into the images it would be now. ``on_step`` returning True cancels the
request at that step (:class:`ImageCancelled`). The images come back encoded as the request
asked (png, jpeg, webp), so the pipe carries compressed files, not pixels.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image

from ovserve.engine.messages import ImageParams, ImageRequest
from ovserve.engine.spec import EngineSpec

log = logging.getLogger("ovserve.engine")

# What on_step gets: (steps done, steps in all, a function decoding the current latent).
StepCallback = Callable[[int, int, Callable[[], list[bytes]]], bool]


class ImageTaskError(Exception):
    """The request asks what this model's pipelines cannot do (an edit of a text-to-image-only model)."""


class ImageCancelled(Exception):
    """The request was cancelled after ``ran`` of its ``steps`` denoising steps."""

    def __init__(self, ran: int, steps: int) -> None:
        super().__init__(f"cancelled after {ran} of {steps} denoising steps")
        self.ran = ran
        self.steps = steps


class ImageGenerator:
    """The image pipelines of one model directory (see the module doc)."""

    def __init__(self, spec: EngineSpec) -> None:
        import openvino_genai as ov_genai

        self._ov_genai = ov_genai
        settings = spec.images
        self._adapters = {alias: ov_genai.Adapter(str(entry.path)) for alias, entry in settings.lora_adapters.items()}
        properties: dict[str, Any] = dict(spec.plugin_config)
        if self._adapters:
            # Adapters are compiled into the models once; a generate call only sets their alphas.
            properties["adapters"] = ov_genai.AdapterConfig(list(self._adapters.values()))
        self.inpainting: Any = None
        self.image2image: Any = None
        self.text2image: Any = None
        path = str(spec.model_path)
        static = bool(settings.resolution) or "NPU" in spec.device.upper()
        for kind in ("InpaintingPipeline", "Image2ImagePipeline", "Text2ImagePipeline"):
            try:
                pipe = _built(getattr(ov_genai, kind), path, spec, properties, static)
            except RuntimeError as exc:
                log.info("model %r: no %s (%s)", spec.name, kind, str(exc).splitlines()[0] if str(exc) else exc)
                continue
            self._derive(kind, pipe)
            break
        if self.text2image is None:
            raise RuntimeError(f"{spec.model_path}: openvino_genai cannot build an image pipeline from this model")

    def _derive(self, kind: str, pipe: Any) -> None:
        """The other pipelines from ``pipe``, sharing its compiled models."""
        ov_genai = self._ov_genai
        if kind == "InpaintingPipeline":
            self.inpainting = pipe
            self.image2image = ov_genai.Image2ImagePipeline(pipe)
            self.text2image = ov_genai.Text2ImagePipeline(pipe)
        elif kind == "Image2ImagePipeline":
            self.image2image = pipe
            self.text2image = ov_genai.Text2ImagePipeline(pipe)
        else:
            self.text2image = pipe

    @property
    def edits(self) -> bool:
        return self.image2image is not None

    @property
    def inpaints(self) -> bool:
        return self.inpainting is not None

    def generate(self, request: ImageRequest, on_step: StepCallback) -> tuple[list[bytes], int]:
        """The request's images, encoded, and the denoising steps run (see the module doc)."""
        params = request.params
        kwargs = self._arguments(params)
        inputs: tuple[Any, ...]
        if request.image is None:
            pipe, inputs = self.text2image, ()
        elif request.mask is None:
            if self.image2image is None:
                raise ImageTaskError("this model generates images from text only: it cannot edit an image")
            pipe, inputs = self.image2image, (_tensor(request.image),)
        else:
            if self.inpainting is None:
                raise ImageTaskError("this model cannot inpaint: send the edit without a mask")
            pipe, inputs = self.inpainting, (_tensor(request.image), _tensor(request.mask))
        ran = total = 0
        cancelled = False
        failure: Exception | None = None

        def callback(step: int, steps: int, latent: Any) -> bool:
            # Runs on a native thread of the pipeline, where an exception that escapes terminates
            # the process (std::terminate): a failure here stops the request and is raised after.
            nonlocal ran, total, cancelled, failure
            ran, total = step + 1, steps  # the pipeline counts from 0
            try:
                cancelled = on_step(ran, steps, lambda: _encoded(pipe.decode(latent), params))
            except Exception as exc:
                failure, cancelled = exc, True
            return cancelled

        result = pipe.generate(params.prompt, *inputs, callback=callback, **kwargs)
        if failure is not None:
            raise failure
        if cancelled:  # the pipeline stops at once and returns an empty tensor
            raise ImageCancelled(ran, total)
        # Encoded at once: the result shares the VAE's output buffer, which the next call overwrites.
        return _encoded(result, params), ran

    def _arguments(self, params: ImageParams) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "width": params.width,
            "height": params.height,
            "num_images_per_prompt": params.n,
            "num_inference_steps": params.steps,
        }
        for name in ("prompt_2", "prompt_3", "negative_prompt", "negative_prompt_2", "negative_prompt_3",
                     "guidance_scale", "rng_seed", "strength", "max_sequence_length"):  # fmt: skip
            value = getattr(params, name)
            if value is not None:
                kwargs[name] = value
        if self._adapters:
            # Every generate sets every adapter's alpha: one left out would keep the last request's.
            mix = dict(params.adapters)
            kwargs["adapters"] = self._ov_genai.AdapterConfig(
                [(adapter, float(mix.get(alias, 0.0))) for alias, adapter in self._adapters.items()]
            )
        return kwargs


def _built(pipeline: Any, path: str, spec: EngineSpec, properties: dict[str, Any], static: bool) -> Any:
    """A pipeline compiled for the device (OVMS's "CPU GPU NPU": text encoder, denoiser and VAE
    each on its own); reshaped to the settings' static shape first where one is set (NPU needs it)."""
    devices = spec.device.split()
    if not static and len(devices) == 1:
        return pipeline(path, spec.device, **properties)
    settings = spec.images
    pipe = pipeline(path)
    if not static:
        pipe.compile(*devices, **properties)
        return pipe
    width, height = settings.resolution[0] if settings.resolution else (512, 512)
    pipe.reshape(
        settings.num_images_per_prompt or 1,
        height,
        width,
        settings.guidance_scale if settings.guidance_scale is not None else pipe.get_generation_config().guidance_scale,
    )
    pipe.compile(*devices, **properties)
    return pipe


def _tensor(pixels: np.ndarray) -> Any:
    """A uint8 image [H, W, C] as the [1, H, W, C] tensor the pipelines take."""
    import openvino as ov

    return ov.Tensor(np.ascontiguousarray(pixels[np.newaxis, ...] if pixels.ndim == 3 else pixels))


def _encoded(images: Any, params: ImageParams) -> list[bytes]:
    """Each image of a uint8 [N, H, W, 3] tensor encoded in the request's format."""
    pixels = np.asarray(images.data if hasattr(images, "data") else images)
    files = []
    for picture in pixels:
        buffer = io.BytesIO()
        image = Image.fromarray(np.ascontiguousarray(picture[..., :3]), "RGB")
        if params.output_format == "png":
            image.save(buffer, "PNG", compress_level=6)
        elif params.output_format == "jpeg":
            image.save(buffer, "JPEG", quality=max(params.output_compression, 1))
        else:
            image.save(buffer, "WEBP", quality=params.output_compression, lossless=params.output_compression == 100)
        files.append(buffer.getvalue())
    return files
