"""The named workloads. Each sends the same requests to the raw pipeline and to the server.

A workload has levels (stream counts, a prompt length...) and yields :data:`~.measure.Figures`
for each level, once from :class:`~.raw.RawDriver` and once over HTTP. Prompts carry the level and
a per-run label in their first words, so no level reuses another's prefix when prefix caching is on
(only what the workload means to share is shared).
"""

from __future__ import annotations

import asyncio
import base64
import io
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

from ovserve.engine.spec import EngineSpec
from ovserve.models.chat_template import TemplateMessage
from ovserve.models.served import ServedModel

from .measure import Figures, Trace, ms, percentile, summary
from .raw import RawDriver
from .server import (
    client_session,
    loop_lag_histogram,
    loop_lag_p99_ms,
    server_cpu_seconds,
    stream_chat,
    stream_completions,
    stream_messages,
    stream_ollama,
    stream_responses,
    warm_up,
)

Messages = list[dict[str, Any]]

WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "wizards", "quietly",
    "judge", "boxing", "matches", "near", "old", "river", "banks", "under", "bright", "summer", "skies", "and",
    "distant", "mountains", "echo", "every", "sound",
)  # fmt: skip


@dataclass
class Options:
    """The workloads' sizes (the CLI's flags)."""

    concurrency: list[int] = field(default_factory=lambda: [1, 4, 8, 16, 64])
    prompt_tokens: int = 256
    max_tokens: int = 128
    users: int = 8
    turns: int = 5
    turn_tokens: int = 64
    turn_max_tokens: int = 64
    system_tokens: int = 1024
    system_concurrency: list[int] = field(default_factory=lambda: [4, 16])
    long_prompt_tokens: list[int] = field(default_factory=lambda: [4096])
    long_streams: int = 4
    many_streams: list[int] = field(default_factory=lambda: [64, 128])
    vlm_streams: list[int] = field(default_factory=lambda: [4])
    embed_batches: list[int] = field(default_factory=lambda: [1, 8, 64])
    embed_tokens: int = 128
    embed_inputs: int = 256
    endpoint_rounds: int = 3


class Prompts:
    """Messages whose templated prompt (or content) is as close to a token count as words allow."""

    def __init__(self, model: ServedModel) -> None:
        self.model = model

    def ids(self, messages: Messages) -> list[int]:
        # The benchmark's messages are role/content dicts: the template's message shape.
        prompt = self.model.render_chat(cast(list[TemplateMessage], messages), None, None)
        return self.model.tokenizer.encode_blocking(prompt, add_special_tokens=False)

    def text(self, seed: int, tokens: int, prefix: str = "") -> str:
        """Words (rotated by ``seed``) whose own token count is as close to ``tokens`` as possible."""

        def build(count: int) -> str:
            return prefix + " ".join(WORDS[(seed * 7 + i) % len(WORDS)] for i in range(count))

        low, high = 1, tokens  # a word is at least one token
        while low < high:
            middle = (low + high + 1) // 2
            if len(self.model.tokenizer.encode_blocking(build(middle), add_special_tokens=False)) <= tokens:
                low = middle
            else:
                high = middle - 1
        return build(low)

    def user(self, label: str, seed: int, prompt_tokens: int) -> Messages:
        """A single user message whose whole templated prompt is about ``prompt_tokens``."""
        overhead = len(self.ids([{"role": "user", "content": f"{label}: "}]))
        return [{"role": "user", "content": self.text(seed, max(1, prompt_tokens - overhead), f"{label}: ")}]


@dataclass
class Context:
    prompts: Prompts
    options: Options
    run_label: str  # in every prompt: two variants or levels never share a prefix by accident


