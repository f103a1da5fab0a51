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
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ovserve.api.protocol import ChatMessage, ImagePart, TextPart
from ovserve.errors import BadRequestError

log = logging.getLogger(__name__)

VISION_ENCODER_FILE = "openvino_vision_embeddings_model.xml"
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


def _llava(config: dict[str, Any]) -> ImageExpansion:
    vision = config.get("vision_config") or {}
    image_size = int(vision.get("image_size", 336))
    patch_size = int(vision.get("patch_size", 14))
    features = (image_size // patch_size) ** 2
    # "full" keeps the CLS feature that "default" drops.
    if config.get("vision_feature_select_strategy", "default") == "full":
        features += 1
    return ImageExpansion(image_token="<image>", tokens_per_image=features, suffix="\n")


# model_type -> how openvino_genai expands an image tag for that family. Only families whose
# expansion is fixed by config.json belong here (LLaVA-NeXT, Qwen2-VL, ... depend on the image).
_EXPANSIONS: dict[str, Callable[[dict[str, Any]], ImageExpansion]] = {"llava": _llava}


@dataclass(frozen=True)
class VisionModel:
    model_type: str
    expansion: ImageExpansion | None

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
        return cls(model_type=model_type, expansion=make(config) if make else None)

    def check_prompt(self, prompt: str, image_count: int) -> None:
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
                f"the prompt's image placeholders do not match the image_url parts: text may not contain "
                f"the reserved image placeholder {reserved}; send images as image_url parts",
                param="messages",
            )

    def expand_prompt(self, prompt: str) -> str:
        """The prompt as the language model sees it, for counting tokens (see the module doc)."""
        replacement = self.expansion.text() if self.expansion is not None else ""
        return _IMAGE_TAG_PATTERN.sub(lambda _: replacement, prompt)


def insert_image_tags(templated: list[dict[str, Any]], messages: list[ChatMessage]) -> int:
    """Rewrite the templated messages' content with an image tag where each image part was.

    Tags are numbered across the whole conversation in order, matching the order of the image
    list sent to the engine. Text parts stay joined by newlines, as for text-only models; a tag
    sits right next to its neighbours (openvino_genai adds its own separator). Returns the
    number of images.
    """
    count = 0
    for rendered, message in zip(templated, messages, strict=True):
        if not message.image_parts():
            continue
        pieces: list[str] = []
        previous_was_text = False
        for part in message.content or []:
            if isinstance(part, ImagePart):
                pieces.append(image_tag(count))
                count += 1
                previous_was_text = False
            elif isinstance(part, TextPart):
                pieces.append(("\n" if previous_was_text else "") + part.text)
                previous_was_text = True
        rendered["content"] = "".join(pieces)
    return count
