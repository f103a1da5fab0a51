#!/usr/bin/env python3
"""The acceptance measurements of issue 37 (OpenAI's Batch API), against a real server on this
machine, each checked and its figures written as JSON:

  sdk         the ``openai`` SDK against the demo models (tiny-llm and tiny-embed from one
              config.json): a --lines chat batch and a --lines embeddings batch complete; every
              custom_id exactly once across the output and error files; each body equals what the
              same request answers interactively (greedy: the same content; the same embedding).
  contention  one --big_lines chat batch on --model: interactive streamed chat at 1 request/s
              on the idle server first (TTFT), then the batch alone (lines/s over --window_s),
              then the same interactive load beside it (TTFT, 429s), then the batch alone again
              (lines/s); the batch is cancelled, and the idle TTFT taken again (the machine is
              shared: the idle figure is the mean of both sides). Targets: TTFT p50 <= 1.2 x idle, 0 x 429,
              lines/s after >= 0.9 x before.
  sigkill     a --big_lines chat batch on tiny-llm with a --files_dir; the server is SIGKILLed
              once --kill_at lines are done, started again on the same directory; the batch must
              complete with every custom_id exactly once, none lost.
  replicas    two replicas of tiny-llm sharing a throwaway PostgreSQL (scripts/local_postgres.py)
              and one --files_dir; the replica running a --replica_lines chat batch is stopped
              (SIGKILL, then in a second run SIGTERM) a tenth of the way in; the other must take
              the batch over (after its lease runs out, or at once once given back) and complete
              it with every custom_id exactly once. Records when it took over.

    .venv/bin/python scripts/bench_batch.py sdk contention sigkill \\
        --out docs/benchmarks/2026-11-28-batch.json

The load average (1 min) is recorded beside every figure: the machine is shared. Exit status 1
if any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmarks.report import machine_info  # noqa: E402

CHAT, EMBED = "/v1/chat/completions", "/v1/embeddings"
DONE = ("completed", "failed", "expired", "cancelled")
failed: list[str] = []


def check(condition: bool, what: str) -> bool:
    if not condition:
        failed.append(what)
        print(f"FAILED: {what}", file=sys.stderr, flush=True)
    return condition


def load() -> float:
    return round(os.getloadavg()[0], 2)


class Server:
    """``python -m ovserve serve`` on a port, its log in the work directory."""

    def __init__(self, work: Path, args: list[str], port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        log = (work / f"ovserve-{port}-{time.monotonic_ns()}.log").open("wb")
        command = [sys.executable, "-m", "ovserve", "serve", *args, "--host", "127.0.0.1", "--port", str(port)]
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ovserve exited with {self.process.returncode}: see {log.name}")
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError("ovserve not ready")

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, timeout=600)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        self.process.wait(timeout=120)


def chat_body(model: str, n: int, max_tokens: int) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"Write a short note about the number {n}."}]
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}


def embed_body(n: int) -> dict[str, Any]:
    return {"model": "tiny-embed", "input": f"Document {n}: the number {n} and its neighbours {n - 1}, {n + 1}."}


def jsonl(url: str, bodies: list[dict[str, Any]]) -> bytes:
    lines = [{"custom_id": f"req-{n}", "method": "POST", "url": url, "body": body} for n, body in enumerate(bodies)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def submit(client: openai.OpenAI, url: str, bodies: list[dict[str, Any]]) -> str:
    uploaded = client.files.create(file=("input.jsonl", jsonl(url, bodies)), purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint=url, completion_window="24h").id  # type: ignore[arg-type]


def wait(client: openai.OpenAI, batch_id: str, timeout: float = 3600) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in DONE:
            return batch
        time.sleep(0.5)  # a client's polling interval
    raise TimeoutError(f"batch {batch_id} not done after {timeout} s")


def results(client: openai.OpenAI, batch: Any) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for file_id in (batch.output_file_id, batch.error_file_id):
        if file_id:
            lines += [json.loads(line) for line in client.files.content(file_id).text.splitlines()]
    return lines


def once_each(lines: list[dict[str, Any]], count: int, what: str) -> dict[str, Any]:
    ids = [line["custom_id"] for line in lines]
    expected = {f"req-{n}" for n in range(count)}
    twice = len(ids) - len(set(ids))
    lost = len(expected - set(ids))
    check(twice == 0 and lost == 0 and set(ids) == expected, f"{what}: {twice} custom_id twice, {lost} lost")
    return {"lines_out": len(ids), "custom_id_twice": twice, "custom_id_lost": lost}


def bench_sdk(work: Path, port: int, lines: int) -> dict[str, Any]:
    config = work / "config.json"
    names = ("tiny-llm", "tiny-embed")
    entries = [{"config": {"name": name, "base_path": str(ROOT / "graphs" / name)}} for name in names]
    config.write_text(json.dumps({"model_config_list": entries}))
    server = Server(work, ["--config_path", str(config), "--files_dir", str(work / "files-sdk")], port)
    figures: dict[str, Any] = {}
    try:
        client = server.client()
        chats = [chat_body("tiny-llm", n, 16) for n in range(lines)]
        embeds = [embed_body(n) for n in range(lines)]
        for name, url, bodies in (("chat", CHAT, chats), ("embeddings", EMBED, embeds)):
            start, load_start = time.monotonic(), load()
            batch = wait(client, submit(client, url, bodies))
            elapsed = time.monotonic() - start
            out = results(client, batch)
            counts = batch.request_counts
            figure: dict[str, Any] = {
                "status": batch.status,
                "lines": lines,
                "completed": counts.completed if counts else None,
                "failed": counts.failed if counts else None,
                "seconds": round(elapsed, 2),
                "lines_per_s": round(lines / elapsed, 1),
                "load_avg_1m": [load_start, load()],
                **once_each(out, lines, f"sdk {name}"),
            }
            check(batch.status == "completed", f"sdk {name}: {batch.status}")
            by_id = {line["custom_id"]: line for line in out}
            differ, max_diff = 0, 0.0
            for n, body in enumerate(bodies):
                got = by_id.get(f"req-{n}")
                if got is None or got["response"] is None or got["response"]["status_code"] != 200:
                    differ += 1
                    continue
                answer = got["response"]["body"]
                if url == CHAT:
                    interactive = client.chat.completions.create(**body)
                    same = answer["choices"][0]["message"]["content"] == interactive.choices[0].message.content
                    tokens = interactive.usage.completion_tokens if interactive.usage is not None else None
                    same = same and answer["usage"]["completion_tokens"] == tokens
                else:
                    vector = client.embeddings.create(**body).data[0].embedding
                    batched = answer["data"][0]["embedding"]
                    diff = max(abs(a - b) for a, b in zip(vector, batched, strict=True))
                    max_diff = max(max_diff, diff)
                    same = diff == 0.0
                differ += not same
            figure["bodies_differing_from_interactive"] = differ
            if url == EMBED:
                figure["embedding_max_abs_diff"] = max_diff
            check(differ == 0, f"sdk {name}: {differ} bodies differ from the interactive answer")
            figures[name] = figure
            print(json.dumps({name: figure}), flush=True)
        figures["sdk_calls"] = "files.create, batches.create/retrieve/list/cancel, files.content"
        listed = [one.id for one in client.batches.list(limit=10).data]
        check(len(listed) >= 2, "sdk: batches.list")
        cancel_id = submit(client, CHAT, chats[:50])
        check(client.batches.cancel(cancel_id).status == "cancelling", "sdk: batches.cancel")
        check(wait(client, cancel_id).status in ("cancelled", "completed"), "sdk: the cancelled batch ends")
    finally:
        server.stop()
    return figures


async def interactive(url: str, model: str, seconds: float, max_tokens: int) -> dict[str, Any]:
    """Streamed chat at 1 request/s for ``seconds`` (each request started on its second, not after
    the previous one): TTFT of each, 429s and other errors counted."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
    ttfts: list[float] = []
    errors: dict[str, int] = {}

    async def one(n: int) -> None:
        body = chat_body(model, 10_000 + n, max_tokens)
        start = time.monotonic()
        try:
            stream = await client.chat.completions.create(**body, stream=True)
            first = None
            async for chunk in stream:
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.monotonic() - start
            if first is not None:
                ttfts.append(first)
        except openai.APIStatusError as exc:
            errors[str(exc.status_code)] = errors.get(str(exc.status_code), 0) + 1
        except openai.APIError as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    load_start = load()
    tasks = []
    for n in range(int(seconds)):
        tasks.append(asyncio.create_task(one(n)))
        await asyncio.sleep(1.0)
    await asyncio.gather(*tasks)
    await client.close()
    ordered = sorted(ttfts)
    return {
        "requests": len(tasks),
        "ttft_p50_ms": round(statistics.median(ordered) * 1000, 1) if ordered else None,
        "ttft_p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1) if ordered else None,
        "status_429": errors.get("429", 0),
        "errors": errors,
        "load_avg_1m": [load_start, load()],
    }


