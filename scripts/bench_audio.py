#!/usr/bin/env python3
"""Speech to text, real-time factor: ovserve against transformers' ASR pipeline on the same weights.

The model is ``bench-whisper-tiny`` (``make_demo_models.py --benchmark_speech``, built if absent):
openai/whisper-tiny's size with random weights, an fp32 IR, and in its ``transformers/``
subdirectory the same weights as a transformers checkpoint. Each of its 30 s windows ends with
<|endoftext|> after 97 text tokens (``scripts/demo_models/speech.py``), as a real Whisper's window
of speech ends after its ~100, so every side decodes the same tokens per window and none is bound
by its token budget (the server's 224 per window, given to the other sides too).

The clip: ``--seconds`` (60) of speech-like synthetic sound (harmonics of a wandering pitch, a
syllable-rate envelope, pauses, a little noise) as a 16 kHz 16-bit mono WAV; the in-process sides
get exactly the samples the server decodes from it.

Sides, at 1 clip and at ``--clients`` (4) clips at once where the side can take them at once:

  ovserve         ``POST /v3/audio/transcriptions`` (json, language en, temperature 0) from N concurrent
                  clients to ``ovserve serve --task speech_to_text``, in the CPU plugin's default precision
                  and, where that is not f32 (a CPU with native bf16), on a second server with
                  ``--plugin_config '{"INFERENCE_PRECISION_HINT": "f32"}'`` (transformers runs in f32)
  openvino_genai  ``WhisperPipeline.generate`` in this process (no server), the same precisions, 1 clip:
                  the server's engine runs one transcription at a time too, so N clients queue there
  transformers    ``pipeline("automatic-speech-recognition", chunk_length_s=30, stride_length_s=0)``, torch
                  fp32 (2 windows for 60 s, as openvino_genai's); N clips are one call with ``batch_size=N``,
                  which batches their windows (transformers' way to serve several inputs with one model:
                  N threads on one pipeline would only split the same 2 cores); and 1 clip with the
                  pipeline's default stride (5 s each side: 3 overlapping windows for 60 s). In a child
                  process with ``OMP_WAIT_POLICY=PASSIVE`` (``--omp_wait_policy``): with libgomp's default,
                  torch's OpenMP threads spin at every barrier, and on a machine whose cores other work
                  also wants, a spinning thread waits for a descheduled peer: 2-3x slower there

Figures per (side, clips): the median over repeats of the clips' median latency; RTF = that latency
/ clip seconds; throughput = audio seconds transcribed per wall second; text tokens and windows per
clip. Each repeat runs every (side, clips) once, the order rotated repeat by repeat, so a
neighbour's load on the shared cores falls on all sides alike; every side runs once untimed first.
The 1-minute load average after each run is in the JSON.

    python scripts/bench_audio.py --repeats 5 --out docs/benchmarks/2026-11-27-audio-whisper-tiny.json
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import multiprocessing
import os
import shlex
import statistics
import subprocess
import sys
import time
import wave
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ovserve.dialects.openai.audio.adapter import max_new_tokens  # noqa: E402
from scripts.benchmarks.report import machine_info  # noqa: E402
from scripts.benchmarks.server import MODEL_NAME, client_session, running_server  # noqa: E402
from scripts.demo_models.speech import CHECKPOINT_SUBDIR  # noqa: E402
from scripts.make_demo_models import build_benchmark_whisper  # noqa: E402

RATE = 16_000
F32 = {"INFERENCE_PRECISION_HINT": "f32"}
WINDOW_SECONDS = 30


def speech_like_clip(seconds: float, seed: int = 0) -> np.ndarray:
    """Harmonics of a pitch wandering over 100-220 Hz, shaped into ~4 syllables a second with a pause
    in one half-second of five, and a little noise: float32 in [-0.5, 0.5]."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    pitch = 160 + 60 * np.sin(2 * np.pi * 0.3 * t) * np.sin(2 * np.pi * 0.07 * t + 1)
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    syllables = np.clip(np.sin(2 * np.pi * 4 * t), 0, None) ** 2
    spoken = np.repeat(rng.random(int(np.ceil(seconds * 2))) > 0.2, RATE // 2)[: len(t)]
    signal = voiced * syllables * spoken + 0.02 * rng.standard_normal(len(t))
    return (0.5 * signal / np.abs(signal).max()).astype(np.float32)


def wav_bytes(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes((samples * 32767).round().astype("<i2").tobytes())
    return buffer.getvalue()


@dataclass
class Run:
    """One timed run of a side: its clips' latencies, the wall time of all of them, what it wrote."""

    latencies: list[float]
    wall: float
    text: str  # the first clip's
    # Tokens per clip: text tokens (transformers), generated tokens (openvino_genai: text and each
    # window's <|endoftext|>), the raw pipeline's count for a server run that wrote its text.
    tokens: float | None = None
    windows: float | None = None  # decoded windows per clip
    load_1min: float = 0.0


@dataclass
class Side:
    name: str
    precision: str
    note: str
    clients: tuple[int, ...]
    run: Callable[[int], Run]
    runs: dict[int, list[Run]] = field(default_factory=dict)


async def _transcribe(session: Any, url: str, wav: bytes) -> tuple[float, str]:
    import aiohttp

    form = aiohttp.FormData()
    form.add_field("file", wav, filename="clip.wav", content_type="audio/wav")
    for name, value in (("model", MODEL_NAME), ("language", "en"), ("temperature", "0")):
        form.add_field(name, value)
    started = time.perf_counter()
    async with session.post(f"{url}/v3/audio/transcriptions", data=form) as response:
        body = await response.text()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {body[:500]}")
    return time.perf_counter() - started, str(json.loads(body)["text"])


def server_side(url: str, wav: bytes) -> Callable[[int], Run]:
    async def clients(count: int) -> Run:
        async with client_session() as session:
            started = time.perf_counter()
            answers = await asyncio.gather(*(_transcribe(session, url, wav) for _ in range(count)))
            wall = time.perf_counter() - started
        return Run([latency for latency, _ in answers], wall, answers[0][1])

    return lambda count: asyncio.run(clients(count))


def genai_side(model_dir: Path, samples: np.ndarray, budget: int, properties: dict[str, str]) -> Callable[[int], Run]:
    import openvino_genai as ov_genai

    pipeline = ov_genai.WhisperPipeline(str(model_dir), "CPU", **properties)
    config = pipeline.get_generation_config()
    # What the server's engine sets for this request (ovserve/engine/speech.py).
    config.max_new_tokens = budget
    config.return_timestamps = False
    config.task = "transcribe"
    config.language = "<|en|>"
    config.do_sample = False

    def run(count: int) -> Run:
        assert count == 1, "the raw pipeline runs one transcription at a time"
        started = time.perf_counter()
        result = pipeline.generate(samples, config)
        wall = time.perf_counter() - started
        tokens = result.perf_metrics.get_num_generated_tokens()
        windows = math.ceil(len(samples) / (WINDOW_SECONDS * RATE))  # one after the other, no overlap
        return Run([wall], wall, result.texts[0], tokens=float(tokens), windows=float(windows))

    return run


def transformers_side(checkpoint: Path, samples: np.ndarray, budget: int) -> Callable[[int, float | None], Run]:
    """transformers' ASR pipeline on ``checkpoint`` in fp32: ``run(clips, stride_s)``, ``stride_s`` None
    for the pipeline's default stride."""
    import torch
    from transformers import pipeline

    asr: Any = pipeline("automatic-speech-recognition", model=str(checkpoint), device="cpu", dtype=torch.float32)
    markers = torch.tensor([i for token, i in asr.tokenizer.get_vocab().items() if token.startswith("<|")])
    counted: list[tuple[int, int]] = []  # (windows, text tokens) per generate call
    generate = asr.model.generate

    def counting_generate(*args: Any, **kwargs: Any) -> Any:
        output = generate(*args, **kwargs)
        sequences = output if isinstance(output, torch.Tensor) else output["sequences"]
        counted.append((int(sequences.shape[0]), int((~torch.isin(sequences, markers)).sum())))
        return output

    asr.model.generate = counting_generate
    generate_kwargs = {"language": "en", "task": "transcribe", "max_new_tokens": budget}

    def run(count: int, stride_s: float | None) -> Run:
        options: dict[str, Any] = {"chunk_length_s": WINDOW_SECONDS, "generate_kwargs": generate_kwargs}
        if stride_s is not None:
            options["stride_length_s"] = stride_s
        counted.clear()
        started = time.perf_counter()
        if count == 1:
            texts = [asr(samples, **options)["text"]]
        else:
            texts = [output["text"] for output in asr([samples] * count, batch_size=count, **options)]
        wall = time.perf_counter() - started
        windows = sum(rows for rows, _ in counted) / count
        tokens = sum(text_tokens for _, text_tokens in counted) / count
        # One call returns every clip's text at its end: each clip's latency is the call's.
        return Run([wall] * count, wall, texts[0], tokens=tokens, windows=windows)

    return run


def _transformers_worker(connection: Connection, checkpoint: Path, samples: np.ndarray, budget: int) -> None:
    import torch

    run = transformers_side(checkpoint, samples, budget)
    connection.send(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    while (request := connection.recv()) is not None:
        connection.send(run(*request))


@contextmanager
def transformers_process(
    checkpoint: Path, samples: np.ndarray, budget: int, omp_wait_policy: str | None
) -> Iterator[tuple[str, Callable[[int, float | None], Run]]]:
    """:func:`transformers_side` in a child process, whose OpenMP threads wait as ``omp_wait_policy``
    says (None: libgomp's default, spinning a while before sleeping). Its own process also keeps
    torch's OpenMP threads and the in-process openvino_genai pipelines' threads apart."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    saved = os.environ.pop("OMP_WAIT_POLICY", None)
    if omp_wait_policy is not None:
        os.environ["OMP_WAIT_POLICY"] = omp_wait_policy  # read once, when the child loads libgomp
    try:
        process = context.Process(target=_transformers_worker, args=(child, checkpoint, samples, budget), daemon=True)
        process.start()
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)
        if saved is not None:
            os.environ["OMP_WAIT_POLICY"] = saved

    def run(count: int, stride_s: float | None) -> Run:
        parent.send((count, stride_s))
        result: Run = parent.recv()
        return result

    try:
        yield str(parent.recv()), run
    finally:
        parent.send(None)
        process.join(timeout=60)
        if process.is_alive():
            process.kill()


def summarize(side: Side, count: int, seconds: float) -> dict[str, Any]:
    runs = side.runs[count]
    latency = statistics.median(statistics.median(run.latencies) for run in runs)
    throughput = statistics.median(count * seconds / run.wall for run in runs)

    def median_of(values: list[float | None]) -> float | None:
        present = [value for value in values if value is not None]
        return statistics.median(present) if present else None

    return {
        "side": side.name,
        "precision": side.precision,
        "clips_at_once": count,
        "note": side.note,
        "latency_s": latency,
        "rtf": latency / seconds,
        "audio_s_per_wall_s": throughput,
        "tokens_per_clip": median_of([run.tokens for run in runs]),
        "windows_per_clip": median_of([run.windows for run in runs]),
        "max_load_1min": max(run.load_1min for run in runs),
        "runs": [asdict(run) for run in runs],
    }


def markdown(rows: list[dict[str, Any]], seconds: float) -> str:
    lines = [
        f"| side | precision | clips at once | windows / tokens per clip | latency per clip s (median) "
        f"| RTF (latency / {seconds:.0f} s) | audio s per wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        windows = f"{row['windows_per_clip']:g}" if row["windows_per_clip"] is not None else "?"
        tokens = f"{row['tokens_per_clip']:g}" if row["tokens_per_clip"] is not None else "?"
        lines.append(
            f"| {row['side']} | {row['precision']} | {row['clips_at_once']} | {windows} / {tokens} "
            f"| {row['latency_s']:.2f} | {row['rtf']:.3f} | {row['audio_s_per_wall_s']:.1f} |"
        )
    return "\n".join(lines)


def _server_tokens_from_raw(sides: list[Side]) -> dict[str, bool]:
    """The server answers text, not tokens: a server run whose text is the raw pipeline's (same
    precision, greedy) decoded the same tokens, so it gets the raw run's count. Returns, per
    precision, whether every server run's text was the raw pipeline's."""
    raw = {side.precision: side.runs[1][0] for side in sides if side.name == "openvino_genai"}
    same: dict[str, bool] = {}
    for side in sides:
        reference = raw.get(side.precision)
        if side.name != "ovserve" or reference is None:
            continue
        for run in (run for runs in side.runs.values() for run in runs):
            equal = run.text.strip() == reference.text.strip()
            same[side.precision] = same.get(side.precision, True) and equal
            if equal:
                run.tokens, run.windows = reference.tokens, reference.windows
    return same


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_path", type=Path, help="a Whisper IR directory with its checkpoint in transformers/")
    parser.add_argument("--models_dir", type=Path, default=ROOT / "models")
    parser.add_argument("--seconds", type=float, default=60.0, help="clip length")
    parser.add_argument("--clients", type=int, default=4, help="clips at once (besides 1; 1: only 1)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--port", type=int, default=8775, help="the default-precision server's; f32's is +1")
    parser.add_argument("--only", nargs="+", choices=["ovserve", "openvino_genai", "transformers"])
    parser.add_argument(
        "--omp_wait_policy",
        default="PASSIVE",
        help="OMP_WAIT_POLICY of the transformers process ('default': unset). PASSIVE: torch's idle OpenMP "
        "threads sleep instead of spinning, which on a shared, oversubscribed machine costs torch 2-3x",
    )
    parser.add_argument("--no_default_stride", action="store_true", help="skip transformers at its default stride")
    parser.add_argument("--out", type=Path, help="write the figures and every run as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import openvino as ov

    model_dir = (args.model_path or build_benchmark_whisper(args.models_dir)).resolve()
    checkpoint = model_dir / CHECKPOINT_SUBDIR
    samples = speech_like_clip(args.seconds)
    wav = wav_bytes(samples)
    with wave.open(io.BytesIO(wav)) as written:  # what the server decodes: the 16-bit samples
        samples = np.frombuffer(written.readframes(written.getnframes()), dtype="<i2").astype(np.float32) / 32768
    budget = max_new_tokens(model_dir)
    default_precision = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()
    # The plugin's default, and f32 where that is not f32 (a CPU with native bf16 infers in bf16).
    precisions: list[tuple[str, dict[str, str]]] = [(f"{default_precision} (plugin default)", {})]
    if default_precision != "f32":
        precisions.append(("f32", F32))
    wanted = set(args.only or ["ovserve", "openvino_genai", "transformers"])
    uptime_start = _uptime()
    print(f"model {model_dir}; {args.seconds:g} s clip; token budget {budget}; uptime: {uptime_start}", flush=True)

    with ExitStack() as stack:
        sides: list[Side] = []
        several = (1, args.clients) if args.clients > 1 else (1,)
        if "ovserve" in wanted:
            for offset, (precision, properties) in enumerate(precisions):
                server_args = "--task speech_to_text"
                if properties:
                    server_args += f" --plugin_config {shlex.quote(json.dumps(properties))}"
                url = stack.enter_context(running_server(model_dir, args.port + offset, server_args))
                note = f"ovserve serve {server_args}"
                sides.append(Side("ovserve", precision, note, several, server_side(url, wav)))
        if "openvino_genai" in wanted:
            for precision, properties in precisions:
                raw = genai_side(model_dir, samples, budget, properties)
                sides.append(Side("openvino_genai", precision, f"WhisperPipeline {properties or ''}", (1,), raw))
        if "transformers" in wanted:
            policy = None if args.omp_wait_policy == "default" else args.omp_wait_policy
            torch_note, hf = stack.enter_context(transformers_process(checkpoint, samples, budget, policy))
            note = f"{torch_note}, OMP_WAIT_POLICY {args.omp_wait_policy}"
            sides.append(Side("transformers", "f32", f"{note}, stride 0", several, lambda count: hf(count, 0.0)))
            if not args.no_default_stride:
                sides.append(
                    Side("transformers (stride 5 s)", "f32", f"{note}, default stride", (1,), lambda n: hf(n, None))
                )

        for side in sides:  # untimed: compiles, allocates, fills caches
            started = time.perf_counter()
            side.run(1)
            print(f"warm-up {side.name} {side.precision}: {time.perf_counter() - started:.1f} s", flush=True)
        entries = [(side, count) for side in sides for count in side.clients]
        for repeat in range(args.repeats):
            shift = repeat % len(entries)
            for side, count in entries[shift:] + entries[:shift]:
                run = side.run(count)
                run.load_1min = os.getloadavg()[0]
                side.runs.setdefault(count, []).append(run)
                print(f"#{repeat + 1} {side.name} {side.precision} x{count}: wall {run.wall:.2f} s, "
                      f"tokens {run.tokens}, load {run.load_1min:.1f}", flush=True)  # fmt: skip

    same_text = _server_tokens_from_raw(sides)
    rows = [summarize(side, count, args.seconds) for side in sides for count in side.clients]
    uptime_end = _uptime()
    print("\n" + markdown(rows, args.seconds))
    print(f"\nserver text == raw pipeline text (same precision): {same_text}")
    print(f"uptime before: {uptime_start}\nuptime after:  {uptime_end}")
    if args.out is not None:
        report = {
            "machine": {**machine_info(), "cpu_default_precision": default_precision},
            "settings": {
                "model": str(model_dir),
                "seconds": args.seconds,
                "clients": args.clients,
                "repeats": args.repeats,
                "token_budget": budget,
                "omp_wait_policy": args.omp_wait_policy,
            },
            "uptime": {"start": uptime_start, "end": uptime_end},
            "server_text_equals_raw": same_text,
            "results": rows,
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
