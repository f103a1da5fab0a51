"""Decoding an image's bytes for a VLM, within caps read from its header before any pixel.

Contract: :func:`open_image` reads the header only (Pillow decompresses nothing in ``Image.open``)
and refuses an image over :data:`MAX_IMAGE_PIXELS`, :data:`MAX_IMAGE_SIDE` or
:data:`MAX_ASPECT_RATIO` before it is decoded; :func:`decode_image` decodes the first frame to a
uint8 RGB array (alpha over white), shrunk towards the model's input as it decodes. Only the
formats of :data:`IMAGE_FORMATS` are opened. Every failure of Pillow on the bytes is the image's
fault: a :class:`~ovserve.errors.MediaError` (400) naming ``param``. Blocking: run it in a thread.
``ovserve.core.media`` fetches the bytes and bounds how many decodes run at once.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from PIL import Image

from ovserve.errors import MediaError, MediaTooLargeError
from ovserve.models.vision import ImageTarget

log = logging.getLogger(__name__)

# One image decoded at full size takes 4 bytes per pixel in Pillow (~136 MB at this cap) until it
# is shrunk. 8K UHD fits.
MAX_IMAGE_PIXELS = 34_000_000
MAX_IMAGE_SIDE = 16_384
# Vision preprocessors resize the *shorter* side to their input size (CLIP: 336 px), so a 1 x 16384
# strip becomes 336 x 5.5 M pixels of floats (~22 GB) inside the engine. Qwen2-VL's processor
# refuses ratios of 200 and more; so does ovserve, for every model.
MAX_ASPECT_RATIO = 200
# Formats a VLM client sends. Keeping the list short keeps Pillow's rarer (and riskier)
# decoders, e.g. EPS which runs Ghostscript, away from untrusted bytes.
# (Multi-picture JPEGs from phones open through "JPEG".)
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP")
# Downscaling: bicubic like CLIP's processor (resample=3). reducing_gap=3 first box-reduces by an
# integer factor (Pillow's docs: indistinguishable from a full bicubic pass beyond 3x); measured on
# a 5800 x 5800 PNG to 56 px: same peak memory as a plain resize (the decoded image dominates), half
# the time.
_RESAMPLE = Image.Resampling.BICUBIC
_REDUCING_GAP = 3.0
# Modes Pillow resizes directly (RGBA and LA premultiplied, so flattening after is the same).
_RESIZABLE_MODES = frozenset({"RGB", "RGBA", "L", "LA"})


# -- decoding ------------------------------------------------------------------------------------


@contextmanager
def open_image(data: bytes, param: str) -> Iterator[Any]:
    """The opened image, its header checked; any Pillow failure inside the block becomes a 400.

    ``Image.open`` reads the header only: nothing is decompressed before the caps are checked.
    """
    try:
        with Image.open(io.BytesIO(data), formats=IMAGE_FORMATS) as image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS or max(width, height) > MAX_IMAGE_SIDE:
                raise MediaTooLargeError(
                    f"the image is {width}x{height} pixels; the limit is {MAX_IMAGE_PIXELS} pixels "
                    f"and {MAX_IMAGE_SIDE} per side",
                    param=param,
                )
            if max(width, height) >= MAX_ASPECT_RATIO * max(min(width, height), 1):
                raise MediaError(
                    f"the image is {width}x{height} pixels; its aspect ratio must be below {MAX_ASPECT_RATIO}",
                    param=param,
                )
            yield image
    except MediaError:
        raise
    # Pillow only warns below twice its own MAX_IMAGE_PIXELS; ours is below Pillow's, and checked on
    # the header above, so an image Pillow would warn about never reaches the decoder (where
    # warnings are errors, the warning is the refusal).
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        log.debug("image decode refused for %s: %r", param, exc)
        raise MediaTooLargeError(
            f"the image has more pixels than the decoder accepts ({MAX_IMAGE_PIXELS})", param=param
        ) from None
    except Image.UnidentifiedImageError:
        formats = ", ".join(IMAGE_FORMATS)
        raise MediaError(f"the data is not an image in a supported format ({formats})", param=param) from None
    except Exception as exc:  # truncated or corrupt data surfaces as many exception types
        # Pillow's own message stays in the log: library internals are not part of the answer.
        log.info("image decode failed for %s: %r", param, exc)
        raise MediaError("the image is corrupt or truncated", param=param) from None


def decode_image(data: bytes, param: str, target: ImageTarget | None = None) -> np.ndarray:
    """Decode image bytes to a uint8 RGB array [H, W, 3] (first frame, alpha over white).

    With a ``target``, the array has ``target.size_for(width, height)`` (a JPEG is decoded at a
    reduced scale first when that suffices). Runs in an executor thread. Any failure of Pillow on
    these bytes is the image's fault: 400.
    """
    with open_image(data, param) as image:
        size = target.size_for(*image.size) if target is not None else image.size
        if size != image.size:
            # JPEG only: libjpeg decodes at 1/2, 1/4 or 1/8 scale, still covering `size`.
            image.draft(None, size)
        image.load()  # the first frame of an animation
        rgb = _to_rgb(_shrink(image, size))
    return np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8))


def _shrink(image: Any, size: tuple[int, int]) -> Any:
    if image.size == size:
        return image
    if image.mode not in _RESIZABLE_MODES:
        # Palette and exotic modes cannot be resampled; transparency survives to be flattened
        # after shrinking, as _to_rgb would have done before.
        image = image.convert("L" if image.mode == "1" else "RGBA" if image.has_transparency_data else "RGB")
    return image.resize(size, _RESAMPLE, reducing_gap=_REDUCING_GAP)


def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode == "RGB":
        return image
    if image.has_transparency_data:
        # Alpha (RGBA, LA, palette transparency) is flattened onto white, as a viewer shows it.
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")
