#!/usr/bin/env python3
"""Speech to text, real-time factor: ovserve against transformers' ASR pipeline on the same weights.

The model is ``bench-whisper-tiny`` (``make_demo_models.py --benchmark_speech``, built if absent):
openai/whisper-tiny's size with random weights, an fp32 IR, and in its ``transformers/``
subdirectory the same weights as a transformers checkpoint. Each of its 30 s windows ends with
<|endoftext|> after 97 text tokens (``scripts/demo_models/speech.py``), as a real Whisper's window
of speech ends after its ~100, so every side decodes the same tokens per window whatever its token
budget means (openvino_genai's ``max_new_tokens`` covers the whole audio, transformers' one window).

The clip: ``--seconds`` (60) of speech-like synthetic sound (harmonics of a wandering pitch, a
syllable-rate envelope, pauses, a little noise) as a 16 kHz 16-bit mono WAV; the in-process sides
get exactly the samples the server decodes from it.

Sides, at 1 clip and at ``--clients`` (4) clips at once where the side can take them at once:

  ovserve         ``POST /v3/audio/transcriptions`` (json, language en, temperature 0) from N concurrent
                  clients to ``ovserve serve --task speech_to_text``, one server in the plugin's default
                  precision and one with ``--plugin_config '{"INFERENCE_PRECISION_HINT": "f32"}'``
  openvino_genai  ``WhisperPipeline.generate`` in this process (no server), both precisions, 1 clip: the
                  server's engine runs one transcription at a time too, so N clients queue there
  transformers    ``pipeline("automatic-speech-recognition", chunk_length_s=30, stride_length_s=0)``, torch
                  fp32 (2 windows for 60 s, as openvino_genai's); N clips are one call with ``batch_size=N``,
                  which batches their windows (transformers' way to serve several inputs with one model:
                  N threads on one pipeline would only split the same 2 cores); and 1 clip with the
                  pipeline's default stride (5 s each side: 3 overlapping windows for 60 s)

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
import os
import shlex
import statistics
import subprocess
import sys
import time
import wave
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
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
    tokens: float | None = None  # text tokens per clip
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
        return Run([wall], wall, result.texts[0], tokens=float(tokens))

    return run


def transformers_side(
    checkpoint: Path, samples: np.ndarray, budget: int, stride_s: float | None
) -> Callable[[int], Run]:
    """transformers' ASR pipeline on ``checkpoint`` in fp32; ``stride_s`` None: the pipeline's default stride."""
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
    options: dict[str, Any] = {
        "chunk_length_s": WINDOW_SECONDS,
        "generate_kwargs": {"language": "en", "task": "transcribe", "max_new_tokens": budget},
    }
    if stride_s is not None:
        options["stride_length_s"] = stride_s

    def run(count: int) -> Run:
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
        "text_tokens_per_clip": median_of([run.tokens for run in runs]),
        "windows_per_clip": median_of([run.windows for run in runs]),
        "max_load_1min": max(run.load_1min for run in runs),
        "runs": [asdict(run) for run in runs],
    }


def markdown(rows: list[dict[str, Any]], seconds: float) -> str:
    lines = [
        f"| side | precision | clips at once | windows / text tokens per clip | latency per clip s (median) "
        f"| RTF (latency / {seconds:.0f} s) | audio s per wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        windows = f"{row['windows_per_clip']:g}" if row["windows_per_clip"] is not None else "2"
        tokens = f"{row['text_tokens_per_clip']:g}" if row["text_tokens_per_clip"] is not None else "as raw"
        lines.append(
            f"| {row['side']} | {row['precision']} | {row['clips_at_once']} | {windows} / {tokens} "
            f"| {row['latency_s']:.2f} | {row['rtf']:.3f} | {row['audio_s_per_wall_s']:.1f} |"
        )
    return "\n".join(lines)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_path", type=Path, help="a Whisper IR directory with its checkpoint in transformers/")
    parser.add_argument("--models_dir", type=Path, default=ROOT / "models")
    parser.add_argument("--seconds", type=float, default=60.0, help="clip length")
    parser.add_argument("--clients", type=int, default=4, help="clips at once (besides 1)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--port", type=int, default=8775, help="the default-precision server's; f32's is +1")
    parser.add_argument("--only", nargs="+", choices=["ovserve", "openvino_genai", "transformers"])
    parser.add_argument("--out", type=Path, help="write the figures and every run as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import openvino as ov
    import torch

    model_dir = (args.model_path or build_benchmark_whisper(args.models_dir)).resolve()
    checkpoint = model_dir / CHECKPOINT_SUBDIR
    samples = speech_like_clip(args.seconds)
    wav = wav_bytes(samples)
    with wave.open(io.BytesIO(wav)) as written:  # what the server decodes: the 16-bit samples
        samples = np.frombuffer(written.readframes(written.getnframes()), dtype="<i2").astype(np.float32) / 32768
    budget = max_new_tokens(model_dir)
    default_precision = str(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT"))
    wanted = set(args.only or ["ovserve", "openvino_genai", "transformers"])
    uptime_start = _uptime()
    print(f"model {model_dir}; {args.seconds:g} s clip; token budget {budget}; uptime: {uptime_start}", flush=True)

    with ExitStack() as stack:
        sides: list[Side] = []
        several = (1, args.clients)
        if "ovserve" in wanted:
            for offset, (precision, properties) in enumerate(((default_precision, {}), ("f32", F32))):
                server_args = "--task speech_to_text"
                if properties:
                    server_args += f" --plugin_config {shlex.quote(json.dumps(properties))}"
                url = stack.enter_context(running_server(model_dir, args.port + offset, server_args))
                note = f"ovserve serve {server_args}"
                sides.append(Side("ovserve", precision, note, several, server_side(url, wav)))
        if "openvino_genai" in wanted:
            for precision, properties in ((default_precision, {}), ("f32", F32)):
                raw = genai_side(model_dir, samples, budget, properties)
                sides.append(Side("openvino_genai", precision, f"WhisperPipeline {properties or ''}", (1,), raw))
        if "transformers" in wanted:
            note = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
            chunked = transformers_side(checkpoint, samples, budget, 0.0)
            sides.append(Side("transformers", "f32", f"{note}, stride 0", several, chunked))
            overlapping = transformers_side(checkpoint, samples, budget, None)
            sides.append(Side("transformers (default stride)", "f32", f"{note}, stride 5 s", (1,), overlapping))

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

    rows = [summarize(side, count, args.seconds) for side in sides for count in side.clients]
    raw_texts = {side.precision: side.runs[1][0].text for side in sides if side.name == "openvino_genai"}
    server_texts = {side.precision: side.runs[1][0].text for side in sides if side.name == "ovserve"}
    same_text = {
        precision: text.strip() == raw_texts[precision].strip()
        for precision, text in server_texts.items()
        if precision in raw_texts
    }
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
                "torch_threads": torch.get_num_threads(),
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
