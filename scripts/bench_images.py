#!/usr/bin/env python3
"""Image generation, seconds per image: ovserve, the raw ``Text2ImagePipeline`` and diffusers, on the same weights.

The model is ``bench-sd15-lcm`` (``make_demo_models.py --benchmark_images``, built if absent): a
latent-consistency model at Stable Diffusion 1.5's size with random weights, an fp16 IR, and in its
``diffusers/`` subdirectory the same weights (fp16 values) as a float32 diffusers checkpoint. Every
image is ``--size`` (512) square, ``--steps`` (4) denoising steps, guidance ``--guidance_scale`` (8.5,
LCM's default), n=1, the same prompt. Guidance means the same on every side: an LCM UNet takes the
guidance as an input embedding of ``guidance_scale - 1`` (``time_cond_proj_dim``) and there is no
classifier-free guidance (diffusers' ``LatentConsistencyModelPipeline.do_classifier_free_guidance`` is
False; openvino_genai's UNet turns CFG off when ``time_cond_proj_dim`` is set): one UNet evaluation
per step at batch 1 everywhere.

Sides, each at 1 request and at ``--clients`` (4) requests at once:

  ovserve          ``POST /v3/images/generations`` (b64_json png, ``num_inference_steps``, ``guidance_scale``,
                   ``rng_seed`` in the JSON) from N concurrent clients to ``ovserve serve --task image_generation``:
                   one engine process, one request at a time, the others queued
  openvino_genai   ``Text2ImagePipeline(dir, "CPU").generate`` in a child process; N requests go through the one
                   pipeline one after the other (two threads in one pipeline's generate are unsafe)
  openvino_genai   two ``Text2ImagePipeline`` in one child process, one thread each, each taking N/2 requests:
  x2 pipelines     the other answer to "several pipelines, or one with a queue?" (its RSS is the price)
  diffusers        ``LatentConsistencyModelPipeline`` on the float32 checkpoint, torch on ``--torch_threads`` (the
                   machine's cores), in a child process with ``OMP_WAIT_POLICY=PASSIVE`` (see scripts/bench_audio.py:
                   spinning OpenMP threads cost torch 2-3x on a shared machine); N requests are one call with N
                   prompts (diffusers' way to serve several: a batch)

A request's latency runs from the moment all N were sent to its image; seconds per image = the
run's wall time / N. Figures per (side, N): mean, p50 and max over ``--rounds`` (3) of seconds per
image, the requests' latency p50 and max, CPU seconds per image (the side's process: for ovserve its
engine), and the ratio to the raw pipeline's mean at the same N. Memory: VmRSS after warm-up and at
the end, and VmHWM (peak), of ovserve's engine and server and of each child process.

The sides run in groups, one group's processes alive at a time (each holds ~2-4 GB): ovserve with
the raw pipeline (their rounds alternate, the order rotated round by round, so the neighbours' load
on a shared machine falls on both alike), then the two pipelines, then diffusers. Each side makes
one untimed image first. Two cross-checks: ovserve's image and the raw pipeline's for the same
``rng_seed`` (equal if the server adds nothing); the raw pipeline's with ``TorchGenerator(seed)``
against diffusers' with ``torch.Generator().manual_seed(seed)`` (the same initial noise: close if the
weights and the scheduler are the same). With ``--max_load``, the run first waits up to
``--load_wait`` s for the 1-minute load average to drop below it; the load before and after is in the JSON.

    python scripts/bench_images.py --out docs/benchmarks/2026-11-28-images.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmarks.report import machine_info  # noqa: E402
from scripts.benchmarks.server import MODEL_NAME, client_session, start_server  # noqa: E402
from scripts.demo_models.bench_image import CHECKPOINT_SUBDIR  # noqa: E402
from scripts.make_demo_models import build_benchmark_images  # noqa: E402

PROMPT = "a photograph of an astronaut riding a horse on the moon, highly detailed"
WARM_UP_SEED = 7
# Four queued 512 x 512 images on a busy machine may take longer than the default 600 s.
SERVER_ARGS = "--task image_generation --request_timeout 7200"


@dataclass(frozen=True)
class Ask:
    """What every side draws: one ``size`` x ``size`` image of ``prompt`` in ``steps`` steps at ``guidance_scale``."""

    size: int
    steps: int
    guidance_scale: float
    prompt: str = PROMPT


@dataclass
class Run:
    latencies: list[float]  # each request's, from the moment the run's N requests were sent
    wall: float
    cpu_s: float | None  # CPU seconds of the side's process during the run
    load_1min: float = 0.0
    image: np.ndarray | None = None  # the first request's, uint8 [H, W, 3]: the cross-checks (not in the JSON)


@dataclass
class Side:
    name: str
    note: str
    clients: tuple[int, ...]
    run: Callable[[int, int, bool], Run]  # (requests, first seed, torch-style noise) -> Run
    memory: Callable[[], dict[str, dict[str, float]]]  # process -> {VmRSS, VmHWM} in MB
    load_s: float
    warm_up: int = 1  # requests of the untimed run: one per pipeline
    runs: dict[int, list[Run]] = field(default_factory=dict)
    rss: dict[str, Any] = field(default_factory=dict)
    first: np.ndarray | None = None  # the warm-up image


# -- processes -------------------------------------------------------------------------------


def process_memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of ``pid`` in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {name: int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM")}


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid``, every thread."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def largest_descendant(pid: int) -> int:
    """The descendant of ``pid`` with the largest RSS: the server's engine process."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue  # ended meanwhile
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    if not found:
        raise RuntimeError(f"process {pid} has no engine process")
    return max(found, key=lambda child: process_memory(child)["VmRSS"])