def done_lines(client: openai.OpenAI, batch_id: str) -> tuple[int, str]:
    batch = client.batches.retrieve(batch_id)
    counts = batch.request_counts
    return (counts.completed + counts.failed if counts else 0), batch.status


def rate(client: openai.OpenAI, batch_id: str, seconds: float, settle: float = 0.0) -> dict[str, Any]:
    """The batch's lines/s over ``seconds`` from ``settle`` seconds on (the share's hold and the
    batch requests then in flight), and over the whole time, settling included."""
    load_start = load()
    first_lines, _ = done_lines(client, batch_id)
    first = time.monotonic()
    time.sleep(settle)
    start_lines, _ = done_lines(client, batch_id)
    start = time.monotonic()
    time.sleep(seconds)
    end_lines, status = done_lines(client, batch_id)
    end = time.monotonic()
    check(status == "in_progress", f"contention: the batch ended ({status}) inside a window; give more lines")
    return {
        "settle_s": settle,
        "lines": end_lines - start_lines,
        "seconds": round(end - start, 2),
        "lines_per_s": round((end_lines - start_lines) / (end - start), 2),
        "lines_per_s_settling_included": round((end_lines - first_lines) / (end - first), 2),
        "done_at_end": end_lines,
        "load_avg_1m": [load_start, load()],
    }


