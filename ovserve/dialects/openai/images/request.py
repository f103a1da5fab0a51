"""The bodies of /images/generations (JSON) and /images/edits (a multipart form): OpenAI's fields,
with OVMS's extras (the SDK sends them through ``extra_body``).

Contract: :class:`ImageGenerationRequest` validates a generation's JSON, and an edit's text
fields; :func:`edit_parts` reads an edit's form (one ``image`` file, also as ``image[]``, an
optional ``mask`` file, text fields) for an :class:`ImageEditRequest`. Both become the core's
:class:`~ovserve.core.images.ImageAsk` (:meth:`ImageGenerationRequest.ask`).

- ``size`` is ``auto`` or ``WIDTHxHEIGHT`` (OVMS's ``width`` and ``height`` are accepted too);
  ``n`` and OVMS's ``num_images_per_prompt`` are one setting.
- ``response_format`` ``url`` is refused: ovserve keeps no images to link to (a ``data:`` URL
  would be the ``b64_json`` bytes under a name clients fetch over HTTP), so images always come
  back as ``b64_json``, as OpenAI's GPT image models answer.
- ``background`` ``transparent`` is refused: the diffusion models ovserve serves draw opaque
  images. ``quality``, ``moderation`` and ``style`` steer OpenAI's own models only: accepted and
  ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from multidict import MultiDictProxy
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ovserve.core.images import MAX_PARTIAL_IMAGES, ImageAsk
from ovserve.dialects.openai.common import saying
from ovserve.errors import BadRequestError, UnsupportedParameterError

MAX_PROMPT_CHARS = 32_000  # OpenAI's limit for its GPT image models
_SIZE = re.compile(r"(\d{1,5})x(\d{1,5})")
# OVMS's extras the core takes under the same names.
_PASSED_ON = ("guidance_scale", "rng_seed", "strength", "max_sequence_length", "prompt_2", "prompt_3",
              "negative_prompt", "negative_prompt_2", "negative_prompt_3")  # fmt: skip
# A file field of the edit form may carry this many images (OpenAI: up to 16 for its GPT models).
_IMAGE_FIELDS = ("image", "image[]")


class ImageGenerationRequest(BaseModel):
    # strict: "10" is not 10 and true is not 1 in JSON (as the sampling routes); an edit's form
    # fields are text, read by ImageEditFields.
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str = Field(min_length=1)
    prompt: Annotated[str, Field(min_length=1, max_length=MAX_PROMPT_CHARS), saying("describe the image")]
    n: int | None = Field(default=None, ge=1, le=1000)
    num_images_per_prompt: int | None = Field(default=None, ge=1, le=1000)
    size: str | None = None
    width: int | None = Field(default=None, ge=1, le=65_536)
    height: int | None = Field(default=None, ge=1, le=65_536)
    response_format: Literal["url", "b64_json"] | None = None
    output_format: Literal["png", "jpeg", "webp"] | None = None
    output_compression: int | None = Field(default=None, ge=0, le=100)
    background: Literal["transparent", "opaque", "auto"] | None = None
    quality: Literal["standard", "hd", "low", "medium", "high", "auto"] | None = None
    moderation: Literal["low", "auto"] | None = None
    style: Literal["vivid", "natural"] | None = None
    user: str | None = None
    stream: bool | None = False
    partial_images: int | None = Field(default=None, ge=0, le=MAX_PARTIAL_IMAGES)
    # OVMS's (openvino_genai's) extras.
    prompt_2: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    prompt_3: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    negative_prompt: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    negative_prompt_2: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    negative_prompt_3: str | None = Field(default=None, max_length=MAX_PROMPT_CHARS)
    num_inference_steps: int | None = Field(default=None, ge=1, le=10_000)
    guidance_scale: float | None = Field(default=None, ge=0.0, le=100.0, allow_inf_nan=False)
    rng_seed: int | None = Field(default=None, ge=0, le=2**64 - 1)
    strength: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    max_sequence_length: int | None = Field(default=None, ge=1, le=4096)
    lora_alphas: dict[str, float] | None = None

    @field_validator("lora_alphas", mode="before")
    @classmethod
    def _json_text(cls, value: Any) -> Any:
        if isinstance(value, str):  # a form field carries JSON text
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError('must be a JSON object of adapter aliases and alphas, e.g. {"style": 0.7}') from None
        return value

    @model_validator(mode="after")
    def _one_count(self) -> ImageGenerationRequest:
        if self.n is not None and self.num_images_per_prompt is not None and self.n != self.num_images_per_prompt:
            raise ValueError("n and num_images_per_prompt are the same setting: give one")
        return self

    def ask(self, adapter: str | None, image: bytes | None = None, mask: bytes | None = None) -> ImageAsk:
        """The core's ask (see the module doc for what is refused here)."""
        if self.response_format == "url":
            raise UnsupportedParameterError(
                "response_format 'url' is not supported: ovserve keeps no images to link to; images come back as "
                "base64 in 'b64_json' (leave response_format out or ask 'b64_json')",
                param="response_format",
            )
        if self.background == "transparent":
            raise UnsupportedParameterError(
                "background 'transparent' is not supported: the model draws opaque images", param="background"
            )
        if (
            self.output_compression is not None
            and self.output_compression < 100
            and self.output_format in (None, "png")
        ):
            raise BadRequestError("output_compression applies to jpeg and webp, not png", param="output_compression")
        return ImageAsk(
            prompt=self.prompt,
            size=self._size(),
            n=self.n or self.num_images_per_prompt or 1,
            steps=self.num_inference_steps,
            adapter=adapter,
            lora_alphas=dict(self.lora_alphas or {}),
            output_format=self.output_format or "png",
            output_compression=100 if self.output_compression is None else self.output_compression,
            partial_images=(self.partial_images or 0) if self.stream else 0,
            image=image,
            mask=mask,
            **{name: getattr(self, name) for name in _PASSED_ON},
        )

    def _size(self) -> tuple[int, int] | None:
        if self.size is not None and (self.width is not None or self.height is not None):
            raise BadRequestError("give 'size' or 'width' and 'height', not both", param="size")
        if self.width is not None or self.height is not None:
            if self.width is None or self.height is None:
                raise BadRequestError(
                    "'width' and 'height' go together", param="width" if self.width is None else "height"
                )
            return self.width, self.height
        if self.size is None or self.size == "auto":
            return None
        match = _SIZE.fullmatch(self.size)
        if match is None or int(match[1]) == 0 or int(match[2]) == 0:
            raise BadRequestError(
                f"size must be 'auto' or WIDTHxHEIGHT in pixels (e.g. 512x512), got {self.size[:40]!r}", param="size"
            )
        return int(match[1]), int(match[2])


