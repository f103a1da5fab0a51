#!/usr/bin/env python3
"""What models on demand cost: load times with and without OpenVINO's model cache, and the latency
a switch adds when two models alternate under a memory budget that holds one.

For each model (``--models``, directories of OpenVINO IR models):

1. **Loads.** A server with ``--lazy_load``; each cycle unloads the model (``POST .../unload``) and
   times one short streamed request from its send to its first token, the load included, and
   reads the load's own duration from ``ovserve_model_load_duration_seconds``. Without a cache
   (``--cache_dir none``: every load compiles), then with a fresh cache directory (its first load
   compiles and writes the cache; the next ones import from it). The OS page cache is warm in
   both cases (the model files were read before): "cold" here means compiled, not read from disk.
2. **Switches.** Two names for the model in one config.json, requests alternating between them:
   first with no budget (both stay loaded: the baseline), then under a budget that holds one (each
   request evicts the other model and loads its own, from the warm cache). The added latency per
   switch is the median difference.

The figures go to stdout as a Markdown table and, with ``--out``, as JSON, with the machine's load
averages before and after (the runs are timing-sensitive: note what else ran).

    python scripts/bench_model_loads.py --models models/tiny-llm,models/bench-qwen2.5-0.5b-int8
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(url: str, method: str = "GET", body: dict[str, Any] | None = None, timeout: float = 900) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


@contextmanager
def server(args: list[str], log: Path) -> Iterator[str]:
    """``ovserve serve <args>`` on a free loopback port, once ready; stopped afterwards."""
    port = free_port()
    command = [sys.executable, "-m", "ovserve", "serve", *args, "--host", "127.0.0.1", "--port", str(port)]
    with log.open("ab") as output:
        process = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start (see {log})")
            try:
                with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def time_to_first_token(url: str, model: str) -> float:
    """Seconds from sending a short streamed chat request to its first content chunk."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    request = urllib.request.Request(
        f"{url}/v3/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    first = None
    with urllib.request.urlopen(request, timeout=900) as response:
        for raw in response:
            line = raw.strip()
            if first is None and line.startswith(b"data: {") and b'"content":"' in line:
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"no content from {model}")
    return first


def load_seconds_total(url: str, model: str) -> tuple[float, float]:
    """(sum, count) of the model's load-duration histogram."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        for part in ("sum", "count"):
            if line.startswith(f'ovserve_model_load_duration_seconds_{part}{{model="{model}"}}'):
                values[part] = float(line.rsplit(" ", 1)[1])
    return values.get("sum", 0.0), values.get("count", 0.0)


def measure_loads(model_dir: Path, cache: str, cycles: int, log: Path) -> dict[str, Any]:
    """Load cycles of one model: each an unload, then a timed first request; the load durations."""
    name = "m"
    args = ["--model_path", str(model_dir), "--model_name", name, "--lazy_load", "--cache_dir", cache]
    ttfts, loads = [], []
    with server(args, log) as url:
        for _ in range(cycles):
            _request(f"{url}/v3/models/{name}/unload", "POST")
            before = load_seconds_total(url, name)
            ttfts.append(time_to_first_token(url, name))
            after = load_seconds_total(url, name)
            loads.append(after[0] - before[0])
        _request(f"{url}/v3/models/{name}/unload", "POST")
        estimate = _request(f"{url}/v3/models/{name}")["ovserve"]["memory_estimate_bytes"]
    return {"ttft_s": ttfts, "load_s": loads, "measured_bytes": estimate}


def measure_switches(model_dir: Path, budget: int | None, rounds: int, log: Path, cache: str) -> list[float]:
    """First-token times of requests alternating between two names of the model (``rounds`` each)."""
    base = Path(tempfile.mkdtemp(prefix="switch-"))
    entries = []
    for name in ("x", "y"):
        (base / name).mkdir()
        options = f'[type.googleapis.com / mediapipe.LLMCalculatorOptions]: {{ models_path: "{model_dir}" }}'
        (base / name / "graph.pbtxt").write_text(
            f'node: {{ calculator: "HttpLLMCalculator"\nnode_options: {{ {options} }} }}\n'
        )
        entries.append({"name": name, "base_path": name})
    (base / "config.json").write_text(json.dumps({"mediapipe_config_list": entries}))
    args = ["--config_path", str(base / "config.json"), "--cache_dir", cache]
    if budget is not None:
        args += ["--models_memory_budget", str(budget), "--lazy_load"]
    times = []
    with server(args, log) as url:
        for name in ("x", "y"):  # both loaded once (and, under a budget, x evicted by y)
            time_to_first_token(url, name)
        for _ in range(rounds):
            for name in ("x", "y"):
                times.append(time_to_first_token(url, name))
    return times


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="models/tiny-llm,models/bench-qwen2.5-0.5b-int8")
    parser.add_argument("--cycles", type=int, default=4, help="load cycles per configuration")
    parser.add_argument("--rounds", type=int, default=4, help="x/y request pairs in the switch runs")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    log = Path(tempfile.mkdtemp(prefix="bench-loads-")) / "server.log"
    results: dict[str, Any] = {"load_average_before": os.getloadavg(), "models": {}}
    for model in args.models.split(","):
        model_dir = (ROOT / model).resolve() if not Path(model).is_absolute() else Path(model)
        cache = tempfile.mkdtemp(prefix="ov-cache-")
        figures: dict[str, Any] = {}
        figures["no_cache"] = measure_loads(model_dir, "none", args.cycles, log)
        figures["cache"] = measure_loads(model_dir, cache, args.cycles + 1, log)  # the first one fills it
        one = figures["cache"]["measured_bytes"]
        both = measure_switches(model_dir, None, args.rounds, log, cache)
        switching = measure_switches(model_dir, int(one * 1.5), args.rounds, log, cache)
        figures["switch"] = {"resident_ttft_s": both, "switching_ttft_s": switching, "budget_bytes": int(one * 1.5)}
        results["models"][model_dir.name] = figures
        print(json.dumps({model_dir.name: figures}), file=sys.stderr, flush=True)
    results["load_average_after"] = os.getloadavg()
    print(f"load average before {results['load_average_before']}, after {results['load_average_after']}")
    print("| model | load, no cache | first token, no cache | load, cache filled | load, warm cache | "
          "first token, warm cache | switch: first token resident | switching | added per switch |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name, figures in results["models"].items():
        cold, warm, switch = figures["no_cache"], figures["cache"], figures["switch"]
        resident_s, switching_s = median(switch["resident_ttft_s"]), median(switch["switching_ttft_s"])
        print(
            f"| {name} | {median(cold['load_s']):.2f} s | {median(cold['ttft_s']):.2f} s | {warm['load_s'][0]:.2f} s | "
            f"{median(warm['load_s'][1:]):.2f} s | {median(warm['ttft_s'][1:]):.2f} s | {resident_s:.2f} s | "
            f"{switching_s:.2f} s | {switching_s - resident_s:.2f} s |"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
