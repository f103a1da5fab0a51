#!/usr/bin/env python3
"""Soak a server: hours of mixed traffic, and does its memory level off?

Starts ``ovserve serve`` on a free loopback port (or uses ``--url`` of a running server), keeps
``--clients`` clients busy for ``--minutes`` (or ``--max_requests``), and every ``--every`` seconds
samples from /proc the resident memory of the server process and of each of its engine processes
(its children), with its anonymous share (the heaps, where a leak or a cache grows). Each client
draws its next request at random among ``--endpoints``:

- ``chat``, ``completions``, ``responses`` (the default), ``messages`` (Anthropic), ``ollama_chat``,
  streamed: a chat completion (some continue the client's previous conversation, so the prefix
  cache is hit), a text completion, a Responses request, an Anthropic message or an Ollama chat;
  prompts of 5 to 700 words, ``max_tokens`` 1 to ``--max_tokens``, half with ``ignore_eos``,
  greedy or sampled;
- ``embeddings`` (and ``ollama_embed``, Ollama's ``/api/embed``): a batch of 1 to 8 random strings,
  each of a random length up to ``--input_max_chars`` ASCII characters (a token spells at least
  one such character, so a string of 500 is within a 512-token limit, special tokens included):
  every (batch, length) input shape keeps turning up, the shapes an engine's JIT kernel caches
  grow with;
- ``rerank``: a random query (up to 100 characters) and 1 to 8 random documents, each pair within
  ``--input_max_chars``;
- ``transcriptions``: a WAV tone of a random duration (0.3 to ``--audio_max_seconds`` s);
- ``speech``: words of a random length up to ``--speech_max_chars`` characters, as WAV.

Each endpoint's model is its own flag (``--embeddings_model``...), by default ``--model`` or the
server's first model; serve several models from a running server (``--url``).

At the end: a table of the samples on stdout, everything as JSON in ``--out``, and a verdict. The
run fails (exit 1) on any request error (an HTTP error, an error event, a stream that ends
without its last event, a retrieval or audio answer of the wrong size), if an engine process was
replaced, or if any process's RSS grew more than ``--threshold`` percent over the last half of the
run (:func:`growth_pct`; the last half of its requests with ``--max_requests``, else of its
time). Memory that
grows to a bound in the first half (KV cache, JIT kernels, the Responses store) passes; memory
still growing in the second half does not.

    python scripts/soak.py --minutes 60 --out soak.json
    python scripts/soak.py --minutes 20 --server_args "--plugin_config '{\\"CPU_RUNTIME_CACHE_CAPACITY\\": 5000}'"
    python scripts/soak.py --url http://127.0.0.1:8000 --minutes 10   # a running server on this machine
    python scripts/soak.py --model_path models/tiny-embed --server_args "--task embeddings --pooling MEAN" \\
        --endpoints embeddings --max_requests 6000 --threshold 5 --every 5   # the embedding engine's bound

Responses requests are sent with ``store: false`` unless ``--store_responses``: the server's
in-memory store (``--responses_store_max_count`` 10,000 by default) otherwise grows for most of an
hour at this rate before its bound evicts, which is growth by design. Loopback only: the RSS
figures come from this machine's /proc.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import dataclasses
import io
import ipaddress
import json
import math
import os
import random
import socket
import statistics
import string
import sys
import time
import wave
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from scripts.benchmarks.report import machine_info  # noqa: E402
from scripts.benchmarks.server import start_server  # noqa: E402

_MIB = 1024 * 1024

# Words the prompts are made of; the demo tokenizer splits them into one or two tokens each.
_WORD_TEXT = (
    "the engine server model token stream batch cache memory kernel shape prompt output request "
    "client answer question river mountain city garden window music story number letter paper "
    "light water stone cloud field winter summer morning evening quiet bright small large early "
    "late simple careful quick slow green blue red yellow north south east west table chair door "
    "road bridge train ship plane market school library teacher student doctor farmer painter "
    "writer reader because although before after while until since where which whose every "
    "several many few some none always never often sometimes"
)
_WORDS = _WORD_TEXT.split()
_SYSTEM_PROMPTS = (
    "You are a helpful assistant. Answer briefly and precisely.",
    "You are a careful reviewer of engineering documents; point out what is unclear, one item per line.",
    "You translate the user's words into plain, simple English for a young reader, keeping every fact.",
)


# -- memory, from /proc ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProcessMemory:
    """One process's memory at one moment, in MiB."""

    rss: float
    anon: float  # RssAnon: the heap, thread stacks, anonymous mmaps (what a leak grows)
    # The Rss of the [heap] mapping: malloc's main arena only. Threads that allocate while another
    # holds it get arenas of their own, which count in ``anon`` but not here.
    heap: float


