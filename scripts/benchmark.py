#!/usr/bin/env python3
"""Server vs. raw pipeline, side by side in one run.

Builds (offline, cached) a random model with the Qwen2.5-0.5B shape at int8, then for each
concurrency level drives (a) the ContinuousBatchingPipeline directly, in this process, and
(b) ``ovserve serve`` over HTTP with N concurrent streaming requests. Both get the same token
ids (the prompt the server renders from the same chat template), 128 output tokens with
ignore_eos and greedy decoding. Prints aggregate output tokens/s, TTFT and inter-token latency
percentiles for both, their ratio, and the server's event-loop lag p99 while it was busy.

    .venv/bin/python scripts/benchmark.py --concurrency 1 4 8 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ovserve.config import ModelSettings  # noqa: E402
from ovserve.engine.spec import EngineSpec, SchedulerSettings  # noqa: E402
from ovserve.loop_lag import BUCKETS  # noqa: E402
from ovserve.service.models import ServedModel  # noqa: E402
from scripts.make_demo_models import build_benchmark_model  # noqa: E402

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "judge",
    "boxing",
    "matches",
]


@dataclass
class RunResult:
    wall_s: float
    tokens: int
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def make_messages(index: int, model: ServedModel, prompt_tokens: int) -> tuple[list[dict], list[int]]:
    """A distinct user message whose templated prompt is as close to ``prompt_tokens`` as words allow."""

    def attempt(count: int) -> tuple[list[dict], list[int]]:
        words = [WORDS[(index * 7 + i) % len(WORDS)] for i in range(count)]
        messages = [{"role": "user", "content": f"Request {index}: " + " ".join(words)}]
        prompt = model.render_chat(messages, None, None)
        return messages, model.tokenizer.encode_blocking(prompt, add_special_tokens=False)

    low, high = 1, prompt_tokens  # a word is at least one token: the answer lies in between
    while low < high:
        middle = (low + high + 1) // 2
        if len(attempt(middle)[1]) <= prompt_tokens:
            low = middle
        else:
            high = middle - 1
    return attempt(low)


# -- (a) the raw pipeline -------------------------------------------------------------------------


def run_raw(model_dir: Path, scheduler: SchedulerSettings, prompts: list[list[int]], max_tokens: int) -> RunResult:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    from ovserve.engine.worker import build_pipeline

    pipe = build_pipeline(EngineSpec(name="raw", model_path=model_dir, scheduler=scheduler))
    cfg = pipe.get_config()
    cfg.max_new_tokens = max_tokens
    cfg.ignore_eos = True
    cfg.do_sample = False
    cfg.apply_chat_template = False

    def one_round(batch: list[list[int]], base_id: int) -> RunResult:
        start = time.perf_counter()
        handles = [
            pipe.add_request(base_id + i, ov.Tensor(np.array([ids], dtype=np.int64)), cfg)
            for i, ids in enumerate(batch)
        ]
        last_seen: list[float | None] = [None] * len(handles)
        result = RunResult(wall_s=0.0, tokens=0)
        while any(h.get_status() == ov_genai.GenerationStatus.RUNNING for h in handles) or any(
            h.can_read() for h in handles
        ):
            pipe.step()
            now = time.perf_counter()
            for i, handle in enumerate(handles):
                if not handle.can_read():
                    continue
                new = sum(len(out.generated_ids) for out in handle.read().values())
                if new == 0:
                    continue
                result.tokens += new
                previous = last_seen[i]
                if previous is None:
                    result.ttft_s.append(now - start)
                else:
                    result.itl_s.extend([(now - previous) / new] * new)
                last_seen[i] = now
        result.wall_s = time.perf_counter() - start
        return result

    one_round(prompts[:1], 10**6)  # warm-up: compile, allocate the KV cache
    # The pipeline (and its KV cache) is released when this function returns.
    return one_round(prompts, 0)


# -- (b) the server -------------------------------------------------------------------------------


async def stream_one(session: aiohttp.ClientSession, url: str, messages: list[dict], max_tokens: int) -> RunResult:
    body = {
        "model": "bench",
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    result = RunResult(wall_s=0.0, tokens=0)
    previous: float | None = None
    async with session.post(f"{url}/v3/chat/completions", json=body) as response:
        response.raise_for_status()
        async for raw_line in response.content:
            line = raw_line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                result.tokens = chunk["usage"]["completion_tokens"]
            if not chunk["choices"] or not chunk["choices"][0]["delta"].get("content"):
                continue
            now = time.perf_counter()
            if previous is None:
                result.ttft_s.append(now - start)
            else:
                result.itl_s.append(now - previous)
            previous = now
    result.wall_s = time.perf_counter() - start
    return result


def lag_histogram(metrics_text: str) -> list[int]:
    counts = []
    for line in metrics_text.splitlines():
        if line.startswith("ovserve_event_loop_lag_seconds_bucket"):
            counts.append(int(float(line.rsplit(" ", 1)[1])))
    return counts


def lag_p99(before: list[int], after: list[int]) -> str:
    diff = [a - b for a, b in zip(after, before, strict=True)]
    total = diff[-1]
    if total == 0:
        return "n/a"
    for bound, cumulative in zip((*BUCKETS, float("inf")), diff, strict=True):
        if cumulative >= 0.99 * total:
            return f"<= {bound * 1000:g} ms"
    return "> 1 s"


async def run_server_level(url: str, conversations: list[list[dict]], max_tokens: int) -> tuple[RunResult, str]:
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await stream_one(session, url, conversations[0], 8)  # warm-up
        async with session.get(f"{url}/metrics") as response:
            before = lag_histogram(await response.text())
        start = time.perf_counter()
        results = await asyncio.gather(*(stream_one(session, url, c, max_tokens) for c in conversations))
        wall = time.perf_counter() - start
        async with session.get(f"{url}/metrics") as response:
            after = lag_histogram(await response.text())
    merged = RunResult(wall_s=wall, tokens=sum(r.tokens for r in results))
    for result in results:
        merged.ttft_s += result.ttft_s
        merged.itl_s += result.itl_s
    return merged, lag_p99(before, after)


def start_server(
    model_dir: Path, scheduler: SchedulerSettings, port: int, checkout: Path = ROOT
) -> subprocess.Popen[bytes]:
    """``ovserve serve`` from ``checkout`` (this one, or another commit's for an A/B run)."""
    args = [
        sys.executable, "-m", "ovserve", "serve", "--model_path", str(model_dir), "--model_name", "bench",
        "--host", "127.0.0.1", "--port", str(port), "--log_level", "WARNING",
        "--max_num_batched_tokens", str(scheduler.max_num_batched_tokens),
        "--max_num_seqs", str(scheduler.max_num_seqs),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    process = subprocess.Popen(args, cwd=checkout, env=env)
    import urllib.request

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("the server did not become ready")


def describe(result: RunResult) -> str:
    return (
        f"{result.tokens_per_s:8.1f} tok/s  TTFT p50 {percentile(result.ttft_s, 50) * 1000:7.1f} ms"
        f" p95 {percentile(result.ttft_s, 95) * 1000:7.1f} ms  ITL p50 {percentile(result.itl_s, 50) * 1000:6.1f} ms"
        f" p95 {percentile(result.itl_s, 95) * 1000:6.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--prompt_tokens", type=int, default=256)
    parser.add_argument("--max_tokens", type=int, default=128)
    parser.add_argument("--models_dir", type=Path, default=ROOT / "models")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--baseline_checkout",
        type=Path,
        help="another checkout (e.g. the previous commit as a git worktree): its server runs the same levels, "
        "interleaved with this one's, and the table compares the two servers instead of server vs raw",
    )
    parser.add_argument("--rounds", type=int, default=1, help="with --baseline_checkout: A/B rounds per level")
    args = parser.parse_args()

    model_dir = build_benchmark_model(args.models_dir)
    scheduler = SchedulerSettings(max_num_batched_tokens=256, max_num_seqs=256)
    served = ServedModel.load(ModelSettings(name="bench", path=model_dir))
    most = max(args.concurrency)
    prompts = [make_messages(i, served, args.prompt_tokens) for i in range(most)]
    print(f"model {model_dir}, prompts of {statistics.mean(len(ids) for _, ids in prompts):.0f} tokens, "
          f"{args.max_tokens} output tokens, greedy + ignore_eos")  # fmt: skip

    if args.baseline_checkout is not None:
        return compare_servers(args, model_dir, scheduler, [m for m, _ in prompts])
    raw = {n: run_raw(model_dir, scheduler, [ids for _, ids in prompts[:n]], args.max_tokens) for n in args.concurrency}
    server = start_server(model_dir, scheduler, args.port)
    try:
        url = f"http://127.0.0.1:{args.port}"
        served_results = {
            n: asyncio.run(run_server_level(url, [m for m, _ in prompts[:n]], args.max_tokens))
            for n in args.concurrency
        }
    finally:
        server.terminate()
        server.wait(timeout=30)

    print()
    print("| streams | raw tok/s | server tok/s | ratio | raw TTFT p50/p95 ms | server TTFT p50/p95 ms "
          "| raw ITL p50/p95 ms | server ITL p50/p95 ms | loop lag p99 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.concurrency:
        a, (b, lag) = raw[n], served_results[n]
        print(
            f"| {n} | {a.tokens_per_s:.1f} | {b.tokens_per_s:.1f} | {b.tokens_per_s / a.tokens_per_s:.2f} "
            f"| {percentile(a.ttft_s, 50) * 1e3:.0f}/{percentile(a.ttft_s, 95) * 1e3:.0f} "
            f"| {percentile(b.ttft_s, 50) * 1e3:.0f}/{percentile(b.ttft_s, 95) * 1e3:.0f} "
            f"| {percentile(a.itl_s, 50) * 1e3:.1f}/{percentile(a.itl_s, 95) * 1e3:.1f} "
            f"| {percentile(b.itl_s, 50) * 1e3:.1f}/{percentile(b.itl_s, 95) * 1e3:.1f} | {lag} |"
        )
    for n in args.concurrency:
        print(f"raw    x{n:<3}{describe(raw[n])}")
        print(f"server x{n:<3}{describe(served_results[n][0])}")
    return 0


def compare_servers(
    args: argparse.Namespace, model_dir: Path, scheduler: SchedulerSettings, conversations: list[list[dict]]
) -> int:
    """This checkout's server (B) against ``--baseline_checkout``'s (A): both up at once on two
    ports, each level run A, B, A, B... so drift (thermal, other load) hits both alike."""
    checkouts = {"baseline": args.baseline_checkout.resolve(), "this": ROOT}
    servers = {
        label: start_server(model_dir, scheduler, args.port + offset, checkout)
        for offset, (label, checkout) in enumerate(checkouts.items())
    }
    results: dict[tuple[str, int], list[float]] = {}
    try:
        for n in args.concurrency:
            for _ in range(args.rounds):
                for offset, label in enumerate(checkouts):
                    url = f"http://127.0.0.1:{args.port + offset}"
                    result, _ = asyncio.run(run_server_level(url, conversations[:n], args.max_tokens))
                    results.setdefault((label, n), []).append(result.tokens_per_s)
    finally:
        for process in servers.values():
            process.terminate()
            process.wait(timeout=30)
    print()
    print(f"baseline: {checkouts['baseline']}")
    print("| streams | baseline tok/s (median) | this tok/s (median) | ratio of medians | median paired ratio | runs |")
    print("|---|---|---|---|---|---|")
    for n in args.concurrency:
        a, b = statistics.median(results[("baseline", n)]), statistics.median(results[("this", n)])
        pairs = list(zip(results[("baseline", n)], results[("this", n)], strict=True))
        paired = statistics.median(y / x for x, y in pairs)  # each A/B pair ran back to back
        runs = ", ".join(f"{x:.1f}/{y:.1f}" for x, y in pairs)
        print(f"| {n} | {a:.1f} | {b:.1f} | {b / a:.3f} | {paired:.3f} | {runs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