class Workload:
    """One named workload; subclasses define the requests and what is measured."""

    name: ClassVar[str]
    description: ClassVar[str]
    headline: ClassVar[str]  # the figure the table's ratio column compares
    higher_is_better: ClassVar[bool] = True
    columns: ClassVar[tuple[tuple[str, str], ...]]  # (figure key, column label)
    raw_note: ClassVar[str | None] = None  # why there is no raw run, if there is none
    vlm: ClassVar[bool] = False
    retrieval: ClassVar[bool] = False  # runs on the embedding model (scripts/benchmarks/embeddings.py)
    server_args: ClassVar[str] = ""  # flags this workload needs, before --server_args and the variant's

    def levels(self, options: Options) -> list[int]:
        raise NotImplementedError

    def run_raw(self, context: Context, spec: EngineSpec, level: int) -> Figures:
        raise NotImplementedError

    async def run_server(self, context: Context, url: str, level: int) -> Figures:
        raise NotImplementedError


def _raw_driver(context: Context, spec: EngineSpec) -> RawDriver:
    driver = RawDriver(spec)
    driver.warm_up(context.prompts.ids([{"role": "user", "content": f"{context.run_label} warm-up"}]))
    return driver


async def _gather_server(url: str, requests: list[tuple[Messages, int, str]]) -> tuple[list[Trace], float, Figures]:
    """Send all ``(messages, max_tokens, tag)`` at once; traces, wall time and the loop lag p99."""
    async with client_session() as session:
        await warm_up(session, url)
        before = await loop_lag_histogram(session, url)
        cpu_before = server_cpu_seconds(url)
        start = time.perf_counter()
        traces = await asyncio.gather(*(stream_chat(session, url, m, n, Trace(tag, start)) for m, n, tag in requests))
        wall = time.perf_counter() - start
        cpu_after = server_cpu_seconds(url)
        after = await loop_lag_histogram(session, url)
    extra: Figures = {"loop_lag_p99_ms": loop_lag_p99_ms(before, after)}
    tokens = sum(trace.tokens for trace in traces)
    if cpu_before is not None and cpu_after is not None and tokens:
        # The server process's own CPU (HTTP, templating, SSE; not the engine's) per streamed token.
        extra["server_cpu_us_per_token"] = (cpu_after - cpu_before) / tokens * 1e6
    return list(traces), wall, extra


