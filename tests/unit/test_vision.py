"""VLM prompt preparation: where image tags go, which text is refused, how prompts are counted."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ovserve.core.chat import template_messages
from ovserve.dialects.openai.chat.adapter import messages_of
from ovserve.dialects.openai.chat.request import ChatMessage
from ovserve.errors import BadRequestError
from ovserve.models.vision import VISION_ENCODER_FILE, ImageTarget, VisionModel

IMAGE = {"type": "image_url", "image_url": {"url": "data:,"}}


def model_dir(tmp_path: Path, config: dict[str, object], *, vision: bool = True) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    if vision:
        (tmp_path / VISION_ENCODER_FILE).write_text("<net/>")
    return tmp_path


LLAVA = {
    "model_type": "llava",
    "vision_feature_select_strategy": "default",
    "vision_config": {"image_size": 336, "patch_size": 14},
}


def test_tags_replace_image_parts_in_order_across_messages() -> None:
    messages = [
        ChatMessage.model_validate({"role": "system", "content": "Be brief."}),
        ChatMessage.model_validate(
            {"role": "user", "content": [{"type": "text", "text": "a"}, IMAGE, {"type": "text", "text": "b"}, IMAGE]}
        ),
        ChatMessage.model_validate({"role": "assistant", "content": "ok"}),
        ChatMessage.model_validate(
            {"role": "user", "content": [IMAGE, {"type": "text", "text": "c"}, {"type": "text", "text": "d"}]}
        ),
    ]
    templated = template_messages(messages_of(messages))
    assert [m["content"] for m in templated] == [
        "Be brief.",
        "a<ov_genai_image_0>b<ov_genai_image_1>",
        "ok",
        "<ov_genai_image_2>c\nd",
    ]


def test_text_only_model_dir_is_not_a_vlm(tmp_path: Path) -> None:
    assert VisionModel.detect(model_dir(tmp_path, {"model_type": "qwen2"}, vision=False)) is None


def test_llava_image_tokens_follow_its_vision_config(tmp_path: Path) -> None:
    vision = VisionModel.detect(model_dir(tmp_path, LLAVA))
    assert vision is not None and vision.expansion is not None
    assert vision.expansion.tokens_per_image == 576
    assert vision.expand_prompt("x<ov_genai_image_0>y") == "x" + "<image>" * 576 + "\ny"


def test_llava_full_strategy_keeps_the_cls_token(tmp_path: Path) -> None:
    vision = VisionModel.detect(model_dir(tmp_path, {**LLAVA, "vision_feature_select_strategy": "full"}))
    assert vision is not None and vision.expansion is not None
    assert vision.expansion.tokens_per_image == 577


@pytest.mark.parametrize(
    ("vision_config", "tokens"),
    [
        ("336", 576),  # not an object: LLaVA's defaults (336 / 14)
        ({"image_size": "224", "patch_size": 14.0}, 256),  # numbers written as strings or floats
        ({"image_size": [336], "patch_size": None}, 576),  # the wrong kind: the defaults
    ],
)
def test_a_vision_config_of_the_wrong_kind_reads_as_the_defaults(
    tmp_path: Path, vision_config: object, tokens: int
) -> None:
    vision = VisionModel.detect(model_dir(tmp_path, {**LLAVA, "vision_config": vision_config}))
    assert vision is not None and vision.expansion is not None
    assert vision.expansion.tokens_per_image == tokens


def test_unreadable_grid_pinpoints_are_skipped_not_a_crash() -> None:
    target = ImageTarget.from_preprocessor({"image_grid_pinpoints": [[336, "672"], "x", [None, 1008.0], 5]})
    assert target.max_side == 1008
    assert ImageTarget.from_preprocessor({"image_grid_pinpoints": "none"}) == ImageTarget()


def test_unknown_family_counts_text_only_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        vision = VisionModel.detect(model_dir(tmp_path, {"model_type": "qwen2_vl"}))
    assert vision is not None and vision.expansion is None
    assert "count text tokens only" in caplog.text
    assert vision.expand_prompt("x<ov_genai_image_0>y") == "xy"


@pytest.mark.parametrize(
    ("prompt", "images"),
    [
        ("user says <ov_genai_image_0>", 0),
        ("<ov_genai_image_0> and <ov_genai_image_0>", 1),
        ("<ov_genai_image_1>", 1),
        ("<ov_genai_image_0> then <image>", 1),
    ],
)
def test_reserved_placeholders_are_refused(tmp_path: Path, prompt: str, images: int) -> None:
    vision = VisionModel.detect(model_dir(tmp_path, LLAVA))
    assert vision is not None
    with pytest.raises(BadRequestError, match="reserved image placeholder"):
        vision.check_prompt(prompt, images, param="messages")


def test_matching_tags_pass(tmp_path: Path) -> None:
    vision = VisionModel.detect(model_dir(tmp_path, LLAVA))
    assert vision is not None
    vision.check_prompt("<ov_genai_image_0>x<ov_genai_image_1>", 2, param="messages")
