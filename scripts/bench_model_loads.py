#!/usr/bin/env python3
"""What models on demand cost: load times with and without OpenVINO's model cache, and the latency
a switch adds when two models alternate under a memory budget that holds one.

For each model (``--models``, directories of OpenVINO IR models):

1. **Loads.** Two servers with ``--lazy_load``, one without a model cache (``--cache_dir none``:
   every load compiles) and one with a fresh cache directory (its first load compiles and fills it;
   the next ones import from it), taking turns: each cycle unloads the model (``POST .../unload``),
   times one short streamed request from its send to its first token, the load included, and reads
   the load's own duration from ``ovserve_model_load_duration_seconds``. The OS page cache is warm
   for both (the model files were read before): "no cache" means compiled, not read from disk.
2. **Switches.** Two names for the model in one config.json, requests alternating between them, on
   two servers taking turns request by request: one with no budget (both stay loaded: the
   baseline), one under a budget that holds one (each request evicts the other model and loads its
   own, from the warm cache). The added latency per switch is the difference of the medians.

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


def load_cycle(url: str, name: str) -> tuple[float, float]:
    """Unload ``name``, then time one request (which loads it); (first token, load duration)."""
    _request(f"{url}/v3/models/{name}/unload", "POST")
    before = load_seconds_total(url, name)
    ttft = time_to_first_token(url, name)
    after = load_seconds_total(url, name)
    _request(f"{url}/v3/models/{name}/unload", "POST")  # one engine at a time on the machine
    return ttft, after[0] - before[0]


def measure_loads(model_dir: Path, cache: str, cycles: int, log: Path) -> dict[str, Any]:
    """Load cycles of one model, without a model cache and with one, taking turns cycle by cycle
    (two servers: a neighbour's load on the shared cores falls on both alike). The first load with
    the cache fills it and is reported on its own."""
    name = "m"
    base = ["--model_path", str(model_dir), "--model_name", name, "--lazy_load", "--cache_dir"]
    figures: dict[str, Any] = {"no_cache": {"ttft_s": [], "load_s": []}, "cache": {"ttft_s": [], "load_s": []}}
    with server([*base, "none"], log) as plain, server([*base, cache], log) as cached:
        figures["cache_fill"] = load_cycle(cached, name)
        for _ in range(cycles):
            for key, url in (("no_cache", plain), ("cache", cached)):
                ttft, load = load_cycle(url, name)
                figures[key]["ttft_s"].append(ttft)
                figures[key]["load_s"].append(load)
        figures["measured_bytes"] = _request(f"{cached}/v3/models/{name}")["ovserve"]["memory_estimate_bytes"]
    return figures


def switch_config(model_dir: Path) -> Path:
    """A config.json serving the model under two names, x and y."""
    base = Path(tempfile.mkdtemp(prefix="switch-"))
    entries = []
    for name in ("x", "y"):
        (base / name).mkdir()
        options = f'[type.googleapis.com / mediapipe.LLMCalculatorOptions]: {{ models_path: "{model_dir}" }}'
        graph = f'node: {{ calculator: "HttpLLMCalculator"\nnode_options: {{ {options} }} }}\n'
        (base / name / "graph.pbtxt").write_text(graph)
        entries.append({"name": name, "base_path": name})
    (base / "config.json").write_text(json.dumps({"mediapipe_config_list": entries}))
    return base / "config.json"


def measure_switches(model_dir: Path, budget: int, rounds: int, log: Path, cache: str) -> dict[str, list[float]]:
    """First-token times of requests alternating between x and y, on a server where both stay
    loaded and on one whose budget holds one (every request evicts the other and loads its own),
    taking turns request by request."""
    config = switch_config(model_dir)
    args = ["--config_path", str(config), "--cache_dir", cache]
    times: dict[str, list[float]] = {"resident": [], "switching": []}
    budgeted = [*args, "--models_memory_budget", str(budget), "--lazy_load"]
    with server(args, log) as resident, server(budgeted, log) as switching:
        for url in (resident, switching):
            for name in ("x", "y"):  # each loaded once
                time_to_first_token(url, name)
        for _ in range(rounds):
            for name in ("x", "y"):
                times["resident"].append(time_to_first_token(resident, name))
                times["switching"].append(time_to_first_token(switching, name))
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
        figures = measure_loads(model_dir, cache, args.cycles, log)
        budget = int(figures["measured_bytes"] * 1.5)
        figures["switch"] = {**measure_switches(model_dir, budget, args.rounds, log, cache), "budget_bytes": budget}
        results["models"][model_dir.name] = figures
        print(json.dumps({model_dir.name: figures}), file=sys.stderr, flush=True)
    results["load_average_after"] = os.getloadavg()
    print(f"load average before {results['load_average_before']}, after {results['load_average_after']}")
    print("| model | load: no cache | cache filled | warm cache | first token after a load: no cache | warm cache "
          "| first token: both resident | switching | added per switch |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name, figures in results["models"].items():
        cold, warm, switch = figures["no_cache"], figures["cache"], figures["switch"]
        resident_s, switching_s = median(switch["resident"]), median(switch["switching"])
        print(
            f"| {name} | {median(cold['load_s']):.2f} s | {figures['cache_fill'][1]:.2f} s | "
            f"{median(warm['load_s']):.2f} s | {median(cold['ttft_s']):.2f} s | {median(warm['ttft_s']):.2f} s | "
            f"{resident_s:.2f} s | {switching_s:.2f} s | {switching_s - resident_s:.2f} s |"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