def _status_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            fields[key] = int(value.split()[0])
    return fields


def _heap_kib(pid: int) -> int:
    in_heap = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if not line[:1].isupper():  # a mapping's header line: "start-end perms offset dev inode [path]"
            in_heap = line.endswith("[heap]")
        elif in_heap and line.startswith("Rss:"):
            return int(line.split()[1])
    return 0


def process_memory(pid: int) -> ProcessMemory:
    status = _status_kib(pid)
    return ProcessMemory(status["VmRSS"] / 1024, status.get("RssAnon", 0) / 1024, _heap_kib(pid) / 1024)


def engine_pids(server_pid: int) -> list[int]:
    """The server's engine processes: its children, but for multiprocessing's resource tracker."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may itself hold spaces.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server_pid and b"resource_tracker" not in cmdline:
            pids.append(int(entry.name))
    return sorted(pids)


def listening_pid(port: int) -> int | None:
    """The pid of the process listening on ``port`` (IPv4 or IPv6), if this user can see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(entry.name)
    return None


# -- the verdict (pure) ------------------------------------------------------------------------


def growth_pct(points: Sequence[tuple[float, float]], window: float = 0.5, smooth: int = 3) -> float | None:
    """How much ``(seconds, MiB)`` samples grew over the last ``window`` of the run, in percent.

    The window's first and last ``smooth`` samples are each reduced to their median, so one
    sample caught during a transient allocation (a long prompt's buffers) moves neither end.
    None when the window holds fewer than two samples.
    """
    if len(points) < 2:
        return None
    start_t, end_t = points[0][0], points[-1][0]
    since = end_t - window * (end_t - start_t)
    inside = [value for t, value in points if t >= since]
    if len(inside) < 2:
        return None
    k = max(1, min(smooth, len(inside) // 2))
    first, last = statistics.median(inside[:k]), statistics.median(inside[-k:])
    return (last - first) / first * 100


@dataclasses.dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: list[str]
    growth: dict[str, float | None]


def verdict(
    series: Mapping[str, Sequence[tuple[float, float]]], errors: int, threshold_pct: float, replaced: Sequence[str] = ()
) -> Verdict:
    """Pass when there were no errors, no engine was replaced, and no series (process name ->
    ``(seconds, RSS MiB)``) grew more than ``threshold_pct`` over the run's last half."""
    reasons = []
    if errors:
        reasons.append(f"{errors} request error(s)")
    reasons += [f"{name} was replaced during the run" for name in replaced]
    growth = {name: growth_pct(points) for name, points in series.items()}
    for name, value in growth.items():
        if value is None:
            reasons.append(f"{name}: too few samples to judge its growth (run longer or sample more often)")
        elif value > threshold_pct:
            reasons.append(f"{name}: RSS grew {value:.2f}% over the last half (limit {threshold_pct}%)")
    return Verdict(not reasons, reasons, growth)


# -- traffic ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    requests: Counter[str] = dataclasses.field(default_factory=Counter)
    errors: list[str] = dataclasses.field(default_factory=list)
    output_tokens: int = 0


class RequestFailed(Exception):
    pass


GENERATION_ENDPOINTS = ("chat", "completions", "responses", "messages", "ollama_chat")
ENDPOINTS = (*GENERATION_ENDPOINTS, "embeddings", "ollama_embed", "rerank", "transcriptions", "speech")
# The endpoints whose model is the embeddings model.
_EMBEDDING_ENDPOINTS = ("embeddings", "ollama_embed")


def _words(rng: random.Random, most: int = 700) -> str:
    # Mostly short prompts, some long ones: every prompt length (and so every shape the engine's
    # kernels see) keeps turning up, the rare ones rarely. 700 words are ~1,400 tokens of the demo
    # tokenizer: with max_tokens 256 and the template, within the demo model's 2,048.
    bucket = rng.random()
    count = rng.randint(5, 40) if bucket < 0.5 else rng.randint(40, 200) if bucket < 0.85 else rng.randint(200, 700)
    return " ".join(rng.choice(_WORDS) for _ in range(min(count, most)))


def _chars(messages: list[dict[str, str]]) -> int:
    return sum(len(message["content"]) for message in messages)


def _sampling(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.5:
        return {"temperature": 0}
    return {"temperature": 0.8, "top_p": 0.95, "seed": rng.randrange(2**31)}


async def _sse(response: aiohttp.ClientResponse) -> Any:
    """The JSON payload of each ``data:`` line ("[DONE]" as the string)."""
    async for raw in response.content:
        line = raw.strip()
        if line.startswith(b"data: "):
            yield "[DONE]" if line == b"data: [DONE]" else json.loads(line[6:])


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
    response = await session.post(url, json=body)
    if response.status != 200:
        text = await response.text()
        response.release()
        raise RequestFailed(f"HTTP {response.status}: {text[:300]}")
    return response


async def _chat(
    session: aiohttp.ClientSession, base: str, model: str, messages: list[dict[str, str]], extra: dict[str, Any]
) -> tuple[str, int]:
    body = {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True}, **extra}
    text, tokens, done = [], 0, False
    async with await _post(session, f"{base}/v3/chat/completions", body) as response:
        async for chunk in _sse(response):
            if chunk == "[DONE]":
                done = True
            elif "error" in chunk:
                raise RequestFailed(f"error event: {chunk['error']}")
            else:
                text += [c["delta"].get("content") or "" for c in chunk["choices"]]
                tokens = (chunk.get("usage") or {}).get("completion_tokens", tokens)
    if not done:
        raise RequestFailed("chat stream ended without [DONE]")
    return "".join(text), tokens


async def _completion(session: aiohttp.ClientSession, base: str, model: str, prompt: str, extra: dict[str, Any]) -> int:
    body = {"model": model, "prompt": prompt, "stream": True, "stream_options": {"include_usage": True}, **extra}
    tokens, done = 0, False
    async with await _post(session, f"{base}/v3/completions", body) as response:
        async for chunk in _sse(response):
            if chunk == "[DONE]":
                done = True
            elif "error" in chunk:
                raise RequestFailed(f"error event: {chunk['error']}")
            else:
                tokens = (chunk.get("usage") or {}).get("completion_tokens", tokens)
    if not done:
        raise RequestFailed("completion stream ended without [DONE]")
    return tokens


async def _responses(session: aiohttp.ClientSession, base: str, model: str, body: dict[str, Any]) -> int:
    last = None
    async with await _post(session, f"{base}/v3/responses", {"model": model, "stream": True, **body}) as response:
        async for event in _sse(response):
            last = event
            if event["type"] in ("response.failed", "error"):
                raise RequestFailed(f"{event['type']}: {json.dumps(event)[:300]}")
    # max_output_tokens reached ends as response.incomplete: a normal end here.
    if not last or last["type"] not in ("response.completed", "response.incomplete"):
        raise RequestFailed(f"responses stream ended after {last and last['type']}")
    return int(last["response"]["usage"]["output_tokens"])


async def _messages(session: aiohttp.ClientSession, base: str, model: str, body: dict[str, Any]) -> int:
    """Anthropic's Messages API, streamed: named events ending with ``message_stop``."""
    last, tokens = None, 0
    async with await _post(session, f"{base}/v1/messages", {"model": model, "stream": True, **body}) as response:
        async for event in _sse(response):
            last = event
            if event["type"] == "error":
                raise RequestFailed(f"error event: {json.dumps(event)[:300]}")
            if event["type"] == "message_delta":
                tokens = int(event["usage"]["output_tokens"])
    if not last or last["type"] != "message_stop":
        raise RequestFailed(f"messages stream ended after {last and last['type']}")
    return tokens


async def _ollama_chat(session: aiohttp.ClientSession, base: str, model: str, body: dict[str, Any]) -> int:
    """Ollama's /api/chat, streamed: NDJSON lines, the last with ``done`` and its counts."""
    last = None
    async with await _post(session, f"{base}/api/chat", {"model": model, "stream": True, **body}) as response:
        async for raw in response.content:
            if raw.strip():
                last = json.loads(raw)
                if "error" in last:
                    raise RequestFailed(f"error line: {last['error']}")
    if not last or not last.get("done"):
        raise RequestFailed("ollama stream ended without its done line")
    return int(last.get("eval_count") or 0)


async def _ollama_embed(session: aiohttp.ClientSession, base: str, model: str, texts: list[str]) -> None:
    body = await _json(session, f"{base}/api/embed", {"model": model, "input": texts})
    if len(body["embeddings"]) != len(texts):
        raise RequestFailed(f"{len(body['embeddings'])} embeddings for {len(texts)} inputs")


def random_string(rng: random.Random, most_chars: int) -> str:
    """Random lowercase "words" of 1-12 letters, of a random total length (1 to ``most_chars``
    characters, uniformly: short and long inputs alike)."""
    length = rng.randint(1, most_chars)
    words: list[str] = []
    size = 0
    while size < length:
        word = "".join(rng.choices(string.ascii_lowercase, k=min(rng.randint(1, 12), length - size)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length]


def tone_wav(rng: random.Random, most_seconds: float, rate: int = 16_000) -> bytes:
    """A mono 16-bit WAV: a tone of a random pitch and duration (0.3 s to ``most_seconds``)."""
    seconds = rng.uniform(0.3, max(0.3, most_seconds))
    pitch = rng.uniform(150.0, 1500.0)
    wave_samples = (int(8000 * math.sin(2 * math.pi * pitch * i / rate)) for i in range(int(seconds * rate)))
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(array.array("h", wave_samples).tobytes())
    return out.getvalue()


async def _json(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    async with await _post(session, url, body) as response:
        return await response.json()


async def _embeddings(session: aiohttp.ClientSession, base: str, model: str, texts: list[str]) -> None:
    answer = await _json(session, f"{base}/v3/embeddings", {"model": model, "input": texts})
    if len(answer["data"]) != len(texts):
        raise RequestFailed(f"{len(texts)} inputs, {len(answer['data'])} embeddings")


async def _rerank(session: aiohttp.ClientSession, base: str, model: str, query: str, documents: list[str]) -> None:
    answer = await _json(session, f"{base}/v3/rerank", {"model": model, "query": query, "documents": documents})
    if len(answer["results"]) != len(documents):
        raise RequestFailed(f"{len(documents)} documents, {len(answer['results'])} results")


async def _transcription(session: aiohttp.ClientSession, base: str, model: str, audio: bytes) -> None:
    form = aiohttp.FormData()
    form.add_field("model", model)
    form.add_field("file", audio, filename="tone.wav", content_type="audio/wav")
    async with session.post(f"{base}/v3/audio/transcriptions", data=form) as response:
        if response.status != 200:
            raise RequestFailed(f"HTTP {response.status}: {(await response.text())[:300]}")
        answer = await response.json()
    if not isinstance(answer.get("text"), str):
        raise RequestFailed(f"no text in {json.dumps(answer)[:300]}")


async def _speech(session: aiohttp.ClientSession, base: str, model: str, text: str) -> None:
    body = {"model": model, "input": text, "response_format": "wav"}
    async with await _post(session, f"{base}/v3/audio/speech", body) as response:
        audio = await response.read()
    if not audio.startswith(b"RIFF"):
        raise RequestFailed(f"not a WAV answer ({len(audio)} bytes)")


async def _retrieval_or_audio(
    kind: str,
    session: aiohttp.ClientSession,
    base: str,
    models: Mapping[str, str],
    args: argparse.Namespace,
    rng: random.Random,
) -> None:
    """One retrieval or audio request of random size (see the module docstring)."""
    most = args.input_max_chars
    if kind in _EMBEDDING_ENDPOINTS:
        texts = [random_string(rng, most) for _ in range(rng.randint(1, 8))]
        embed = _embeddings if kind == "embeddings" else _ollama_embed
        await embed(session, base, models[kind], texts)
    elif kind == "rerank":
        query = random_string(rng, min(100, most // 2))
        documents = [random_string(rng, most - len(query) - 1) for _ in range(rng.randint(1, 8))]
        await _rerank(session, base, models[kind], query, documents)
    elif kind == "transcriptions":
        await _transcription(session, base, models[kind], tone_wav(rng, args.audio_max_seconds))
    else:
        words = " ".join(rng.choice(_WORDS) for _ in range(args.speech_max_chars // 2))
        await _speech(session, base, models[kind], words[: rng.randint(1, args.speech_max_chars)].strip() or "hello")


async def client(
    number: int,
    session: aiohttp.ClientSession,
    base: str,
    models: Mapping[str, str],
    args: argparse.Namespace,
    deadline: float,
    tally: Tally,
) -> None:
    """One client: requests one after another until the deadline or the request budget."""
    rng = random.Random(args.seed * 1000 + number)
    conversation: list[dict[str, str]] = []
    while time.monotonic() < deadline and sum(tally.requests.values()) < args.max_requests:
        kind = rng.choice(args.endpoints)
        model = models[kind]
        extra: dict[str, Any] = {"max_tokens": rng.randint(1, args.max_tokens), **_sampling(rng)}
        if rng.random() < 0.5:
            extra["ignore_eos"] = True
        tally.requests[kind] += 1
        tokens = 0
        try:
            if kind not in GENERATION_ENDPOINTS:
                await _retrieval_or_audio(kind, session, base, models, args, rng)
            elif kind == "chat":
                # A quarter continue this client's conversation (prefix-cache hits) while it is short
                # (~2,400 characters, ~750 tokens): the next turn and its answer still fit a 2k context.
                if len(conversation) in range(3, 8) and _chars(conversation) < 2400 and rng.random() < 0.25:
                    conversation.append({"role": "user", "content": _words(rng, most=100)})
                else:
                    conversation = [{"role": "system", "content": rng.choice(_SYSTEM_PROMPTS)}]
                    conversation.append({"role": "user", "content": _words(rng)})
                answer, tokens = await _chat(session, base, model, conversation, extra)
                conversation.append({"role": "assistant", "content": answer})
            elif kind == "completions":
                tokens = await _completion(session, base, model, _words(rng), extra)
            elif kind == "messages":
                body = {
                    "system": rng.choice(_SYSTEM_PROMPTS),
                    "messages": [{"role": "user", "content": _words(rng)}],
                    "max_tokens": extra["max_tokens"],
                    "temperature": extra["temperature"],
                }
                tokens = await _messages(session, base, model, body)
            elif kind == "ollama_chat":
                options = {"num_predict": extra["max_tokens"], "temperature": extra["temperature"]}
                if "seed" in extra:
                    options["seed"] = extra["seed"]
                messages = [
                    {"role": "system", "content": rng.choice(_SYSTEM_PROMPTS)},
                    {"role": "user", "content": _words(rng)},
                ]
                tokens = await _ollama_chat(session, base, model, {"messages": messages, "options": options})
            else:
                body = {
                    "instructions": rng.choice(_SYSTEM_PROMPTS),
                    "input": _words(rng),
                    "max_output_tokens": extra.pop("max_tokens"),
                    "store": args.store_responses,
                    **extra,
                }
                tokens = await _responses(session, base, model, body)
            tally.output_tokens += tokens
        except (RequestFailed, aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError) as exc:
            tally.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            print(f"request error ({kind}): {exc}", file=sys.stderr, flush=True)


# -- sampling and reporting ---------------------------------------------------------------------


@dataclasses.dataclass
class Sample:
    seconds: float
    requests: int
    errors: int
    output_tokens: int
    server: ProcessMemory
    engines: dict[int, ProcessMemory]


def take_sample(started: float, server_pid: int, tally: Tally) -> Sample:
    engines = {}
    for pid in engine_pids(server_pid):
        with contextlib.suppress(OSError):  # an engine that just exited
            engines[pid] = process_memory(pid)
    return Sample(
        seconds=time.monotonic() - started,
        requests=sum(tally.requests.values()),
        errors=len(tally.errors),
        output_tokens=tally.output_tokens,
        server=process_memory(server_pid),
        engines=engines,
    )


def table_header(engine_pids: Sequence[int]) -> str:
    engines = "".join(f"  engine {pid} rss/anon MiB" for pid in engine_pids)
    return f"{'min':>6} {'requests':>9} {'errors':>6} {'req/s':>6} {'tok/s':>7} {'server MiB':>10}{engines}"


def table_row(sample: Sample, previous: Sample | None) -> str:
    tok_s = req_s = "-"
    if previous is not None and sample.seconds - previous.seconds >= 5:  # not the short last interval
        elapsed = sample.seconds - previous.seconds
        tok_s = f"{(sample.output_tokens - previous.output_tokens) / elapsed:.0f}"
        req_s = f"{(sample.requests - previous.requests) / elapsed:.1f}"
    engines = "".join(f"  {m.rss:>12.1f} / {m.anon:>6.1f}     " for m in sample.engines.values())
    return (
        f"{sample.seconds / 60:6.1f} {sample.requests:9d} {sample.errors:6d} {req_s:>6} {tok_s:>7} "
        f"{sample.server.rss:10.1f}{engines}"
    )


def _series(
    samples: Sequence[Sample], first_engines: Sequence[int], by_requests: bool = False
) -> dict[str, list[tuple[float, float]]]:
    """Each process's ``(x, RSS MiB)``, x the run's seconds or, ``by_requests``, its requests so far."""

    def x(sample: Sample) -> float:
        return float(sample.requests) if by_requests else sample.seconds

    series = {"server": [(x(s), s.server.rss) for s in samples]}
    for pid in first_engines:
        series[f"engine {pid}"] = [(x(s), s.engines[pid].rss) for s in samples if pid in s.engines]
    return series


# -- main -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _served_model(session: aiohttp.ClientSession, base: str) -> str:
    async with session.get(f"{base}/v3/models") as response:
        models = (await response.json())["data"]
    return str(models[0]["id"])


async def _warm_up(session: aiohttp.ClientSession, base: str, kind: str, model: str) -> None:
    """One small request of ``kind`` alone: a fresh server's first traffic is never concurrent."""
    if kind in GENERATION_ENDPOINTS:
        await _completion(session, base, model, "warm up", {"max_tokens": 4})
    elif kind in _EMBEDDING_ENDPOINTS:
        await _embeddings(session, base, model, ["warm up"])
    elif kind == "rerank":
        await _rerank(session, base, model, "warm", ["up"])
    elif kind == "transcriptions":
        await _transcription(session, base, model, tone_wav(random.Random(0), 0.5))
    else:
        await _speech(session, base, model, "warm up")


async def soak(args: argparse.Namespace, base: str, server_pid: int) -> tuple[list[Sample], Tally, Verdict]:
    tally = Tally()
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    connector = aiohttp.TCPConnector(limit=args.clients)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        default = args.model or await _served_model(session, base)
        chosen = {
            "embeddings": args.embeddings_model,
            "ollama_embed": args.embeddings_model,
            "rerank": args.rerank_model,
            "transcriptions": args.transcription_model,
            "speech": args.speech_model,
        }
        models = {kind: chosen.get(kind) or default for kind in ENDPOINTS}
        # One request alone first: a fresh server's first traffic is never concurrent (feasibility.md).
        for kind in dict.fromkeys(args.endpoints):
            await _warm_up(session, base, kind, models[kind])
        started = time.monotonic()
        deadline = started + args.minutes * 60
        clients = [
            asyncio.create_task(client(n, session, base, models, args, deadline, tally)) for n in range(args.clients)
        ]
        samples = [take_sample(started, server_pid, tally)]
        first_engines = list(samples[0].engines)
        print(table_header(first_engines), flush=True)
        print(table_row(samples[0], None), flush=True)
        while not all(task.done() for task in clients):
            await asyncio.wait(clients, timeout=args.every)
            samples.append(take_sample(started, server_pid, tally))
            print(table_row(samples[-1], samples[-2]), flush=True)
        await asyncio.gather(*clients)
    replaced = [f"engine {pid}" for pid in first_engines if pid not in samples[-1].engines]
    series = _series(samples, first_engines, by_requests=args.max_requests < _NO_REQUEST_LIMIT)
    return samples, tally, verdict(series, len(tally.errors), args.threshold, replaced)


_NO_REQUEST_LIMIT = 1_000_000


def _endpoints(text: str) -> tuple[str, ...]:
    chosen = tuple(name.strip() for name in text.split(",") if name.strip())
    if not chosen or any(name not in ENDPOINTS for name in chosen):
        raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(ENDPOINTS)}")
    return chosen


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    models = Path(os.environ.get("OVSERVE_TEST_MODELS", ROOT / "models"))
    parser.add_argument("--model_path", type=Path, default=models / "tiny-llm", help="model to serve (no --url)")
    parser.add_argument("--server_args", default="", help="more flags for the server this script starts")
    parser.add_argument("--url", help="a running server on this machine instead of starting one")
    parser.add_argument("--pid", type=int, help="with --url: the server's pid (default: the port's listener)")
    parser.add_argument("--model", help="model name to request (default: the server's first)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent streaming clients")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the clients send requests")
    parser.add_argument(
        "--max_requests",
        type=int,
        default=_NO_REQUEST_LIMIT,
        help="stop after this many requests (growth is then judged over the last half of the requests)",
    )
    parser.add_argument(
        "--endpoints", type=_endpoints, default=GENERATION_ENDPOINTS, help=f"comma-separated, of {', '.join(ENDPOINTS)}"
    )
    parser.add_argument("--embeddings_model", help="model for embeddings requests (default: --model)")
    parser.add_argument("--rerank_model", help="model for rerank requests (default: --model)")
    parser.add_argument("--transcription_model", help="model for transcriptions requests (default: --model)")
    parser.add_argument("--speech_model", help="model for speech requests (default: --model)")
    parser.add_argument(
        "--input_max_chars", type=int, default=500, help="longest embeddings input or rerank pair, in ASCII characters"
    )
    parser.add_argument("--speech_max_chars", type=int, default=400, help="longest speech input, in characters")
    parser.add_argument("--audio_max_seconds", type=float, default=8.0, help="longest transcribed tone, in seconds")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between memory samples")
    parser.add_argument("--max_tokens", type=int, default=256, help="largest max_tokens a request asks")
    parser.add_argument("--threshold", type=float, default=1.0, help="RSS growth (%%) allowed over the last half")
    parser.add_argument("--request_timeout", type=float, default=600.0, help="seconds one request may take")
    parser.add_argument("--store_responses", action="store_true", help="Responses requests with store: true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the samples and the verdict as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server = None
    if args.url:
        if not _loopback(args.url):
            raise SystemExit("--url must be a loopback address: memory is read from this machine's /proc")
        base = args.url.rstrip("/")
        pid = args.pid or listening_pid(urlsplit(base).port or 80)
        if pid is None:
            raise SystemExit(f"no process of this user listens on {base}; pass --pid")
    else:
        port = _free_port()
        server = start_server(args.model_path, port, args.server_args)
        base, pid = f"http://127.0.0.1:{port}", server.pid
    try:
        samples, tally, result = asyncio.run(soak(args, base, pid))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    elapsed = samples[-1].seconds
    print(
        f"\n{sum(tally.requests.values())} requests ({dict(tally.requests)}) in {elapsed / 60:.1f} min, "
        f"{len(tally.errors)} errors, {sum(tally.requests.values()) / elapsed:.1f} requests/s, "
        f"{tally.output_tokens / elapsed:.0f} output tok/s"
    )
    for name, value in result.growth.items():
        print(f"{name}: RSS growth over the last half {'n/a' if value is None else f'{value:+.2f}%'}")
    print("PASS" if result.passed else "FAIL: " + "; ".join(result.reasons))
    if args.out:
        report = {
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "machine": machine_info(),
            "requests": dict(tally.requests),
            "errors": tally.errors[:100],
            "output_tok_s": tally.output_tokens / elapsed,
            "samples": [
                {
                    "seconds": round(s.seconds, 1),
                    "requests": s.requests,
                    "errors": s.errors,
                    "output_tokens": s.output_tokens,
                    "server": dataclasses.asdict(s.server),
                    "engines": {str(pid): dataclasses.asdict(m) for pid, m in s.engines.items()},
                }
                for s in samples
            ],
            "verdict": dataclasses.asdict(result),
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
