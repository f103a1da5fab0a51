"""VLM continuous batching + prefix caching: a greedy request that arrives one step after a
sampled request with the same prompt can get a different output than it gets alone.

Versions: openvino 2026.4.1, openvino-genai 2026.4.1.0 (2026.4.1.0-3408-ab01d1771e4), CPU,
Python 3.11, x86-64. Model: ovserve's demo ``tiny-vlm`` (a random LLaVA: CLIP 56 px + 2-layer
Qwen2; ``python scripts/make_demo_models.py``). Text-only prompts: no image is involved.

Steps: a ``ContinuousBatchingPipeline`` on the VLM with ``enable_prefix_caching = True``; for each
of 30 chat prompts (37-308 tokens): add a sampled request (``do_sample``, temperature 0.7,
``rng_seed``), ``step()`` once, add a greedy request with the same prompt, ``step()`` until both
finish; compare the greedy output with the prompt's greedy output on a pipeline without prefix
caching, alone.

Expected: identical, as for a text LLM's token-id pipeline in the same experiment (0 of 119
prompt lengths differ): greedy output does not depend on what else is batched or cached.

Actual: it differs for 3 of the 30 prompts (156, 232, 308 tokens), the same way every run, after
several correct tokens; a finer sweep found 7 of 119 lengths (55, 127, 131, 292, ...). With prefix
caching off: 0 of 30 (1 of 119 in the finer sweep), so the cache is most of it, maybe not all;
the cause is not known. ovserve keeps prefix caching on for VLMs and
tests/e2e/test_pipeline_variants.py marks the drift under concurrent load as a known engine issue.

    python scripts/repro/vlm_prefix_cache_drift.py [--models models] [--prefix_caching false]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

WORDS = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()  # noqa: SIM905


def main() -> None:
    import openvino_genai as ov_genai

    parser = argparse.ArgumentParser(description="VLM + prefix caching: greedy output depends on a sampled neighbour")
    parser.add_argument("--models", type=Path, default=Path("models"), help="holds tiny-vlm")
    parser.add_argument("--prefix_caching", default="true", choices=["true", "false"])
    args = parser.parse_args()

    def pipeline(prefix_caching: bool) -> Any:
        scheduler = ov_genai.SchedulerConfig()
        scheduler.enable_prefix_caching = prefix_caching
        return ov_genai.ContinuousBatchingPipeline(str(args.models / "tiny-vlm"), scheduler, "CPU")

    reference = pipeline(False)  # each prompt alone, nothing cached
    pipe = pipeline(args.prefix_caching == "true")
    tokenizer = pipe.get_tokenizer()
    request_ids = iter(range(1 << 30))

    def add(pipe: Any, prompt: str, sample: bool) -> Any:
        config = pipe.get_config()
        config.max_new_tokens = 16
        config.apply_chat_template = False
        config.repetition_penalty = 1.05
        config.do_sample = sample
        config.temperature = 0.7
        config.top_k = 20
        config.top_p = 0.8
        config.ignore_eos = not sample
        request_id = next(request_ids)
        config.rng_seed = request_id
        return pipe.add_request(request_id, prompt, [], config)

    def finish(pipe: Any, *handles: Any) -> list[int]:
        while pipe.has_non_finished_requests():
            pipe.step()
        return list(handles[-1].read_all()[0].generated_ids)

    differ = []
    for count in range(0, 120, 4):
        user = " ".join(WORDS[index % len(WORDS)] for index in range(count)) or "hi"
        messages = [{"role": "system", "content": "You are a helpful assistant who answers briefly."}]
        prompt = tokenizer.apply_chat_template([*messages, {"role": "user", "content": user}], True)
        alone = finish(reference, add(reference, prompt, sample=False))
        sampled = add(pipe, prompt, sample=True)
        pipe.step()
        if finish(pipe, sampled, add(pipe, prompt, sample=False)) != alone:
            differ.append(len(tokenizer.encode(prompt, add_special_tokens=False).input_ids.data[0]))
    print(f"greedy output differs for {len(differ)} of 30 prompts (prompt tokens: {differ})")


if __name__ == "__main__":
    main()
