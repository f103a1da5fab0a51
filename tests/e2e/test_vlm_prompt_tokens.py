"""The server's VLM prompt-token count equals what the engine reports for the same prompt.

ovserve counts ``usage.prompt_tokens`` (and checks the context length) before the request runs,
by expanding each ``<ov_genai_image_N>`` tag the way openvino_genai does for LLaVA. This test
runs the real pipeline on the same prompts and compares with its own input-token count, so an
openvino_genai change in the expansion shows up here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ovserve.models.vision import VisionModel, image_tag

PROMPTS = [
    ("plain text, no image", 0),
    (f"{image_tag(0)}What is this?", 1),
    (f"a{image_tag(0)}b", 1),
    (f"x\n{image_tag(0)}\n\nhello world{image_tag(1)} tail", 2),
    (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        f"{image_tag(0)}{image_tag(1)}{image_tag(2)}Compare them.<|im_end|>\n<|im_start|>assistant\n",
        3,
    ),
]


def test_counted_prompt_tokens_match_the_engine(tiny_vlm: Path) -> None:
    import openvino as ov
    import openvino_genai as ov_genai

    vision = VisionModel.detect(tiny_vlm)
    assert vision is not None and vision.expansion is not None
    tokenizer = ov_genai.Tokenizer(str(tiny_vlm))
    scheduler = ov_genai.SchedulerConfig()
    scheduler.cache_size = 0
    scheduler.max_num_batched_tokens = 256
    pipe = ov_genai.ContinuousBatchingPipeline(str(tiny_vlm), scheduler, "CPU")
    image = np.zeros((1, 30, 40, 3), dtype=np.uint8)
    handles = []
    for request_id, (prompt, image_count) in enumerate(PROMPTS):
        config = pipe.get_config()
        config.max_new_tokens = 1
        config.do_sample = False
        config.apply_chat_template = False
        handles.append(pipe.add_request(request_id, prompt, [ov.Tensor(image)] * image_count, config))
    while pipe.has_non_finished_requests():
        pipe.step()
    for (prompt, _), handle in zip(PROMPTS, handles, strict=True):
        counted = tokenizer.encode(vision.expand_prompt(prompt), add_special_tokens=False).input_ids.shape[1]
        assert counted == handle.get_perf_metrics().get_num_input_tokens(), prompt
