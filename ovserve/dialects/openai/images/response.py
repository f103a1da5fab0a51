"""The answers of /images/generations and /images/edits: OpenAI's ``ImagesResponse``, and its
stream events (``image_generation.*`` / ``image_edit.*``: partial images, then one completed event
per image, or an ``error`` event when the stream fails after its first byte).

Contract: every body is a response model (:class:`~ovserve.dialects.body.Body`); ``usage`` is
OpenAI's image usage: the prompt's text tokens and the input image's tokens, the output's image
tokens (ovserve counts one token per 16 x 16 pixels: ``ovserve.core.images.image_tokens``).
"""

from __future__ import annotations

from typing import Literal

from ovserve.dialects.body import Body
from ovserve.dialects.openai.common import ErrorObject
from ovserve.errors import OvserveError

OutputFormat = Literal["png", "jpeg", "webp"]


class InputTokensDetails(Body):
    text_tokens: int
    image_tokens: int


class ImagesUsage(Body):
    total_tokens: int
    input_tokens: int
    output_tokens: int
    input_tokens_details: InputTokensDetails

    @classmethod
    def of(cls, text_tokens: int, image_tokens: int, output_tokens: int) -> ImagesUsage:
        return cls(
            total_tokens=text_tokens + image_tokens + output_tokens,
            input_tokens=text_tokens + image_tokens,
            output_tokens=output_tokens,
            input_tokens_details=InputTokensDetails(text_tokens=text_tokens, image_tokens=image_tokens),
        )


class Image(Body):
    b64_json: str


class ImagesResponse(Body):
    created: int
    data: list[Image]
    background: Literal["opaque"]
    output_format: OutputFormat
    size: str
    quality: Literal["auto"]
    usage: ImagesUsage


class _ImageEvent(Body):
    """What every image event of a stream carries: one image, and how it was made."""

    type: str
    b64_json: str
    created_at: int
    size: str
    quality: Literal["auto"]
    background: Literal["opaque"]
    output_format: OutputFormat


class PartialImageEvent(_ImageEvent):
    type: Literal["image_generation.partial_image", "image_edit.partial_image"]
    partial_image_index: int


class CompletedEvent(_ImageEvent):
    type: Literal["image_generation.completed", "image_edit.completed"]
    usage: ImagesUsage


class ImageStreamError(Body):
    """The last event of an image stream that failed midway (the SDK raises it as an APIError)."""

    type: Literal["error"]
    error: ErrorObject

    @classmethod
    def of(cls, error: OvserveError) -> ImageStreamError:
        return cls(
            type="error",
            error=ErrorObject(message=error.message, type=error.error_type, param=error.param, code=error.code),
        )


# What an image stream's ``data`` may be, told apart by ``type``.
ImageStreamEvent = PartialImageEvent | CompletedEvent | ImageStreamError
