"""Image bytes for tests: real encodings made with Pillow, and hand-made hostile ones."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image

RED = (255, 0, 0)
BLUE = (0, 0, 255)
WHITE = (255, 255, 255)
SIZE = (40, 30)


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def solid(color: tuple[int, int, int], fmt: str = "PNG", size: tuple[int, int] = SIZE) -> bytes:
    return encode(Image.new("RGB", size, color), fmt)


def rgba_transparent() -> bytes:
    """Fully transparent: flattened onto white, it must read exactly like a white image."""
    return encode(Image.new("RGBA", SIZE, (12, 34, 56, 0)), "PNG")


def palette(color: tuple[int, int, int]) -> bytes:
    return encode(Image.new("RGB", SIZE, color).convert("P"), "PNG")


def animated_gif(first: tuple[int, int, int], second: tuple[int, int, int]) -> bytes:
    frames = [Image.new("RGB", SIZE, first), Image.new("RGB", SIZE, second)]
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


def data_url(body: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(body).decode()}"


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims width x height but carries a few bytes of pixels (a bomb's header)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _chunk(b"IEND", b"")
    )


def truncated_png() -> bytes:
    body = encode(Image.effect_noise(SIZE, 64).convert("RGB"), "PNG")
    return body[: len(body) // 2]


def corrupt_png() -> bytes:
    """A PNG signature and header followed by garbage."""
    body = solid(RED)
    return body[:33] + bytes(range(256)) * 4