def bench_contention(work: Path, port: int, args: argparse.Namespace) -> dict[str, Any]:
    model_path = ROOT / "models" / args.model
    serve = ["--model_path", str(model_path), "--model_name", args.model, "--files_dir", str(work / "files-c")]
    serve += args.serve_arg
    server = Server(work, serve, port)
    try:
        client = server.client()
        # warm: the first requests compile and allocate
        for n in range(3):
            client.chat.completions.create(**chat_body(args.model, n, args.interactive_tokens))
        idle = asyncio.run(interactive(server.url, args.model, args.interactive_s, args.interactive_tokens))
        print(json.dumps({"idle": idle}), flush=True)
        bodies = [chat_body(args.model, n, args.batch_tokens) for n in range(args.big_lines)]
        batch_id = submit(client, CHAT, bodies)
        deadline = time.monotonic() + 120
        while done_lines(client, batch_id)[0] < 8 and time.monotonic() < deadline:
            time.sleep(0.5)  # past validation and the first requests
        alone = rate(client, batch_id, args.window_s)
        print(json.dumps({"batch_alone": alone}), flush=True)
        before = done_lines(client, batch_id)[0]
        start = time.monotonic()
        beside = asyncio.run(interactive(server.url, args.model, args.interactive_s, args.interactive_tokens))
        after = done_lines(client, batch_id)[0]
        beside["batch_lines_per_s_meanwhile"] = round((after - before) / (time.monotonic() - start), 2)
        print(json.dumps({"beside_batch": beside}), flush=True)
        again = rate(client, batch_id, args.window_s, settle=args.settle_s)
        print(json.dumps({"batch_alone_after": again}), flush=True)
        client.batches.cancel(batch_id)
        final = wait(client, batch_id)
        # idle again: the machine is shared, so the idle TTFT is taken on both sides of the batch
        idle_after = asyncio.run(interactive(server.url, args.model, args.interactive_s, args.interactive_tokens))
        print(json.dumps({"idle_after": idle_after}), flush=True)
    finally:
        server.stop()
    idle_p50 = statistics.mean([idle["ttft_p50_ms"], idle_after["ttft_p50_ms"]])
    ratio_ttft = beside["ttft_p50_ms"] / idle_p50 if beside["ttft_p50_ms"] else None
    ratio_rate = again["lines_per_s"] / alone["lines_per_s"] if alone["lines_per_s"] else None
    check(ratio_ttft is not None and ratio_ttft <= 1.2, f"contention: TTFT p50 {ratio_ttft} x idle (target <= 1.2)")
    check(beside["status_429"] == 0 and not beside["errors"], f"contention: errors beside the batch {beside['errors']}")
    check(ratio_rate is not None and ratio_rate >= 0.9, f"contention: batch rate after {ratio_rate} x alone (>= 0.9)")
    return {
        "model": args.model,
        "serve_args": args.serve_arg,
        "batch_lines": args.big_lines,
        "batch_max_tokens": args.batch_tokens,
        "interactive_max_tokens": args.interactive_tokens,
        "idle": idle,
        "idle_after": idle_after,
        "batch_alone": alone,
        "beside_batch": beside,
        "batch_alone_after": again,
        "ttft_p50_ratio": round(ratio_ttft, 3) if ratio_ttft else None,
        "batch_rate_after_ratio": round(ratio_rate, 3) if ratio_rate else None,
        "batch_final_status": final.status,
    }


