"""Speculative decoding + prefix caching: a sampled request fails ``step()``.

Versions: openvino 2026.4.1, openvino-genai 2026.4.1.0 (2026.4.1.0-3408-ab01d1771e4), CPU,
Python 3.11, x86-64. Models: any main/draft pair; measured with ovserve's demo models (random
Qwen2 models, ``python scripts/make_demo_models.py``: ``tiny-llm`` 2 layers, ``tiny-draft`` 1
layer, same tokenizer).

Steps: build a ``ContinuousBatchingPipeline`` with a ``draft_model`` and
``SchedulerConfig.enable_prefix_caching = True``; add one request with ``do_sample=True``
(temperature 0.7) and ``num_assistant_tokens`` (any; 1 fails almost every request); ``step()``
until it finishes. Repeat with other seeds, on a fresh pipeline or not.

Expected: every request finishes, as with greedy decoding, with prefix caching off, or with a
plain (non-speculative) pipeline.

Actual: most requests (15 of 20 with num_assistant_tokens 5, 12 new tokens) make ``step()`` raise
``Check 'content_length <= prompt_ids.size() + m_generated_ids.size()' failed at
src/cpp/src/sequence_group.cpp:32`` -- the first request of a fresh pipeline included, so no
prefix-cache hit is needed; the prompt's length does not matter (5 to 60 tokens, block-aligned or
not). The failing request then stays RUNNING. Greedy requests never fail; prefix caching on the
draft's scheduler alone never fails; the main model's is what matters. Same crash as
openvinotoolkit/openvino.genai#4190 (its analysis: after a rejected *last* draft candidate the
non-greedy path leaves ``m_num_processed_tokens`` one ahead of the sequence's tokens, and the
prefix cache's block hashing asserts on it). That issue also reports that, with prefix caching
off, the sampled text itself is wrong; here ``do_sample`` with ``top_k=1`` (which must equal
greedy decoding) gives the draft model's tokens rather than the main model's greedy ones.

ovserve's workaround: prefix caching is off for speculative pipelines (``ovserve/settings/schema.py``).

    python scripts/repro/speculative_prefix_cache.py [--models models] [--prefix_caching false]
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    parser = argparse.ArgumentParser(description="speculative decoding + prefix caching: sampled requests fail")
    parser.add_argument("--models", type=Path, default=Path("models"), help="holds tiny-llm and tiny-draft")
    parser.add_argument("--prefix_caching", default="true", choices=["true", "false"])
    parser.add_argument("--greedy", action="store_true", help="do_sample=False instead")
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()

    def scheduler() -> ov_genai.SchedulerConfig:
        config = ov_genai.SchedulerConfig()
        config.cache_size = 1
        config.enable_prefix_caching = args.prefix_caching == "true"
        return config

    draft = ov_genai.draft_model(str(args.models / "tiny-draft"), "CPU", scheduler_config=scheduler())
    main_model = str(args.models / "tiny-llm")
    pipe = ov_genai.ContinuousBatchingPipeline(main_model, scheduler(), "CPU", {"draft_model": draft})
    failed = 0
    for request_id in range(args.requests):
        config = pipe.get_config()
        config.max_new_tokens = 12
        config.num_assistant_tokens = 5
        config.do_sample = not args.greedy
        config.temperature = 0.7
        config.rng_seed = request_id
        prompt = ov.Tensor(np.array([[10 + request_id, 11, 12, 13, 14]], dtype=np.int64))
        handle = pipe.add_request(request_id, prompt, config)
        try:
            while pipe.has_non_finished_requests():
                pipe.step()
        except RuntimeError as exc:
            failed += 1
            print(f"request {request_id}: step() failed: {str(exc).splitlines()[0]}")
            handle.cancel()  # the failed request would otherwise stay RUNNING
            for _ in range(2):
                pipe.step()
        else:
            handle.read_all()
    print(f"{failed} of {args.requests} requests failed")


if __name__ == "__main__":
    main()
