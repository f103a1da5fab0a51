"""Media policy and decoding, in-process: the rules the e2e attack table exercises, plus the
settings and corner cases that need no server (``all``, IPv6 entries, host case, root symlinks,
pixel modes)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

from ovserve.core.conversation import Image as ImageRef
from ovserve.core.media import MediaResolver, decode_image
from ovserve.dialects.openai.chat.adapter import messages_of
from ovserve.dialects.openai.chat.request import ChatMessage
from ovserve.errors import MediaError, MediaNotAllowedError, MediaTooLargeError
from ovserve.models.vision import FALLBACK_MAX_SIDE, PREPROCESSOR_FILE, VISION_ENCODER_FILE, ImageTarget, VisionModel
from ovserve.settings.media import MediaSettings
from tests import images

PARAM = "messages.0.content.0.image_url"


def resolver(**settings: object) -> MediaResolver:
    return MediaResolver(MediaSettings.model_validate(settings))


# -- settings ---------------------------------------------------------------------------------


def test_domains_flag_is_comma_separated_and_normalised() -> None:
    settings = MediaSettings.model_validate({"allowed_media_domains": " Example.COM, 127.0.0.1 ,[::1],"})
    assert settings.allowed_media_domains == ["example.com", "127.0.0.1", "::1"]


def test_all_allows_every_host() -> None:
    assert MediaSettings.model_validate({"allowed_media_domains": "a.com,all"}).allowed_media_domains == ["all"]


@pytest.mark.parametrize("entry", ["http://example.com", "example.com:8080", "*.example.com", "exa mple.com", "a/b"])
def test_domain_entries_must_be_plain_hosts(entry: str) -> None:
    with pytest.raises(ValidationError):
        MediaSettings.model_validate({"allowed_media_domains": entry})


def test_local_root_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValidationError):
        MediaSettings.model_validate({"allowed_local_media_path": tmp_path / "file"})
    with pytest.raises(ValidationError):
        MediaSettings.model_validate({"allowed_local_media_path": tmp_path / "missing"})


def test_defaults_deny_urls_and_paths_and_cap_at_20_mb() -> None:
    media = resolver()
    assert media.settings.max_image_bytes == 20 * 1024 * 1024
    with pytest.raises(MediaNotAllowedError, match="--allowed_media_domains"):
        media.classify("http://127.0.0.1/a.png", PARAM)
    with pytest.raises(MediaNotAllowedError, match="--allowed_local_media_path"):
        media.classify("/tmp/a.png", PARAM)
    media.classify(images.data_url(images.solid(images.RED)), PARAM)


# -- remote URLs ------------------------------------------------------------------------------


def test_host_match_is_exact_and_case_insensitive() -> None:
    media = resolver(allowed_media_domains="example.com")
    assert media.check_remote("HTTPS://EXAMPLE.com:8443/a.png?x=1", PARAM).host == "example.com"
    for url in ("https://sub.example.com/a.png", "https://example.com.evil.net/", "https://evilexample.com/"):
        with pytest.raises(MediaNotAllowedError):
            media.check_remote(url, PARAM)


def test_all_still_refuses_authority_tricks() -> None:
    media = resolver(allowed_media_domains="all")
    assert media.check_remote("http://anything.example/a.png", PARAM).host == "anything.example"
    for url in ("http://a@b/", "http://2130706433/", "http://0x7f.1/", "http://b%2e/", "http://a\\@b/", "http://b./"):
        with pytest.raises(MediaNotAllowedError):
            media.check_remote(url, PARAM)


def test_ipv6_literals_match_their_entry() -> None:
    media = resolver(allowed_media_domains="::1")
    assert media.check_remote("http://[::1]:8080/a.png", PARAM).port == 8080
    with pytest.raises(MediaNotAllowedError):
        media.check_remote("http://[0:0:0:0:0:0:0:1]/a.png", PARAM)


def test_canonical_ip_entries_match() -> None:
    media = resolver(allowed_media_domains="10.0.0.7")
    assert media.check_remote("http://10.0.0.7/a.png", PARAM).host == "10.0.0.7"
    with pytest.raises(MediaNotAllowedError):
        media.check_remote("http://10.0.0.007/a.png", PARAM)


# -- local paths ------------------------------------------------------------------------------


def test_root_given_through_a_symlink_accepts_both_spellings(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.png").write_bytes(images.solid(images.RED))
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    media = resolver(allowed_local_media_path=link)
    for path in (link / "a.png", real / "a.png"):
        media.classify(str(path), PARAM)
    with pytest.raises(MediaNotAllowedError):
        media.classify(str(tmp_path / "a.png"), PARAM)


# -- decoding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["L", "LA", "1", "I;16", "CMYK", "P", "RGBA", "I", "F"])
def test_every_pixel_mode_becomes_rgb(mode: str) -> None:
    image = Image.new("RGB", (8, 6), images.RED).convert(mode)
    fmt = "JPEG" if mode == "CMYK" else "TIFF" if mode in {"I", "F"} else "PNG"
    body = images.encode(image, fmt)
    if fmt == "TIFF":  # not an accepted format: refused, not mis-decoded
        with pytest.raises(MediaError, match="supported format"):
            decode_image(body, PARAM)
        return
    array = decode_image(body, PARAM)
    assert array.shape == (6, 8, 3)
    assert array.dtype == np.uint8
    assert array.flags.c_contiguous


def test_transparent_pixels_become_white() -> None:
    array = decode_image(images.rgba_transparent(), PARAM)
    assert (array == 255).all()


def test_animated_gif_gives_its_first_frame() -> None:
    array = decode_image(images.animated_gif(images.RED, images.BLUE), PARAM)
    assert tuple(array[0, 0]) == images.RED


@pytest.mark.parametrize(("width", "height"), [(100_000, 100_000), (10_000, 10_000), (6000, 6000), (20_000, 2)])
def test_oversized_headers_are_refused_before_decoding(width: int, height: int) -> None:
    with pytest.raises(MediaTooLargeError):
        decode_image(images.png_header_only(width, height), PARAM)


@pytest.mark.parametrize(("width", "height"), [(16_384, 1), (1, 200), (400, 2)])
def test_extreme_aspect_ratios_are_refused(width: int, height: int) -> None:
    with pytest.raises(MediaError, match="aspect ratio"):
        decode_image(images.solid(images.RED, size=(width, height)), PARAM)


def test_wide_but_sane_images_pass() -> None:
    assert decode_image(images.solid(images.RED, size=(1990, 10)), PARAM).shape == (10, 1990, 3)


@pytest.mark.parametrize("body", [b"", b"GIF89a", images.truncated_png(), images.corrupt_png(), b"<svg/>"])
def test_broken_data_is_a_client_error(body: bytes) -> None:
    with pytest.raises(MediaError) as caught:
        decode_image(body, PARAM)
    assert caught.value.status == 400
    assert caught.value.param == PARAM


def test_decoded_array_is_exact_for_lossless_formats() -> None:
    source = Image.effect_noise((16, 9), 80).convert("RGB")
    buffer = io.BytesIO()
    source.save(buffer, format="PNG")
    assert (decode_image(buffer.getvalue(), PARAM) == np.asarray(source)).all()


def test_image_count_per_request_is_capped() -> None:
    media = resolver(max_images_per_request=2)
    part = {"type": "image_url", "image_url": {"url": images.data_url(images.solid(images.RED))}}
    two = ChatMessage.model_validate({"role": "user", "content": [part, part]})
    assert len(media.plan(images_of([two]), param="messages")) == 2
    three = [two, ChatMessage.model_validate({"role": "user", "content": [part]})]
    with pytest.raises(MediaError, match="at most 2 images") as caught:
        media.plan(images_of(three), param="messages")
    assert caught.value.param == "messages"


# -- shrinking towards the model's input ---------------------------------------------------------

CLIP_56 = {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 56}, "crop_size": 56}


def write_vlm_dir(path: Path, preprocessor: dict[str, object]) -> Path:
    (path / VISION_ENCODER_FILE).write_text("<net/>")
    (path / "config.json").write_text(json.dumps({"model_type": "llava"}))
    (path / PREPROCESSOR_FILE).write_text(json.dumps(preprocessor))
    return path


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_large_images_shrink_so_the_shorter_side_is_the_processors_shortest_edge(tmp_path: Path, fmt: str) -> None:
    vision = VisionModel.detect(write_vlm_dir(tmp_path, CLIP_56))
    assert vision is not None
    landscape = images.encode(Image.effect_noise((800, 600), 60).convert("RGB"), fmt)
    portrait = images.encode(Image.effect_noise((600, 800), 60).convert("RGB"), fmt)
    # transformers' CLIP resize: shorter side 56, longer int(56 * 800 / 600) = 74.
    assert decode_image(landscape, PARAM, vision.image_target).shape == (56, 74, 3)
    assert decode_image(portrait, PARAM, vision.image_target).shape == (74, 56, 3)


def test_small_images_are_never_enlarged() -> None:
    target = ImageTarget.from_preprocessor(CLIP_56)
    source = Image.effect_noise((40, 30), 80).convert("RGB")
    array = decode_image(images.encode(source, "PNG"), PARAM, target)
    assert (array == np.asarray(source)).all()
    assert ImageTarget.from_preprocessor({"max_pixels": 10_000}).size_for(90, 100) == (90, 100)


def test_dynamic_resolution_models_get_at_most_max_pixels() -> None:
    qwen = {"image_processor_type": "Qwen2VLImageProcessor", "size": {"shortest_edge": 3136, "longest_edge": 200_000}}
    array = decode_image(images.solid(images.RED, size=(1200, 600)), PARAM, ImageTarget.from_preprocessor(qwen))
    height, width, _ = array.shape
    assert height * width <= 200_000
    assert abs(width / height - 2) < 0.01
    assert tuple(array[height // 2, width // 2]) == images.RED


def test_unknown_processors_cap_the_longer_side() -> None:
    array = decode_image(images.solid(images.BLUE, size=(3000, 1500)), PARAM, ImageTarget.from_preprocessor({}))
    assert array.shape == (FALLBACK_MAX_SIDE // 2, FALLBACK_MAX_SIDE, 3)


def test_shrunk_transparent_and_animated_images_decode_as_before() -> None:
    target = ImageTarget.from_preprocessor(CLIP_56)
    transparent = images.encode(Image.new("RGBA", (400, 300), (12, 34, 56, 0)), "PNG")
    assert (decode_image(transparent, PARAM, target) == 255).all()
    frames = [Image.new("RGB", (400, 300), images.RED), Image.new("RGB", (400, 300), images.BLUE)]
    gif = images.encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    shrunk = decode_image(gif, PARAM, target)
    assert shrunk.shape == (56, 74, 3)
    assert tuple(shrunk[28, 37]) == images.RED


# -- the request's pixel budget ------------------------------------------------------------------


def images_of(messages: list[ChatMessage]) -> list[ImageRef]:
    """The images of chat messages, as the chat adapter hands them to the core."""
    return [image for message in messages_of(messages) for image in message.images]


def image_message(*bodies: bytes) -> ChatMessage:
    parts: list[dict[str, object]] = [{"type": "text", "text": "look"}]
    parts += [{"type": "image_url", "image_url": {"url": images.data_url(body)}} for body in bodies]
    return ChatMessage.model_validate({"role": "user", "content": parts})


def test_pixel_budget_names_the_image_that_crosses_it_and_decodes_nothing() -> None:
    media = resolver(max_image_pixels_per_request=25_000)
    # 10_000 pixels each as far as the header says, but pixels that do not decode: a refusal
    # from the budget, not from the decoder, shows the check came first.
    message = image_message(*[images.png_header_only(100, 100)] * 4)

    async def load() -> list[np.ndarray]:
        return await media.load(media.plan(images_of([message]), param="messages"), ImageTarget())

    with pytest.raises(MediaTooLargeError, match="--max_image_pixels_per_request") as caught:
        asyncio.run(load())
    assert caught.value.param == "messages.0.content.3.image_url"
    assert caught.value.code == "image_too_large"


def test_requests_within_the_pixel_budget_decode_every_image_in_order() -> None:
    media = resolver(max_image_pixels_per_request=2 * 40 * 30)
    message = image_message(images.solid(images.RED), images.solid(images.BLUE))

    async def load() -> list[np.ndarray]:
        return await media.load(media.plan(images_of([message]), param="messages"), ImageTarget())

    red, blue = asyncio.run(load())
    assert tuple(red[0, 0]) == images.RED
    assert tuple(blue[0, 0]) == images.BLUE


def test_the_pixel_cap_is_below_the_one_pillow_only_warns_about() -> None:
    # image_decode.py relies on it: the header check refuses every image Pillow would merely warn on.
    from ovserve.core.image_decode import MAX_IMAGE_PIXELS

    assert MAX_IMAGE_PIXELS < Image.MAX_IMAGE_PIXELS