def bench_sigkill(work: Path, port: int, args: argparse.Namespace) -> dict[str, Any]:
    files_dir = work / "files-kill"
    model = ["--model_path", str(ROOT / "models" / "tiny-llm"), "--model_name", "tiny-llm"]
    serve = [*model, "--files_dir", str(files_dir)]
    bodies = [chat_body("tiny-llm", n, 16) for n in range(args.big_lines)]
    first = Server(work, serve, port)
    load_start = load()
    try:
        client = first.client()
        batch_id = submit(client, CHAT, bodies)
        start = time.monotonic()
        while done_lines(client, batch_id)[0] < args.kill_at:
            time.sleep(0.02)
        done_at_kill = done_lines(client, batch_id)[0]
    finally:
        first.stop(signal.SIGKILL)
    killed_after = time.monotonic() - start
    second = Server(work, serve, port)
    try:
        client = second.client()
        batch = wait(client, batch_id)
        out = results(client, batch)
        counts = batch.request_counts
    finally:
        second.stop()
    check(batch.status == "completed", f"sigkill: the batch ended {batch.status}")
    check(counts is not None and counts.completed == args.big_lines, f"sigkill: request_counts {counts}")
    return {
        "model": "tiny-llm",
        "lines": args.big_lines,
        "done_when_killed": done_at_kill,
        "killed_after_s": round(killed_after, 2),
        "status": batch.status,
        "completed": counts.completed if counts else None,
        "failed": counts.failed if counts else None,
        "load_avg_1m": [load_start, load()],
        **once_each(out, args.big_lines, "sigkill"),
    }


