"""The image request's fields in the core's terms: sizes, counts, OVMS's extras, form text, the
refusals that need no model; and when the engine decodes partial images."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ovserve.dialects.openai.images.request import ImageEditFields, ImageGenerationRequest
from ovserve.engine.retrieval_loop import partial_image_step
from ovserve.errors import BadRequestError


def ask(**fields: Any) -> Any:
    return ImageGenerationRequest.model_validate({"model": "m", "prompt": "a cat", **fields}).ask(None)


def test_sizes_counts_and_extras_become_the_core_ask() -> None:
    assert ask().size is None and ask(size="auto").size is None
    assert ask(size="96x64").size == (96, 64)
    assert ask(width=32, height=48).size == (32, 48)
    assert ask(num_images_per_prompt=3).n == 3 and ask(n=2).n == 2 and ask().n == 1
    extras = ask(num_inference_steps=7, rng_seed=9, guidance_scale=2.5, negative_prompt="blur", lora_alphas={"a": 0.5})
    assert (extras.steps, extras.rng_seed, extras.guidance_scale) == (7, 9, 2.5)
    assert (extras.negative_prompt, extras.lora_alphas) == ("blur", {"a": 0.5})
    assert ask(partial_images=2).partial_images == 0, "partial images belong to streams"
    assert ask(partial_images=2, stream=True).partial_images == 2
    assert ask(output_format="webp", output_compression=80).output_compression == 80


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"size": "64"}, "size"),
        ({"size": "0x64"}, "size"),
        ({"size": "64x64", "width": 64, "height": 64}, "size"),
        ({"height": 64}, "width"),
        ({"response_format": "url"}, "response_format"),
        ({"background": "transparent"}, "background"),
        ({"output_compression": 10}, "output_compression"),
    ],
)
def test_what_no_model_can_do_is_a_400_naming_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequestError) as refused:
        ask(**fields)
    assert refused.value.param == param


@pytest.mark.parametrize(
    "fields",
    [{"n": "2"}, {"n": 2, "num_images_per_prompt": 3}, {"prompt": " "}, {"guidance_scale": float("inf")}],
)
def test_json_is_strict_and_consistent(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ImageGenerationRequest.model_validate({"model": "m", "prompt": "a cat", **fields})


def test_an_edit_form_carries_numbers_and_json_as_text() -> None:
    fields = ImageEditFields.model_validate(
        {"model": "m", "prompt": "p", "n": "2", "strength": "0.5", "stream": "true", "lora_alphas": '{"a": 1}'}
    )
    assert (fields.n, fields.strength, fields.stream, fields.lora_alphas) == (2, 0.5, True, {"a": 1.0})
    with pytest.raises(ValidationError, match="JSON object"):
        ImageEditFields.model_validate({"model": "m", "prompt": "p", "lora_alphas": "{not json"})


@pytest.mark.parametrize(
    ("wanted", "steps", "due"),
    [(1, 4, [2]), (2, 4, [2, 3]), (3, 4, [1, 2, 3]), (2, 6, [2, 4]), (3, 50, [13, 25, 38])],
)
def test_partial_images_are_decoded_at_evenly_spaced_steps_before_the_last(
    wanted: int, steps: int, due: list[int]
) -> None:
    assert [partial_image_step(index, wanted, steps) for index in range(wanted)] == due
    assert all(step < steps for step in due)