class ImageEditFields(ImageGenerationRequest):
    """An edit's text fields: a form carries numbers and booleans as text ("2", "true")."""

    model_config = ConfigDict(extra="ignore", strict=False)


@dataclass(frozen=True)
class ImageEditRequest:
    """An edit: the form's fields, and its uploaded image and mask."""

    fields: ImageGenerationRequest
    image: bytes
    mask: bytes | None


def edit_parts(form: MultiDictProxy[Any]) -> tuple[dict[str, Any], bytes, bytes | None]:
    """An edit form's text fields (for :class:`ImageGenerationRequest`), its image and its mask."""
    images = [upload for name in _IMAGE_FIELDS for upload in form.getall(name, [])]
    if not images:
        raise BadRequestError("'image' is required: the image to edit, as a multipart file field", param="image")
    if len(images) > 1:
        raise BadRequestError(f"{len(images)} images were sent; the model edits one image per request", param="image")
    masks = form.getall("mask", [])
    if len(masks) > 1:
        raise BadRequestError("one 'mask' per request", param="mask")
    texts: dict[str, Any] = {}
    for name in dict.fromkeys(form):  # each name once, in form order
        if name in (*_IMAGE_FIELDS, "mask"):
            continue
        values = form.getall(name)
        if len(values) > 1:
            raise BadRequestError(f"'{name[:60]}' was given {len(values)} times", param=name[:60])
        if not isinstance(values[0], str):
            raise BadRequestError(f"'{name[:60]}' must be a text field, not a file", param=name[:60])
        texts[name] = values[0]
    return texts, _file(images[0], "image"), _file(masks[0], "mask") if masks else None


def _file(upload: Any, param: str) -> bytes:
    if isinstance(upload, str):
        raise BadRequestError(f"'{param}' must be a file field (multipart with a filename), not text", param=param)
    data: bytes = upload.file.read()
    if not data:
        raise BadRequestError(f"'{param}' is an empty file", param=param)
    return data