COMMON_COLUMNS = (
    ("tok_s", "tok/s"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("ttft_p95_ms", "TTFT p95 ms"),
    ("itl_p50_ms", "ITL p50 ms"),
    ("itl_p95_ms", "ITL p95 ms"),
)


class Uniform(Workload):
    name = "uniform"
    description = (
        "N concurrent streams (--concurrency), distinct prompts of --prompt_tokens (256), --max_tokens (128) "
        "output tokens"
    )
    headline = "tok_s"
    columns = (
        *COMMON_COLUMNS,
        ("loop_lag_p99_ms", "loop lag p99 ms"),
        ("server_cpu_us_per_token", "server CPU us/token"),
    )

    def levels(self, options: Options) -> list[int]:
        return options.concurrency

    def requests(self, context: Context, level: int) -> list[tuple[Messages, int, str]]:
        options = context.options
        return [
            (context.prompts.user(f"{context.run_label} {self.name} {level} request {i}", i, options.prompt_tokens),
             options.max_tokens, "stream")
            for i in range(level)
        ]  # fmt: skip

    def run_raw(self, context: Context, spec: EngineSpec, level: int) -> Figures:
        requests = [(context.prompts.ids(m), n, tag) for m, n, tag in self.requests(context, level)]
        driver = _raw_driver(context, spec)
        start = time.perf_counter()
        traces = [driver.submit(tag, ids, n) for ids, n, tag in requests]
        for trace in traces:  # time from when all were added, as the server's are sent at once
            trace.start = start
        driver.run()
        return summary(traces, time.perf_counter() - start)

    async def run_server(self, context: Context, url: str, level: int) -> Figures:
        traces, wall, extra = await _gather_server(url, self.requests(context, level))
        return {**summary(traces, wall), **extra}


class ManyStreams(Uniform):
    name = "many-streams"
    description = "uniform at 64 and 128 concurrent streams"
    # All are sent at once: beyond --max_queued_requests (64) requests without a first token get a 429.
    server_args = "--max_queued_requests 512"

    def levels(self, options: Options) -> list[int]:
        return options.many_streams


class SharedSystemPrompt(Uniform):
    name = "shared-system-prompt"
    description = "N concurrent requests: one ~1k-token system prompt shared by all, short distinct user turns"

    def levels(self, options: Options) -> list[int]:
        return options.system_concurrency

    def requests(self, context: Context, level: int) -> list[tuple[Messages, int, str]]:
        options, prompts = context.options, context.prompts
        system = prompts.text(0, options.system_tokens, f"{context.run_label} {self.name} {level} system: ")
        return [
            ([{"role": "system", "content": system},
              {"role": "user", "content": prompts.text(i + 1, 32, f"question {i}: ")}],
             options.max_tokens, "stream")
            for i in range(level)
        ]  # fmt: skip


class MultiTurn(Workload):
    name = "multiturn"
    description = (
        "U users x T turns at once, each resending its whole conversation every turn (~64-token user "
        "messages, 64-token replies with ignore_eos); the reply is what the server returned (raw: the decoded reply)"
    )
    headline = "tok_s"
    columns = (
        ("tok_s", "tok/s"),
        ("ttft_turn1_p50_ms", "TTFT turn 1 p50 ms"),
        ("ttft_turn1_p95_ms", "TTFT turn 1 p95 ms"),
        ("ttft_later_p50_ms", "TTFT turns 2+ p50 ms"),
        ("ttft_later_p95_ms", "TTFT turns 2+ p95 ms"),
        ("prompt_tokens_last_turn", "prompt tokens, last turn (mean)"),
        ("cached_tokens_later_mean", "cached_tokens turns 2+ (mean)"),
    )

    def levels(self, options: Options) -> list[int]:
        return [options.users]

    def user_messages(self, context: Context, users: int) -> list[list[dict[str, Any]]]:
        """Every user's message for every turn, made before the clock starts."""
        options, prompts = context.options, context.prompts
        return [
            [{"role": "user", "content": prompts.text(
                user * 5 + turn, options.turn_tokens, f"{context.run_label} {self.name} user {user} turn {turn}: ")}
             for turn in range(1, options.turns + 1)]
            for user in range(users)
        ]  # fmt: skip

    def figures(self, context: Context, traces: list[Trace], wall: float, histories: list[Messages]) -> Figures:
        """``histories``: each user's whole conversation, for the last turn's prompt length."""
        last_prompts = [len(context.prompts.ids(history[:-1])) for history in histories]
        first = [t.ttft for t in traces if t.tag == "turn 1"]
        later = [t for t in traces if t.tag != "turn 1"]
        cached = [t.cached_tokens for t in later if t.cached_tokens is not None]
        return {
            "tok_s": sum(t.tokens for t in traces) / wall,
            "ttft_turn1_p50_ms": ms(percentile(first, 50)),
            "ttft_turn1_p95_ms": ms(percentile(first, 95)),
            "ttft_later_p50_ms": ms(percentile((t.ttft for t in later), 50)),
            "ttft_later_p95_ms": ms(percentile((t.ttft for t in later), 95)),
            "prompt_tokens_last_turn": statistics.mean(last_prompts) if last_prompts else None,
            "cached_tokens_later_mean": statistics.mean(cached) if cached else None,
            "wall_s": wall,
        }

    def run_raw(self, context: Context, spec: EngineSpec, level: int) -> Figures:
        options, prompts = context.options, context.prompts
        messages = self.user_messages(context, level)
        driver = _raw_driver(context, spec)
        histories: list[Messages] = [[] for _ in range(level)]
        traces: list[Trace] = []

        def send(user: int, turn: int) -> None:
            histories[user].append(messages[user][turn - 1])
            ids = prompts.ids(histories[user])

            def done(trace: Trace, _ids: list[int]) -> None:
                histories[user].append({"role": "assistant", "content": trace.text})
                if turn < options.turns:
                    send(user, turn + 1)

            traces.append(driver.submit(f"turn {turn}", ids, options.turn_max_tokens, done))

        start = time.perf_counter()
        for user in range(level):
            send(user, 1)
        driver.run()
        return self.figures(context, traces, time.perf_counter() - start, histories)

    async def run_server(self, context: Context, url: str, level: int) -> Figures:
        options = context.options
        messages = self.user_messages(context, level)
        histories: list[Messages] = [[] for _ in range(level)]
        traces: list[Trace] = []

        async def converse(session: Any, user: int) -> None:
            history = histories[user]
            for turn in range(1, options.turns + 1):
                history.append(messages[user][turn - 1])
                trace = Trace(f"turn {turn}", 0.0)
                traces.append(trace)
                await stream_chat(session, url, history, options.turn_max_tokens, trace)
                history.append({"role": "assistant", "content": trace.text})

        async with client_session() as session:
            await warm_up(session, url)
            start = time.perf_counter()
            await asyncio.gather(*(converse(session, user) for user in range(level)))
            wall = time.perf_counter() - start
        return self.figures(context, traces, wall, histories)


class _LateRequest(Workload):
    """Streams run; once each has a few tokens, one more request is admitted beside them. The
    figure is the streams' inter-token latency while that request is being prefilled."""

    higher_is_better = False  # the headline is an inter-token latency
    warm_tokens: ClassVar[int] = 8  # tokens every stream has before the late request is sent
    stream_max_tokens: ClassVar[int] = 2048  # more than they need: the run stops once the window closed

    def window_figures(self, streams: list[Trace], late: Trace) -> Figures:
        end = late.first_token if late.first_token is not None else time.perf_counter()
        before = [gap for t in streams for gap in t.gaps((0.0, late.start))]
        during = [gap for t in streams for gap in t.gaps((late.start, end))]
        return {
            "itl_before_p50_ms": ms(percentile(before, 50)),
            "itl_before_p99_ms": ms(percentile(before, 99)),
            "itl_during_p50_ms": ms(percentile(during, 50)),
            "itl_during_p99_ms": ms(percentile(during, 99)),
            "itl_during_max_ms": ms(max(during, default=None)),
            "late_ttft_ms": ms(late.ttft),
        }

    async def _late_over_http(
        self, session: Any, url: str, stream_messages: list[Messages], late_messages: Messages, max_tokens: int
    ) -> Figures:
        streams = [Trace("stream", 0.0) for _ in stream_messages]
        ready = asyncio.Event()

        def progress(_: Trace) -> None:
            if all(t.tokens >= self.warm_tokens for t in streams):
                ready.set()

        tasks = [
            asyncio.ensure_future(stream_chat(session, url, m, max_tokens, t, progress))
            for m, t in zip(stream_messages, streams, strict=True)
        ]
        try:
            warmed = asyncio.ensure_future(ready.wait())
            await asyncio.wait([warmed, *tasks], return_when=asyncio.FIRST_COMPLETED)
            if not ready.is_set():  # a stream ended (failed) before the late request could be sent
                warmed.cancel()
                for task in tasks:
                    if task.done():
                        task.result()
                raise RuntimeError("a stream ended before every stream had its first tokens")
            late = await stream_chat(session, url, late_messages, 4, Trace("late", 0.0))
        finally:
            for task in tasks:  # closing the streams' connections stops their generation
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(1.0)  # let the engine drop the cancelled streams before the next level
        return self.window_figures(streams, late)


class LongPrompt(_LateRequest):
    name = "long-prompt"
    description = (
        "short streams running (4), then one request with a 4k-8k-token prompt admitted beside them: the streams' "
        "inter-token latency while it is prefilled, and its TTFT (level = the long prompt's tokens)"
    )
    headline = "itl_during_p99_ms"
    higher_is_better = False
    columns = (
        ("itl_before_p50_ms", "streams ITL p50 before ms"),
        ("itl_during_p50_ms", "streams ITL p50 during prefill ms"),
        ("itl_during_p99_ms", "streams ITL p99 during prefill ms"),
        ("itl_during_max_ms", "streams ITL max during prefill ms"),
        ("late_ttft_ms", "long prompt TTFT ms"),
    )

    def levels(self, options: Options) -> list[int]:
        return options.long_prompt_tokens

    def stream_tokens(self, context: Context) -> int:
        """The streams' max_tokens: more than they need, within the model's context."""
        return min(self.stream_max_tokens, (context.prompts.model.context_length or 10**9) - 128)

    def requests(self, context: Context, level: int) -> tuple[list[Messages], Messages]:
        prompts, label = context.prompts, f"{context.run_label} {self.name} {level}"
        streams = [prompts.user(f"{label} stream {i}", i, 64) for i in range(context.options.long_streams)]
        return streams, prompts.user(f"{label} long", 3, level)

    def run_raw(self, context: Context, spec: EngineSpec, level: int) -> Figures:
        stream_messages, long_messages = self.requests(context, level)
        long_ids = context.prompts.ids(long_messages)
        driver = _raw_driver(context, spec)
        budget = self.stream_tokens(context)
        streams = [driver.submit("stream", context.prompts.ids(m), budget) for m in stream_messages]
        late: list[Trace] = []

        def until() -> bool:
            if not late and all(t.tokens >= self.warm_tokens for t in streams):
                late.append(driver.submit("long", long_ids, 4))
            return bool(late) and late[0].tokens > 0

        driver.run(until)
        return self.window_figures(streams, late[0])

    async def run_server(self, context: Context, url: str, level: int) -> Figures:
        stream_messages, long_messages = self.requests(context, level)
        async with client_session() as session:
            await warm_up(session, url)
            return await self._late_over_http(session, url, stream_messages, long_messages, self.stream_tokens(context))


DIALECTS: dict[str, Callable[..., Any]] = {
    "chat": stream_chat,
    "completions": stream_completions,
    "responses": stream_responses,
    "anthropic": stream_messages,
    "ollama": stream_ollama,
}


class Dialects(Workload):
    name = "dialects"
    description = (
        "uniform's N concurrent streams on one server through every dialect: /v3/chat/completions, "
        "/v3/completions, /v3/responses, Anthropic's /v1/messages, Ollama's /api/chat (the same messages; "
        "completions gets the user message's text), alternated --endpoint_rounds (3) times each; medians of "
        "tok/s and of the server's CPU per streamed token, each dialect's against chat's"
    )
    headline = "worst_cpu_over_chat"
    higher_is_better = False
    columns = (
        ("chat_tok_s", "chat tok/s"),
        ("chat_cpu_us_per_token", "chat CPU us/token"),
        *(
            column
            for dialect in list(DIALECTS)[1:]
            for column in (
                (f"{dialect}_tok_s_over_chat", f"{dialect} tok/s / chat"),
                (f"{dialect}_cpu_over_chat", f"{dialect} CPU / chat"),
            )
        ),
        ("worst_cpu_over_chat", "worst CPU / chat"),
    )
    raw_note = "it compares the dialects of one server; uniform has the raw pipeline for this load"

    def levels(self, options: Options) -> list[int]:
        return options.concurrency

    async def run_server(self, context: Context, url: str, level: int) -> Figures:
        runs: dict[str, list[Figures]] = {dialect: [] for dialect in DIALECTS}
        async with client_session() as session:
            await warm_up(session, url)
            for round_ in range(context.options.endpoint_rounds):
                for dialect, send in DIALECTS.items():
                    # Each round's prompts are new: no dialect reuses another's prefix.
                    label = f"{context.run_label} {self.name} {level} round {round_} {dialect}"
                    requests = [
                        (context.prompts.user(f"{label} request {i}", i, context.options.prompt_tokens),
                         context.options.max_tokens)
                        for i in range(level)
                    ]  # fmt: skip
                    cpu_before = server_cpu_seconds(url)
                    start = time.perf_counter()
                    traces = await asyncio.gather(
                        *(send(session, url, m, n, Trace(dialect, start)) for m, n in requests)
                    )
                    figures = summary(list(traces), time.perf_counter() - start)
                    cpu_after = server_cpu_seconds(url)
                    tokens = sum(trace.tokens for trace in traces)
                    if cpu_before is not None and cpu_after is not None and tokens:
                        figures["cpu_us_per_token"] = (cpu_after - cpu_before) / tokens * 1e6
                    figures["tokens"] = tokens
                    runs[dialect].append(figures)
        figures = {}
        for dialect, results in runs.items():
            for key in ("tok_s", "cpu_us_per_token", "tokens", "ttft_p50_ms", "itl_p50_ms"):
                values = [value for r in results if (value := r.get(key)) is not None]
                figures[f"{dialect}_{key}"] = statistics.median(values) if values else None
        chat_tok_s, chat_cpu = figures["chat_tok_s"], figures["chat_cpu_us_per_token"]
        worst = None
        for dialect in list(DIALECTS)[1:]:
            tok_s, cpu = figures[f"{dialect}_tok_s"], figures[f"{dialect}_cpu_us_per_token"]
            figures[f"{dialect}_tok_s_over_chat"] = tok_s / chat_tok_s if tok_s is not None and chat_tok_s else None
            ratio = cpu / chat_cpu if cpu is not None and chat_cpu else None
            figures[f"{dialect}_cpu_over_chat"] = ratio
            worst = ratio if worst is None or (ratio is not None and ratio > worst) else worst
        figures["worst_cpu_over_chat"] = worst
        return figures


def _png_data_url(size: int = 224) -> str:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


class Vlm(_LateRequest):
    name = "vlm"
    description = (
        "text streams on the VLM with one image request (data-URL PNG) admitted beside them: the streams' "
        "inter-token latency without and while the image request is prefilled (level = text streams)"
    )
    vlm = True
    headline = "itl_during_p99_ms"
    columns = (
        ("itl_before_p99_ms", "streams ITL p99 without image ms"),
        ("itl_during_p50_ms", "streams ITL p50 during image prefill ms"),
        ("itl_during_p99_ms", "streams ITL p99 during image prefill ms"),
        ("late_ttft_ms", "image request TTFT ms"),
    )
    raw_note = (
        "the VLM pipeline's add_request takes a prompt string and image tensors, not token ids: a raw run would "
        "have to repeat the server's image decoding and image-tag placement "
        "(ovserve/core/media.py, ovserve/models/vision.py), "
        "measuring a copy of the server's own code rather than the bare engine"
    )
    warm_tokens = 16
    stream_max_tokens = 512  # the tiny VLM's context is 2048 tokens

    def levels(self, options: Options) -> list[int]:
        return options.vlm_streams

    async def run_server(self, context: Context, url: str, level: int) -> Figures:
        label = f"{context.run_label} {self.name} {level}"
        streams = [[{"role": "user", "content": f"{label} stream {i}: describe a quiet morning"}] for i in range(level)]
        image = [{"role": "user", "content": [
            {"type": "text", "text": f"{label}: what is in this picture?"},
            {"type": "image_url", "image_url": {"url": _png_data_url()}},
        ]}]  # fmt: skip
        async with client_session() as session:
            await warm_up(session, url)
            return await self._late_over_http(session, url, streams, image, self.stream_max_tokens)


WORKLOADS: dict[str, Callable[[], Workload]] = {
    w.name: w for w in (Uniform, MultiTurn, SharedSystemPrompt, LongPrompt, ManyStreams, Vlm, Dialects)
}


def model_for(workload: Workload, model_dir: Path, vlm_dir: Path) -> Path:
    return vlm_dir if workload.vlm else model_dir