# -- ovserve ---------------------------------------------------------------------------------


async def _request(session: Any, url: str, ask: Ask, seed: int, started: float) -> tuple[float, bytes]:
    body = {
        "model": MODEL_NAME, "prompt": ask.prompt, "size": f"{ask.size}x{ask.size}", "n": 1,
        "response_format": "b64_json", "output_format": "png", "num_inference_steps": ask.steps,
        "guidance_scale": ask.guidance_scale, "rng_seed": seed,
    }  # fmt: skip
    async with session.post(f"{url}/v3/images/generations", json=body) as response:
        text = await response.text()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {text[:500]}")
    return time.perf_counter() - started, base64.b64decode(json.loads(text)["data"][0]["b64_json"])


@contextmanager
def ovserve_side(model_dir: Path, port: int, ask: Ask, clients: tuple[int, ...]) -> Iterator[Side]:
    from PIL import Image

    started = time.perf_counter()
    server = start_server(model_dir, port, SERVER_ARGS)
    load_s = time.perf_counter() - started
    url = f"http://127.0.0.1:{port}"
    engine = largest_descendant(server.pid)

    async def clients_at_once(count: int, seed: int) -> tuple[list[tuple[float, bytes]], float]:
        async with client_session() as session:
            begin = time.perf_counter()
            answers = await asyncio.gather(*(_request(session, url, ask, seed + i, begin) for i in range(count)))
            return answers, time.perf_counter() - begin

    def run(count: int, seed: int, torch_noise: bool) -> Run:
        assert not torch_noise, "the server draws its noise with rng_seed"
        cpu = process_cpu_seconds(engine)
        answers, wall = asyncio.run(clients_at_once(count, seed))
        image = np.asarray(Image.open(io.BytesIO(answers[0][1])).convert("RGB"))
        return Run([latency for latency, _ in answers], wall, process_cpu_seconds(engine) - cpu, image=image)

    def memory() -> dict[str, dict[str, float]]:
        return {"engine": process_memory(engine), "server": process_memory(server.pid)}

    try:
        yield Side("ovserve", f"ovserve serve {SERVER_ARGS}", clients, run, memory, load_s)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# -- in a child process: the raw pipeline(s), diffusers ------------------------------------------

Runner = Callable[[int, int, bool], Run]


