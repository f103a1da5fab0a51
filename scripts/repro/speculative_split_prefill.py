"""Speculative decoding: a prompt prefilled across several steps while another request runs gets
a wrong first token (greedy).

Versions: openvino 2026.4.1, openvino-genai 2026.4.1.0 (2026.4.1.0-3408-ab01d1771e4), CPU,
Python 3.11, x86-64. Models: ovserve's demo models (``python scripts/make_demo_models.py``:
``tiny-llm`` main, ``tiny-draft`` draft, random Qwen2 models with one tokenizer); the draft being
the main model itself fails the same way.

Steps: a ``ContinuousBatchingPipeline`` with a ``draft_model``, the default ``SchedulerConfig``
(``dynamic_split_fuse`` on, ``max_num_batched_tokens`` 256, prefix caching off); add a 30-token
request and a 700-token request, both greedy (``num_assistant_tokens`` 5, ``ignore_eos``);
``step()`` until both finish. Compare each output with the same pipeline without a draft model.

Expected: both outputs equal the plain pipeline's (greedy speculative decoding is exact), as
they do when the long request runs alone, or with ``dynamic_split_fuse`` off.

Actual: the long request's first step with output delivers two tokens, the first of which the
main model never chose; everything after it differs. Observed whenever a prompt's prefill spans
several steps while another sequence is generating (e.g. the 16th of 16 concurrent 30-token
requests); the main and the draft pipelines seem to split the prompt at different points. The
same requests with ``dynamic_split_fuse = False`` (and ``max_num_batched_tokens`` >= the prompt)
match. Related: openvinotoolkit/openvino.genai#3812 aligned prompt chunks for EAGLE3 only.

    python scripts/repro/speculative_split_prefill.py [--models models] [--dynamic_split_fuse false]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def main() -> None:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    parser = argparse.ArgumentParser(description="speculative decoding: a split prefill gets a wrong first token")
    parser.add_argument("--models", type=Path, default=Path("models"), help="holds tiny-llm and tiny-draft")
    parser.add_argument("--dynamic_split_fuse", default="true", choices=["true", "false"])
    args = parser.parse_args()

    def scheduler() -> Any:
        config = ov_genai.SchedulerConfig()
        config.dynamic_split_fuse = args.dynamic_split_fuse == "true"
        config.max_num_batched_tokens = 256 if config.dynamic_split_fuse else 1024
        return config

    def generate(pipe: Any, prompts: list[list[int]], speculative: bool) -> list[list[int]]:
        handles = []
        for request_id, prompt in enumerate(prompts):
            config = pipe.get_config()
            config.max_new_tokens = 12
            config.do_sample = False
            config.ignore_eos = True
            # A drafting pipeline's get_config() lacks generation_config.json's values: set both alike.
            config.repetition_penalty = 1.0
            if speculative:
                config.num_assistant_tokens = 5
            handles.append(pipe.add_request(request_id, ov.Tensor(np.array([prompt], dtype=np.int64)), config))
        while pipe.has_non_finished_requests():
            pipe.step()
        return [list(handle.read_all()[0].generated_ids) for handle in handles]

    main_model = str(args.models / "tiny-llm")
    plain = ov_genai.ContinuousBatchingPipeline(main_model, scheduler(), "CPU")
    draft = ov_genai.draft_model(str(args.models / "tiny-draft"), "CPU", scheduler_config=scheduler())
    speculative = ov_genai.ContinuousBatchingPipeline(main_model, scheduler(), "CPU", {"draft_model": draft})
    short = [(11 * index + 5) % 3000 + 10 for index in range(30)]
    long = [(5 * index + 2) % 3000 + 10 for index in range(700)]
    expected = [generate(plain, [prompt], False)[0] for prompt in (short, long)]
    actual = generate(speculative, [short, long], True)
    for name, want, got in zip(("30-token", "700-token"), expected, actual, strict=True):
        print(f"{name} request: {'same as' if want == got else 'DIFFERS from'} the plain pipeline")
        if want != got:
            print(f"  plain:       {want}\n  speculative: {got}")


if __name__ == "__main__":
    main()
