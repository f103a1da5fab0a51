"""Soak the raw ContinuousBatchingPipeline: is the engine's RSS growth its KV cache or a leak?

Keeps ``--streams`` requests running (each a fresh prompt, ``--max_tokens`` tokens, ignore_eos)
for ``--minutes`` through the same step()/read() loop the engine process runs, and prints every
``--every`` seconds: process RSS, the pipeline's KV-cache size (``get_metrics()``), and RSS minus
the cache. A leak shows as "RSS minus cache" growing; a cache growing to its working size shows as
both growing together and levelling off. Run it with ``--cache_size 0`` (grow on demand, the
default) and with a fixed size (pre-allocated) to compare.

``--varied`` gives every request a random prompt (5 to ``--max_prompt`` token ids) and a random
``max_new_tokens`` (1 to ``--max_tokens``): the steps then see ever new input shapes, and the CPU
plugin's per-shape JIT kernels show as "RSS minus cache" growing to its bound. The pipeline gets
the engine's kernel-cache bounds (``ovserve.engine.memory.bound_kernel_caches``) unless
``--openvino_defaults``:

    python scripts/soak_engine.py --model models/tiny-llm --minutes 3
    python scripts/soak_engine.py --varied --minutes 2                       # flat after warm-up
    python scripts/soak_engine.py --varied --minutes 2 --openvino_defaults   # grows for minutes
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import random
import time
from pathlib import Path


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("models/tiny-llm"))
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--max_tokens", type=int, default=1500)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--every", type=float, default=15.0)
    parser.add_argument("--cache_size", type=int, default=0, help="KV cache GB; 0 grows on demand")
    parser.add_argument("--plugin_config", default="{}", help="JSON properties for the pipeline (as --plugin_config)")
    parser.add_argument(
        "--trim", action="store_true", help="malloc_trim(0) before each report: freed-but-kept memory is not counted"
    )
    parser.add_argument("--varied", action="store_true", help="random prompt and output lengths (new shapes)")
    parser.add_argument("--max_prompt", type=int, default=600, help="with --varied: longest prompt (tokens)")
    parser.add_argument(
        "--openvino_defaults", action="store_true", help="without the engine's bounds on the CPU plugin's kernel caches"
    )
    args = parser.parse_args()

    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    from ovserve.engine.memory import bound_kernel_caches, pin_malloc_thresholds

    pin_malloc_thresholds()  # as the engine process does
    properties = json.loads(args.plugin_config)
    if not args.openvino_defaults:
        properties = bound_kernel_caches("CPU", properties)

    scheduler = ov_genai.SchedulerConfig()
    scheduler.cache_size = args.cache_size
    scheduler.max_num_batched_tokens = 256
    scheduler.dynamic_split_fuse = True
    pipe = ov_genai.ContinuousBatchingPipeline(str(args.model), scheduler, "CPU", properties)
    tokenizer = pipe.get_tokenizer()
    config = pipe.get_config()
    config.max_new_tokens = args.max_tokens
    config.ignore_eos = True
    config.do_sample = False
    config.apply_chat_template = False
    ids = itertools.count()
    rng = random.Random(0)
    vocab = json.loads((args.model / "config.json").read_text()).get("vocab_size", 1000)
    active: dict[int, object] = {}
    finished = 0
    started = time.monotonic()
    next_report = started
    print("seconds  finished  rss_mb  kv_cache_mb  rss_minus_cache_mb")
    while time.monotonic() - started < args.minutes * 60:
        while len(active) < args.streams:
            request_id = next(ids)
            if args.varied:
                length = rng.randint(5, args.max_prompt)
                prompt = ov.Tensor(np.array([[rng.randrange(vocab) for _ in range(length)]], dtype=np.int64))
                config.max_new_tokens = rng.randint(1, args.max_tokens)
            else:
                text = f"Request {request_id}: tell me everything about the number {request_id}."
                prompt = tokenizer.encode(text).input_ids
            active[request_id] = pipe.add_request(request_id, prompt, config)
        pipe.step()
        for request_id, handle in list(active.items()):
            while handle.can_read():  # type: ignore[attr-defined]
                handle.read()  # type: ignore[attr-defined]
            if handle.get_status().name != "RUNNING":  # type: ignore[attr-defined]
                del active[request_id]
                finished += 1
        now = time.monotonic()
        if now >= next_report:
            if args.trim:
                ctypes.CDLL("libc.so.6").malloc_trim(0)
            cache_mb = pipe.get_metrics().kv_cache_size_in_bytes / 2**20
            rss = _rss_mb()
            print(
                f"{now - started:7.0f}  {finished:8d}  {rss:6.0f}  {cache_mb:11.1f}  {rss - cache_mb:18.0f}", flush=True
            )
            next_report = now + args.every


if __name__ == "__main__":
    main()