def genai_runner(model_dir: Path, ask: Ask, pipelines: int) -> tuple[str, Runner]:
    import openvino_genai as ov_genai

    pipes = [ov_genai.Text2ImagePipeline(str(model_dir), "CPU") for _ in range(pipelines)]

    def generate(pipe: Any, seed: int, torch_noise: bool) -> np.ndarray:
        noise: dict[str, Any] = {"generator": ov_genai.TorchGenerator(seed)} if torch_noise else {"rng_seed": seed}
        result = pipe.generate(
            ask.prompt, width=ask.size, height=ask.size, num_inference_steps=ask.steps,
            guidance_scale=ask.guidance_scale, num_images_per_prompt=1, **noise,
        )  # fmt: skip
        return np.array(result.data[0])  # a copy: the result is the VAE's output buffer, reused by the next call

    def run(count: int, seed: int, torch_noise: bool) -> Run:
        # Request i goes to pipeline i % pipelines; each pipeline takes its share one after the other.
        shares = [[seed + i for i in range(start, count, len(pipes))] for start in range(len(pipes))]
        latencies: dict[int, float] = {}
        images: dict[int, np.ndarray] = {}
        cpu = time.process_time()
        begin = time.perf_counter()

        def serve(pipe: Any, seeds: list[int]) -> None:
            for one in seeds:
                images[one] = generate(pipe, one, torch_noise)
                latencies[one] = time.perf_counter() - begin

        with ThreadPoolExecutor(len(pipes)) as pool:
            list(pool.map(serve, pipes, shares))
        wall = time.perf_counter() - begin
        ordered = [latencies[seed + i] for i in range(count)]
        return Run(ordered, wall, time.process_time() - cpu, image=images[seed])

    return f"openvino_genai {ov_genai.get_version()}, {pipelines} Text2ImagePipeline", run


def diffusers_runner(checkpoint: Path, ask: Ask, threads: int) -> tuple[str, Runner]:
    import diffusers
    import torch
    from diffusers import LatentConsistencyModelPipeline
    from diffusers.utils import logging as diffusers_logging

    torch.set_num_threads(threads)
    # Its notes (no accelerate: weights loaded the plain way) and loading bars would drown the progress lines.
    diffusers_logging.set_verbosity_error()
    diffusers_logging.disable_progress_bar()
    pipe: Any = LatentConsistencyModelPipeline.from_pretrained(str(checkpoint), torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)

    def run(count: int, seed: int, torch_noise: bool) -> Run:
        generators = [torch.Generator().manual_seed(seed + i) for i in range(count)]
        cpu = time.process_time()
        begin = time.perf_counter()
        output = pipe(
            [ask.prompt] * count, width=ask.size, height=ask.size, num_inference_steps=ask.steps,
            guidance_scale=ask.guidance_scale, generator=generators[0] if count == 1 else generators, output_type="np",
        )  # fmt: skip
        wall = time.perf_counter() - begin
        image = (np.asarray(output.images[0]) * 255).round().clip(0, 255).astype(np.uint8)
        # One call returns every image at its end: each request's latency is the call's.
        return Run([wall] * count, wall, time.process_time() - cpu, image=image)

    note = f"diffusers {diffusers.__version__}, torch {torch.__version__} float32, {torch.get_num_threads()} threads"
    return note, run


RUNNERS: dict[str, Callable[..., tuple[str, Runner]]] = {"genai": genai_runner, "diffusers": diffusers_runner}


def _worker(connection: Connection, kind: str, args: tuple[Any, ...]) -> None:
    started = time.perf_counter()
    note, run = RUNNERS[kind](*args)
    connection.send((note, time.perf_counter() - started))
    while (request := connection.recv()) is not None:
        connection.send(run(*request))


