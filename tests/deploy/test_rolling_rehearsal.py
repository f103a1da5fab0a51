"""A rolling update rehearsed on one machine: two replicas behind a Service-like proxy, one terminated mid-load.

What Kubernetes does when a Deployment replaces a pod, and what this test does in its place:

1. the pod is marked terminating; the endpoints controller drops it from the Service, and
   kube-proxy (here: the proxy below) stops sending it new connections a moment later
   (PROPAGATION_S);
2. meanwhile the preStop hook sleeps (PRESTOP_S, the chart's `preStop.sleepSeconds`), so nothing
   changes for the pod until the Service has let go of it;
3. SIGTERM: the server turns /v2/health/ready to 503, finishes its in-flight requests within
   --drain_timeout and exits 0, inside terminationGracePeriodSeconds (GRACE_S, then SIGKILL).

The proxy is retry-free and passes streams through chunk by chunk, so a stream the replica cuts
short reaches the client cut short. It polls each backend's /v2/health/ready every 0.2 s and keeps
only the ready ones in rotation, and never re-admits a terminating one, like an endpoints
controller. The acceptance: of 32 streamed requests none fails and none is dropped (each ends with
`data: [DONE]` and carries no error event), the terminated replica showed readiness 503 while
draining, and it exited 0.

--drain_timeout comes with the operations work; against a server without it the test still runs
(without the flag) and reports what a rolling update does to streams today.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from ovserve.__main__ import build_parser
from tests.conftest import Server, free_port, start_server

REQUESTS = 32
MAX_TOKENS = 400
FIRST_WAVE = 16  # started together; the rest follow one every STAGGER_S, across the termination
STAGGER_S = 0.15
POLL_S = 0.2
PROPAGATION_S = 0.3
PRESTOP_S = 1.0
DRAIN_TIMEOUT_S = 30
GRACE_S = PRESTOP_S + DRAIN_TIMEOUT_S + 15
# A saturated replica: the engine runs 4 sequences and the rest wait, so at SIGTERM the victim holds
# both streams under way and requests not yet started (no response headers yet); both must finish.
REPLICA_ARGS = ["--max_num_seqs", "4"]
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}

pytestmark = pytest.mark.slow


def server_accepts(flag: str, value: str) -> bool:
    _, unknown = build_parser().parse_known_args(["serve", flag, value])
    return flag not in unknown


DRAIN_ARGS = ["--drain_timeout", str(DRAIN_TIMEOUT_S)] if server_accepts("--drain_timeout", "30") else []


@dataclass(eq=False)
class Backend:
    server: Server
    in_rotation: bool = True
    terminating: bool = False
    active_streams: int = 0
    # Set once it holds two streams at a time: then a termination has something to drain.
    busy: asyncio.Event = field(default_factory=asyncio.Event)
    served: int = 0
    readiness_seen: list[tuple[float, str]] = field(default_factory=list)


class ServiceProxy:
    """Round-robin over the ready backends, streaming pass-through, no retries."""

    def __init__(self, backends: list[Backend]) -> None:
        self.backends = backends
        self._turn = itertools.count()
        self._session: aiohttp.ClientSession | None = None
        self.port = free_port()

    def pick(self) -> Backend | None:
        ready = [backend for backend in self.backends if backend.in_rotation]
        return ready[next(self._turn) % len(ready)] if ready else None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        backend = self.pick()
        if backend is None:
            return web.Response(status=503, text="no ready endpoints")
        assert self._session is not None
        headers = {name: value for name, value in request.headers.items() if name.lower() not in HOP_BY_HOP}
        body = await request.read()
        backend.active_streams += 1
        if backend.active_streams >= 2:
            backend.busy.set()
        response: web.StreamResponse | None = None
        try:
            async with self._session.request(
                request.method, backend.server.url + request.rel_url.path_qs, headers=headers, data=body
            ) as upstream:
                response = web.StreamResponse(status=upstream.status)
                for name, value in upstream.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        response.headers[name] = value
                response.headers["x-backend"] = str(backend.server.port)
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                backend.served += 1
                return response
        except aiohttp.ClientError as exc:
            if response is None:  # before the response started: what a refused connection looks like
                return web.Response(status=502, text=f"upstream :{backend.server.port}: {exc!r}")
            raise  # mid-stream: the client's stream is cut off, as it would be behind a Service
        finally:
            backend.active_streams -= 1

    async def watch_endpoints(self) -> None:
        """The endpoints controller: ready backends in rotation, terminating ones never again."""
        assert self._session is not None
        while True:
            for backend in self.backends:
                try:
                    async with self._session.get(
                        f"{backend.server.url}/v2/health/ready", timeout=aiohttp.ClientTimeout(total=1)
                    ) as response:
                        state = str(response.status)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    state = type(exc).__name__
                if backend.terminating:
                    backend.readiness_seen.append((time.monotonic(), state))
                backend.in_rotation = state == "200" and not backend.terminating
            await asyncio.sleep(POLL_S)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        watcher = asyncio.create_task(self.watch_endpoints())
        try:
            yield f"http://127.0.0.1:{self.port}"
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await runner.cleanup()
            await self._session.close()


@dataclass
class StreamResult:
    index: int
    started: float
    status: int | None = None
    backend: str = "?"
    chunks: int = 0
    done: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.done and not self.errors and self.chunks > 0


async def stream_one(session: aiohttp.ClientSession, base: str, index: int) -> StreamResult:
    result = StreamResult(index=index, started=time.monotonic())
    body = {
        "model": "tiny-llm",
        "messages": [{"role": "user", "content": f"request {index}: tell me a long story"}],
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    try:
        async with session.post(f"{base}/v3/chat/completions", json=body) as response:
            result.status = response.status
            result.backend = response.headers.get("x-backend", "?")
            if response.status != 200:
                result.errors.append(f"HTTP {response.status}: {(await response.text())[:200]}")
                return result
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    result.done = True
                    continue
                event = json.loads(data)
                if "error" in event:
                    result.errors.append(f"error event: {event['error']}")
                else:
                    result.chunks += 1
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
    return result


async def load(base: str) -> list[StreamResult]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        tasks = [asyncio.create_task(stream_one(session, base, index)) for index in range(FIRST_WAVE)]
        for index in range(FIRST_WAVE, REQUESTS):
            await asyncio.sleep(STAGGER_S)
            tasks.append(asyncio.create_task(stream_one(session, base, index)))
        return list(await asyncio.gather(*tasks))


async def terminate_like_kubelet(victim: Backend) -> tuple[int | None, float, int]:
    """Pod deletion as the kubelet and endpoints controller see it; returns (exit code, seconds, streams at SIGTERM)."""
    await victim.busy.wait()
    deleted = time.monotonic()
    victim.terminating = True  # endpoints controller: the pod leaves the Service ...
    await asyncio.sleep(PROPAGATION_S)
    victim.in_rotation = False  # ... and kube-proxy catches up
    await asyncio.sleep(PRESTOP_S - PROPAGATION_S)  # preStop sleep
    streams_at_sigterm = victim.active_streams
    victim.server.process.send_signal(signal.SIGTERM)
    process = victim.server.process
    try:
        await asyncio.to_thread(process.wait, GRACE_S - PRESTOP_S)
    except subprocess.TimeoutExpired:
        process.kill()  # the grace period ran out: SIGKILL
        await asyncio.to_thread(process.wait)
        return None, time.monotonic() - deleted, streams_at_sigterm
    return process.returncode, time.monotonic() - deleted, streams_at_sigterm


@pytest.fixture()
def replicas(tiny_llm: Path, tmp_path: Path) -> Iterator[list[Server]]:
    servers = []
    for n in range(2):
        (tmp_path / f"replica-{n}").mkdir()
        servers.append(start_server(tmp_path / f"replica-{n}", tiny_llm, *REPLICA_ARGS, *DRAIN_ARGS))
    yield servers
    for server in servers:
        server.stop()


async def test_rolling_update_drops_no_stream(replicas: list[Server]) -> None:
    backends = [Backend(server) for server in replicas]
    victim, survivor = backends
    proxy = ServiceProxy(backends)
    async with proxy.running() as base:
        load_task = asyncio.create_task(load(base))
        exit_code, termination_s, streams_at_sigterm = await terminate_like_kubelet(victim)
        results = await load_task

    failed = [result for result in results if not result.ok]
    by_backend = {str(backend.server.port): backend.served for backend in backends}
    report = [
        f"drain flag: {DRAIN_ARGS or 'not in this server'}",
        f"victim :{victim.server.port} streams at SIGTERM: {streams_at_sigterm}; exit code {exit_code} "
        f"{termination_s:.1f} s after deletion",
        f"victim readiness after deletion: {sorted({state for _, state in victim.readiness_seen})}",
        f"completed streams by backend: {by_backend}",
        f"failed or dropped: {len(failed)} of {len(results)}",
        *(f"  #{r.index} via :{r.backend} {r.status} chunks={r.chunks} done={r.done} {r.errors}" for r in failed),
        "victim log tail:\n" + "\n".join(victim.server.log().splitlines()[-15:]),
    ]
    print("\n".join(report))
    assert streams_at_sigterm >= 1, "the replica had nothing in flight at SIGTERM: the rehearsal tested nothing"
    assert failed == [], "\n".join(report)
    assert "503" in {state for _, state in victim.readiness_seen}, "readiness never turned 503 while draining"
    assert exit_code == 0, "\n".join(report)
    assert survivor.server.process.poll() is None
