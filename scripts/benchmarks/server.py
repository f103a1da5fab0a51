"""``ovserve serve`` in a child process, and the streaming client the workloads share."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from ovserve.loop_lag import BUCKETS

from .measure import Trace

ROOT = Path(__file__).resolve().parents[2]
MODEL_NAME = "bench"


def serve_command(model_dir: Path, port: int, server_args: str) -> list[str]:
    return [
        sys.executable, "-m", "ovserve", "serve", "--model_path", str(model_dir), "--model_name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--log_level", "WARNING", *shlex.split(server_args),
    ]  # fmt: skip


def start_server(model_dir: Path, port: int, server_args: str = "", checkout: Path = ROOT) -> subprocess.Popen[bytes]:
    """``ovserve serve`` from ``checkout`` (this one, or another commit's for an A/B run), once ready."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    process = subprocess.Popen(serve_command(model_dir, port, server_args), cwd=checkout, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} (server args: {server_args!r})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("the server did not become ready")


@contextmanager
def running_server(model_dir: Path, port: int, server_args: str = "", checkout: Path = ROOT) -> Iterator[str]:
    """The server's base URL while it runs; stopped (SIGTERM, then waited for) afterwards."""
    process = start_server(model_dir, port, server_args, checkout)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _listening_pid(port: int) -> int | None:
    """The process listening on ``port`` of this machine (the socket's inode, found in /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            links = [os.readlink(fd) for fd in fd_dir.iterdir()]
        except OSError:
            continue
        if any(link.startswith("socket:[") and link[8:-1] in inodes for link in links):
            return int(fd_dir.parent.name)
    return None


def server_cpu_seconds(url: str) -> float | None:
    """CPU time the server process itself (not its engine processes) has used so far."""
    pid = _listening_pid(int(url.rsplit(":", 1)[1]))
    if pid is None:
        return None
    # Each thread's schedstat: nanoseconds on a CPU (utime + stime in /proc/PID/stat count 10 ms
    # ticks, too coarse for one stream's few hundred milliseconds).
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    if total:
        return total / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def client_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900))


async def stream_chat(
    session: aiohttp.ClientSession,
    url: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    trace: Trace,
    progress: Callable[[Trace], None] | None = None,
) -> Trace:
    """One greedy streaming chat request with ``ignore_eos``; fills ``trace`` as chunks arrive
    (and calls ``progress`` after each)."""
    body = {
        "model": MODEL_NAME,
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    trace.start = time.perf_counter()
    parts: list[str] = []
    async with session.post(f"{url}/v3/chat/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:500]}")
        async for raw_line in response.content:
            line = raw_line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:  # the stream failed mid-way (a deadline, an engine restart)
                raise RuntimeError(f"stream failed after {len(parts)} chunks: {chunk['error']}")
            usage = chunk.get("usage")
            if usage:
                trace.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                trace.completion_tokens = usage.get("completion_tokens")
            if not chunk["choices"]:
                continue
            content = chunk["choices"][0]["delta"].get("content")
            if content:
                parts.append(content)
                trace.add(time.perf_counter(), 1)
                if progress is not None:
                    progress(trace)
    trace.end = time.perf_counter()
    trace.text = "".join(parts)
    return trace


async def stream_responses(
    session: aiohttp.ClientSession,
    url: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    trace: Trace,
) -> Trace:
    """:func:`stream_chat`'s request through ``/v3/responses`` (the messages as input items, stored
    as by default): one token per ``response.output_text.delta`` event, as one per content chunk there."""
    body = {
        "model": MODEL_NAME,
        "input": messages,
        "max_output_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    trace.start = time.perf_counter()
    parts: list[str] = []
    async with session.post(f"{url}/v3/responses", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:500]}")
        async for raw_line in response.content:
            line = raw_line.strip()
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.output_text.delta":
                parts.append(event["delta"])
                trace.add(time.perf_counter(), 1)
            elif event["type"] == "response.completed":
                trace.completion_tokens = (event["response"].get("usage") or {}).get("output_tokens")
            elif event["type"] == "response.failed":
                raise RuntimeError(f"response failed: {event['response']['error']}")
    trace.end = time.perf_counter()
    trace.text = "".join(parts)
    return trace


# One line of a stream, as a dialect's client reads it: the text it adds (None: none) and the
# completion tokens its usage reports (None: none).
LineReader = Callable[[bytes], tuple[str | None, int | None]]


async def _stream(
    session: aiohttp.ClientSession, url: str, path: str, body: dict[str, Any], trace: Trace, read: LineReader
) -> Trace:
    """One streaming request; fills ``trace`` as the lines ``read`` finds text in arrive."""
    trace.start = time.perf_counter()
    parts: list[str] = []
    async with session.post(f"{url}{path}", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:500]}")
        async for raw_line in response.content:
            line = raw_line.strip()
            if not line:
                continue
            text, tokens = read(line)
            if tokens is not None:
                trace.completion_tokens = tokens
            if text:
                parts.append(text)
                trace.add(time.perf_counter(), 1)
    trace.end = time.perf_counter()
    trace.text = "".join(parts)
    return trace


def _sse_data(line: bytes) -> Any:
    """The JSON of a ``data:`` line (None for other lines: ``event:``, comments, ``[DONE]``)."""
    if not line.startswith(b"data: ") or line == b"data: [DONE]":
        return None
    data = json.loads(line[6:])
    if "error" in data and data.get("type") in (None, "error"):
        raise RuntimeError(f"the stream failed: {data['error']}")
    return data


def _completion_line(line: bytes) -> tuple[str | None, int | None]:
    chunk = _sse_data(line)
    if chunk is None:
        return None, None
    usage = chunk.get("usage") or {}
    return (chunk["choices"][0]["text"] if chunk["choices"] else None), usage.get("completion_tokens")


def _messages_line(line: bytes) -> tuple[str | None, int | None]:
    event = _sse_data(line)
    if event is None:
        return None, None
    if event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
        return event["delta"]["text"], None
    if event["type"] == "message_delta":
        return None, event["usage"]["output_tokens"]
    return None, None


def _ollama_line(line: bytes) -> tuple[str | None, int | None]:
    data = json.loads(line)
    if "error" in data:
        raise RuntimeError(f"the stream failed: {data['error']}")
    return data["message"]["content"], data.get("eval_count")


async def stream_completions(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]], max_tokens: int, trace: Trace
) -> Trace:
    """:func:`stream_chat`'s request through ``/v3/completions``: the user message's text as the prompt."""
    body = {
        "model": MODEL_NAME, "prompt": messages[-1]["content"], "max_tokens": max_tokens, "ignore_eos": True,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    return await _stream(session, url, "/v3/completions", body, trace, _completion_line)


async def stream_messages(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]], max_tokens: int, trace: Trace
) -> Trace:
    """:func:`stream_chat`'s request through Anthropic's ``/v1/messages`` (``ignore_eos`` is not
    Anthropic's: accepted and ignored, so a stream may end early; tokens come from its usage)."""
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    return await _stream(session, url, "/v1/messages", body, trace, _messages_line)


async def stream_ollama(
    session: aiohttp.ClientSession, url: str, messages: list[dict[str, Any]], max_tokens: int, trace: Trace
) -> Trace:
    """:func:`stream_chat`'s request through Ollama's ``/api/chat`` (NDJSON; no ``ignore_eos``: tokens
    come from the last line's ``eval_count``)."""
    body = {
        "model": MODEL_NAME, "messages": messages, "stream": True,
        "options": {"num_predict": max_tokens, "temperature": 0},
    }  # fmt: skip
    return await _stream(session, url, "/api/chat", body, trace, _ollama_line)


async def warm_up(session: aiohttp.ClientSession, url: str) -> None:
    """One short request no measured request shares a prefix with: the first traffic is never concurrent."""
    messages = [{"role": "user", "content": "warm up the engine before the measured requests"}]
    await stream_chat(session, url, messages, 8, Trace("warm-up", 0.0))


async def loop_lag_histogram(session: aiohttp.ClientSession, url: str) -> list[int]:
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    return [
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("ovserve_event_loop_lag_seconds_bucket")
    ]


def loop_lag_p99_ms(before: list[int], after: list[int]) -> float | None:
    """The upper bound (ms) of the bucket holding the p99 event-loop lag between two scrapes."""
    diff = [a - b for a, b in zip(after, before, strict=True)]
    if not diff or diff[-1] == 0:
        return None
    for bound, cumulative in zip((*BUCKETS, float("inf")), diff, strict=True):
        if cumulative >= 0.99 * diff[-1]:
            return bound * 1000
    return None