@contextmanager
def child_side(name: str, clients: tuple[int, ...], warm_up: int, kind: str, *args: Any) -> Iterator[Side]:
    """A side whose runner (``RUNNERS[kind](*args)``) lives in a child process of its own: its RSS is
    its own, and torch's OpenMP threads stay apart from OpenVINO's. The child's OpenMP threads sleep
    when idle (OMP_WAIT_POLICY=PASSIVE, read once when the child loads libgomp)."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    saved = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        process = context.Process(target=_worker, args=(child, kind, args), daemon=True)
        process.start()
    finally:
        os.environ.pop("OMP_WAIT_POLICY")
        if saved is not None:
            os.environ["OMP_WAIT_POLICY"] = saved
    assert process.pid is not None

    def run(count: int, seed: int, torch_noise: bool) -> Run:
        parent.send((count, seed, torch_noise))
        result: Run = parent.recv()
        return result

    try:
        note, load_s = parent.recv()
        pid = process.pid
        yield Side(name, note, clients, run, lambda: {"process": process_memory(pid)}, load_s, warm_up)
    finally:
        parent.send(None)
        process.join(timeout=120)
        if process.is_alive():
            process.kill()


# -- the run ---------------------------------------------------------------------------------


def measure(sides: list[Side], rounds: int) -> None:
    """Warm-up, then ``rounds`` rounds of every (side, N), the order rotated round by round."""
    for side in sides:
        started = time.perf_counter()
        # The raw pipeline and diffusers draw the same torch-style noise here: the second cross-check.
        torch_noise = side.name in ("openvino_genai", "diffusers")
        warm = side.run(side.warm_up, WARM_UP_SEED, torch_noise)
        side.first = warm.image
        side.rss["after_warm_up"] = side.memory()
        print(f"warm-up {side.name}: {time.perf_counter() - started:.1f} s", flush=True)
    entries = [(side, count) for side in sides for count in side.clients]
    for index in range(rounds):
        shift = index % len(entries)
        for side, count in entries[shift:] + entries[:shift]:
            run = side.run(count, 1000 * (index + 1), False)
            run.load_1min = os.getloadavg()[0]
            side.runs.setdefault(count, []).append(run)
            print(f"#{index + 1} {side.name} x{count}: wall {run.wall:.1f} s, {run.wall / count:.1f} s/image, "
                  f"load {run.load_1min:.1f}", flush=True)  # fmt: skip
    for side in sides:
        side.rss["end"] = side.memory()


def image_difference(a: np.ndarray | None, b: np.ndarray | None) -> dict[str, float] | None:
    if a is None or b is None or a.shape != b.shape:
        return None
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return {"mean_abs": float(diff.mean()), "max_abs": float(diff.max()), "equal_pixels": float((diff == 0).mean())}


def summarize(side: Side, count: int, raw_mean: float | None) -> dict[str, Any]:
    runs = side.runs[count]
    per_image = [run.wall / count for run in runs]
    latencies = [latency for run in runs for latency in run.latencies]
    cpu = [run.cpu_s / count for run in runs if run.cpu_s is not None]
    mean = statistics.mean(per_image)
    return {
        "side": side.name,
        "requests_at_once": count,
        "note": side.note,
        "s_per_image": {"mean": mean, "p50": statistics.median(per_image), "max": max(per_image)},
        "latency_s": {"p50": statistics.median(latencies), "max": max(latencies)},
        "cpu_s_per_image": statistics.median(cpu) if cpu else None,
        "ratio_to_raw": mean / raw_mean if raw_mean else None,
        "max_load_1min": max(run.load_1min for run in runs),
        "load_s": side.load_s,
        "rss_mb": side.rss,
        "runs": [
            {"latencies": run.latencies, "wall": run.wall, "cpu_s": run.cpu_s, "load_1min": run.load_1min}
            for run in runs
        ],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| side | requests at once | s / image mean | p50 | max | latency p50 / max s | CPU s / image "
        "| / raw | RSS MB (peak) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        per, latency = row["s_per_image"], row["latency_s"]
        ratio = f"{row['ratio_to_raw']:.2f}" if row["ratio_to_raw"] else "–"
        cpu = f"{row['cpu_s_per_image']:.0f}" if row["cpu_s_per_image"] is not None else "–"
        memory = row["rss_mb"]["end"]
        rss = ", ".join(f"{name} {m['VmRSS']:.0f} ({m['VmHWM']:.0f})" for name, m in memory.items())
        lines.append(
            f"| {row['side']} | {row['requests_at_once']} | {per['mean']:.1f} | {per['p50']:.1f} | {per['max']:.1f} "
            f"| {latency['p50']:.0f} / {latency['max']:.0f} | {cpu} | {ratio} | {rss} |"
        )
    return "\n".join(lines)


def wait_for_load(limit: float | None, patience: float) -> dict[str, Any]:
    """Wait up to ``patience`` s for the 1-minute load average to drop below ``limit``."""
    before = os.getloadavg()[0]
    started = time.monotonic()
    while limit is not None and os.getloadavg()[0] > limit and time.monotonic() - started < patience:
        time.sleep(15)
    load = os.getloadavg()[0]
    return {"limit": limit, "before_wait": before, "waited_s": time.monotonic() - started, "at_start": load,
            "dropped_below_limit": limit is None or load <= limit}  # fmt: skip


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_path", type=Path, help="an LCM IR directory, its diffusers checkpoint in diffusers/")
    parser.add_argument("--models_dir", type=Path, default=ROOT / "models")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--guidance_scale", type=float, default=8.5, help="LCM's default (an embedding, not CFG)")
    parser.add_argument("--clients", type=int, default=4, help="requests at once (besides 1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=8795)
    parser.add_argument("--torch_threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", nargs="+", choices=["ovserve", "openvino_genai", "pipelines", "diffusers"])
    parser.add_argument("--max_load", type=float, help="first wait for the 1-minute load average to drop below this")
    parser.add_argument("--load_wait", type=float, default=600.0, help="longest wait for --max_load (s)")
    parser.add_argument("--out", type=Path, help="write the figures and every run as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model_dir = (args.model_path or build_benchmark_images(args.models_dir)).resolve()
    ask = Ask(args.size, args.steps, args.guidance_scale)
    wanted = set(args.only or ["ovserve", "openvino_genai", "pipelines", "diffusers"])
    several = (1, args.clients) if args.clients > 1 else (1,)
    load = wait_for_load(args.max_load, args.load_wait)
    uptime_start = _uptime()
    print(f"model {model_dir}; {ask}; load {load}; uptime: {uptime_start}", flush=True)

    # Groups of sides alive at once (see the module doc); each group's processes end before the next starts.
    checkpoint = model_dir / CHECKPOINT_SUBDIR
    makers: dict[str, Callable[[], Any]] = {
        "ovserve": lambda: ovserve_side(model_dir, args.port, ask, several),
        "openvino_genai": lambda: child_side("openvino_genai", several, 1, "genai", model_dir, ask, 1),
        "pipelines": lambda: child_side("openvino_genai x2 pipelines", several[-1:], 2, "genai", model_dir, ask, 2),
        "diffusers": lambda: child_side("diffusers", several, 1, "diffusers", checkpoint, ask, args.torch_threads),
    }
    measured: list[Side] = []
    for group in (["ovserve", "openvino_genai"], ["pipelines"], ["diffusers"]):
        if not wanted.intersection(group):
            continue
        with ExitStack() as stack:
            sides = [stack.enter_context(makers[name]()) for name in group if name in wanted]
            measure(sides, args.rounds)
            measured += sides

    by_name = {side.name: side for side in measured}
    raw = by_name.get("openvino_genai")
    raw_means = {
        count: statistics.mean(run.wall / count for run in runs) for count, runs in (raw.runs if raw else {}).items()
    }
    rows = [summarize(side, count, raw_means.get(count)) for side in measured for count in side.clients]
    served, diffused = by_name.get("ovserve"), by_name.get("diffusers")
    checks = {
        "ovserve_vs_raw_same_rng_seed": image_difference(
            served.runs[1][0].image if served else None, raw.runs[1][0].image if raw else None
        ),
        "raw_vs_diffusers_same_torch_noise": image_difference(
            raw.first if raw else None, diffused.first if diffused else None
        ),
    }
    uptime_end = _uptime()
    print("\n" + markdown(rows))
    print(f"\ncross-checks (pixel differences, 0-255): {json.dumps(checks)}")
    print(f"uptime before: {uptime_start}\nuptime after:  {uptime_end}")
    if args.out is not None:
        report = {
            "machine": machine_info(),
            "settings": {
                "model": str(model_dir),
                "prompt": ask.prompt,
                "size": ask.size,
                "steps": ask.steps,
                "guidance_scale": ask.guidance_scale,
                "clients": args.clients,
                "rounds": args.rounds,
                "torch_threads": args.torch_threads,
                "server_args": SERVER_ARGS,
            },
            "load": load,
            "uptime": {"start": uptime_start, "end": uptime_end},
            "cross_checks": checks,
            "results": rows,
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
