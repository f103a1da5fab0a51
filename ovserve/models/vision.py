"""What the server must know about a vision-language model (VLM) to prepare its prompts.

A VLM served by ``ContinuousBatchingPipeline`` takes a prompt *string* plus images, never token
ids (a token-id request fails inside ``step()``). The server renders the chat template itself,
with ``<ov_genai_image_N>`` tags where the images go, and passes the text with
``apply_chat_template = False``; openvino_genai replaces each tag with the model's own image
tokens.

Prompt tokens (``usage.prompt_tokens`` and the context-length check) must count what the
language model really sees: the text *and* the image tokens. For LLaVA, openvino_genai
(``InputsEmbedderLLaVA::normalize_prompt``) turns each tag into the image token repeated once per
vision feature, followed by ``"\\n"``; :meth:`VisionModel.expand_prompt` reproduces that string so
the ordinary tokenizer counts it exactly (a test compares it with the engine's own count). For
families whose expansion ovserve does not know, images are counted as zero tokens and a warning
is logged at startup.

Images cross to the engine already shrunk towards the vision encoder's input (:class:`ImageTarget`,
read from ``preprocessor_config.json``): the engine's preprocessor would shrink them anyway, and a
full-size RGB copy of a 34 MP photo is ~100 MB in each process it passes through. Shrinking is
never an upscale and stops at what the model's own processor keeps, so the encoder sees the same
picture up to resampling.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ovserve.engine.spec import VISION_ENCODER_FILE
from ovserve.errors import BadRequestError
from ovserve.json_types import JsonObject, json_int, json_list, json_object

log = logging.getLogger(__name__)

PREPROCESSOR_FILE = "preprocessor_config.json"
# Longer-side bound for encoders whose input size ovserve cannot read: above what today's
# dynamic-resolution encoders keep by default (Qwen2-VL: ~3.5K x 3.5K at most, usually less), and
# 12 MB as RGB instead of up to ~100 MB.
FALLBACK_MAX_SIDE = 2048
_IMAGE_TAG = "<ov_genai_image_{index}>"
_IMAGE_TAG_PATTERN = re.compile(r"<ov_genai_image_\d+>")


def image_tag(index: int) -> str:
    return _IMAGE_TAG.format(index=index)


@dataclass(frozen=True)
class ImageExpansion:
    """How one image tag is spelled in the text the language model sees."""

    image_token: str
    tokens_per_image: int
    suffix: str = ""

    def text(self) -> str:
        return self.image_token * self.tokens_per_image + self.suffix


def _llava(config: JsonObject) -> ImageExpansion:
    vision = json_object(config.get("vision_config"))
    image_size = json_int(vision.get("image_size")) or 336
    patch_size = json_int(vision.get("patch_size")) or 14
    features = (image_size // patch_size) ** 2
    # "full" keeps the CLS feature that "default" drops.
    if config.get("vision_feature_select_strategy", "default") == "full":
        features += 1
    return ImageExpansion(image_token="<image>", tokens_per_image=features, suffix="\n")


# model_type -> how openvino_genai expands an image tag for that family. Only families whose
# expansion is fixed by config.json belong here (LLaVA-NeXT, Qwen2-VL, ... depend on the image).
_EXPANSIONS: dict[str, Callable[[JsonObject], ImageExpansion]] = {"llava": _llava}


@dataclass(frozen=True)
class ImageTarget:
    """How far an image may be shrunk before the engine without losing what the encoder sees.

    At most one rule applies, in this order:

    - ``min_width``/``min_height`` (fixed-resolution encoders, CLIP/SigLIP-style processors): the
      processor's first step resizes so the image covers this box (``shortest_edge: N`` is an
      N x N box: the shorter side becomes N), then crops or squashes it. Shrinking to exactly
      that first step changes nothing but the resampling.
    - ``max_pixels`` (dynamic-resolution encoders, Qwen2-VL-style): the processor shrinks the
      image to at most this many pixels; so does ovserve.
    - ``max_side``: the longer side is capped (the fallback for unknown processors).
    """

    min_width: int | None = None
    min_height: int | None = None
    max_pixels: int | None = None
    max_side: int | None = FALLBACK_MAX_SIDE

    def size_for(self, width: int, height: int) -> tuple[int, int]:
        """The (width, height) to resize to; the input size when no shrinking is due (never larger)."""
        if self.min_width is not None and self.min_height is not None:
            scale = max(self.min_width / width, self.min_height / height)
            if scale >= 1:
                return width, height
            # The limiting side gets its box value exactly; the other is truncated like
            # transformers' get_resize_output_image_size (int(N * long / short)).
            if self.min_width / width >= self.min_height / height:
                return self.min_width, min(height, max(self.min_height, int(height * scale)))
            return min(width, max(self.min_width, int(width * scale))), self.min_height
        if self.max_pixels is not None:
            if width * height <= self.max_pixels:
                return width, height
            scale = math.sqrt(self.max_pixels / (width * height))
            return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
        if self.max_side is not None and max(width, height) > self.max_side:
            scale = self.max_side / max(width, height)
            return max(1, round(width * scale)), max(1, round(height * scale))
        return width, height

    @classmethod
    def from_preprocessor(cls, config: JsonObject) -> ImageTarget:
        """The target a Hugging Face ``preprocessor_config.json`` implies (see the class doc)."""
        size = config.get("size")
        size = size if isinstance(size, dict) else {"shortest_edge": size} if isinstance(size, int) else {}
        processor = str(config.get("image_processor_type", ""))
        max_pixels = config.get("max_pixels") or size.get("max_pixels")
        if max_pixels is None and processor.startswith("Qwen2VL"):
            max_pixels = size.get("longest_edge")  # Qwen2-VL spells max_pixels so in newer configs
        if isinstance(max_pixels, int) and max_pixels > 0:
            return cls(max_pixels=max_pixels, max_side=None)
        if "image_grid_pinpoints" in config:
            # LLaVA-NeXT's "anyres" tiles the image at up to the largest grid resolution, beyond
            # its shortest_edge: keep the largest grid dimension on the longer side.
            dims = [
                side
                for pinpoint in json_list(config["image_grid_pinpoints"])
                for d in json_list(pinpoint)
                if (side := json_int(d)) is not None
            ]
            return cls(max_side=max(dims)) if dims else cls()
        crop = config.get("crop_size")
        crop = crop if isinstance(crop, dict) else {"height": crop, "width": crop} if isinstance(crop, int) else {}
        edge = size.get("shortest_edge")
        if isinstance(edge, int) and edge > 0:
            return cls(min_width=edge, min_height=edge, max_side=None)
        box = size if "height" in size and "width" in size else crop
        height, width = box.get("height"), box.get("width")
        if isinstance(height, int) and isinstance(width, int):
            return cls(min_width=width, min_height=height, max_side=None)
        return cls()


@dataclass(frozen=True)
class VisionModel:
    model_type: str
    expansion: ImageExpansion | None
    image_target: ImageTarget = ImageTarget()

    @classmethod
    def detect(cls, model_dir: Path) -> VisionModel | None:
        """The model's vision facts, or None for a text-only model (no vision encoder IR)."""
        if not (model_dir / VISION_ENCODER_FILE).is_file():
            return None
        try:
            config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        model_type = str(config.get("model_type", "unknown"))
        make = _EXPANSIONS.get(model_type)
        if make is None:
            log.warning(
                "%s is a %r VLM: ovserve does not know how many tokens its images take, so "
                "usage.prompt_tokens and the context-length check count text tokens only",
                model_dir,
                model_type,
            )
        try:
            preprocessor = json.loads((model_dir / PREPROCESSOR_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            preprocessor = {}
        target = ImageTarget.from_preprocessor(preprocessor if isinstance(preprocessor, dict) else {})
        if target == ImageTarget():
            log.info(
                "%s: no input resolution in %s; images are shrunk to at most %d px per side",
                model_dir,
                PREPROCESSOR_FILE,
                FALLBACK_MAX_SIDE,
            )
        return cls(model_type=model_type, expansion=make(config) if make else None, image_target=target)

    def check_prompt(self, prompt: str, image_count: int, *, param: str) -> None:
        """Refuse text that would be read as an image placeholder.

        openvino_genai treats any ``<ov_genai_image_N>`` (and the model's native image token) in
        the prompt as an image slot; user text carrying one would misplace images or fail inside
        the engine.
        """
        tags = _IMAGE_TAG_PATTERN.findall(prompt)
        expected = [image_tag(index) for index in range(image_count)]
        native = self.expansion.image_token if self.expansion is not None else None
        if tags != expected or (native is not None and native in prompt):
            # Usually user text carrying a placeholder; also a chat template that drops or
            # repeats message content, which would misplace the images.
            reserved = "'<ov_genai_image_N>'" + (f" or '{native}'" if native else "")
            raise BadRequestError(
                f"the prompt's image placeholders do not match the images: text may not contain "
                f"the reserved image placeholder {reserved}; send images as image parts",
                param=param,
            )

    def expand_prompt(self, prompt: str) -> str:
        """The prompt as the language model sees it, for counting tokens (see the module doc)."""
        replacement = self.expansion.text() if self.expansion is not None else ""
        return _IMAGE_TAG_PATTERN.sub(lambda _: replacement, prompt)