def bench_replicas(work: Path, port: int, args: argparse.Namespace) -> dict[str, Any]:
    from scripts.local_postgres import LocalPostgres

    postgres = LocalPostgres()
    postgres.start()
    os.environ["PGPASSWORD"] = postgres.password  # the replicas' environment, not their command line
    report: dict[str, Any] = {"model": "tiny-llm", "lines": args.replica_lines}
    try:
        for number, sig in enumerate((signal.SIGKILL, signal.SIGTERM)):
            files_dir = work / f"files-replicas-{sig.name}"
            shared = ["--responses_store", postgres.url(), "--files_dir", str(files_dir), "--batch_concurrency", "1"]
            model = ["--model_path", str(ROOT / "models" / "tiny-llm"), "--model_name", "tiny-llm"]
            ports = (port + 2 * number, port + 2 * number + 1)
            first, second = (Server(work, [*model, *shared, "--replica_name", f"replica-{p}"], p) for p in ports)
            load_start = load()
            try:
                bodies = [chat_body("tiny-llm", n, 16) for n in range(args.replica_lines)]
                batch_id = submit(first.client(), CHAT, bodies)
                other = second.client()
                while done_lines(other, batch_id)[0] < args.replica_lines // 10:
                    time.sleep(0.05)
                done_at_stop = done_lines(other, batch_id)[0]
                first.stop(sig)
                stopped = time.monotonic()
                while done_lines(other, batch_id)[0] <= done_at_stop + 1:
                    time.sleep(0.1)
                took_over = time.monotonic() - stopped
                batch = wait(other, batch_id)
                out = results(other, batch)
            finally:
                first.stop(signal.SIGKILL)
                second.stop()
            check(batch.status == "completed", f"replicas ({sig.name}): the batch ended {batch.status}")
            report[sig.name] = {
                "done_when_stopped": done_at_stop,
                "taken_over_after_s": round(took_over, 1),
                "completed_after_s": round(time.monotonic() - stopped, 1),
                "status": batch.status,
                "load_avg_1m": [load_start, load()],
                **once_each(out, args.replica_lines, f"replicas ({sig.name})"),
            }
    finally:
        postgres.close()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("phases", nargs="+", choices=("sdk", "contention", "sigkill", "replicas"))
    parser.add_argument("--lines", type=int, default=500, help="lines of the sdk batches")
    parser.add_argument("--big_lines", type=int, default=2000, help="lines of the contention and sigkill batches")
    parser.add_argument("--kill_at", type=int, default=500, help="sigkill: lines done when the server is killed")
    parser.add_argument("--replica_lines", type=int, default=400, help="lines of the replicas batch")
    parser.add_argument("--model", default="bench-qwen2.5-0.5b-int8", help="contention: the model (under models/)")
    parser.add_argument("--batch_tokens", type=int, default=32, help="contention: max_tokens of a batch line")
    parser.add_argument("--interactive_tokens", type=int, default=16, help="contention: max_tokens interactive")
    parser.add_argument("--interactive_s", type=float, default=60, help="contention: seconds of interactive load")
    parser.add_argument("--window_s", type=float, default=60, help="contention: seconds of each batch-alone window")
    parser.add_argument(
        "--settle_s", type=float, default=7, help="contention: seconds after interactive stops before the window"
    )
    parser.add_argument("--serve_arg", action="append", default=[], help="contention: one more `serve` argument")
    parser.add_argument("--port", type=int, default=18437)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"machine": machine_info(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))  # kept: the servers' logs
    print(f"work directory: {work}", file=sys.stderr, flush=True)
    for phase in args.phases:
        if phase == "sdk":
            report["sdk"] = bench_sdk(work, args.port, args.lines)
        elif phase == "contention":
            report["contention"] = bench_contention(work, args.port, args)
        elif phase == "sigkill":
            report["sigkill"] = bench_sigkill(work, args.port, args)
        else:
            report["replicas"] = bench_replicas(work, args.port, args)
    report["failed"] = failed
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
