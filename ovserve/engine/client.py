"""The server-process side of an engine: spawns it, talks to it, restarts it when it dies.

Commands go to the child through a writer thread (a pipe write can block while the child is
inside ``step()`` and not reading); events come back through ``loop.add_reader`` on the pipe, so
nothing here ever blocks the event loop. Each request gets an ``asyncio.Queue`` that the reader
fills; the request's consumer re-raises engine failures as :class:`EngineError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import multiprocessing
import queue
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ovserve.engine import messages as msg
from ovserve.engine.spec import EngineSpec, PipelineKind
from ovserve.errors import BadRequestError, EngineError, ServiceUnavailableError

log = logging.getLogger(__name__)

# Request ids are unique across all engines and restarts: the engine breaks on duplicates.
_request_ids = itertools.count(1)

_RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)


class EngineState(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    RESTARTING = "restarting"
    STOPPED = "stopped"


@dataclass
class DraftingStats:
    """Speculative / prompt-lookup acceptance, derived from what each engine step delivered.

    The step API exposes no per-request acceptance counters (only ``generate()`` results carry
    them), but each main-model step of a drafting pipeline yields 1 verified token plus the
    accepted draft tokens: accepted = generated - steps. Drafted = steps x num_assistant_tokens
    when that knob (not a confidence threshold) drives the draft.
    """

    requests: int = 0
    generated_tokens: int = 0
    verify_steps: int = 0
    accepted_tokens: int = 0
    drafted_tokens: int = 0

    def record(self, generated: int, steps: int, num_assistant_tokens: int | None) -> tuple[int, int | None]:
        accepted = max(0, generated - steps)
        drafted = steps * num_assistant_tokens if num_assistant_tokens else None
        self.requests += 1
        self.generated_tokens += generated
        self.verify_steps += steps
        self.accepted_tokens += accepted
        self.drafted_tokens += drafted or 0
        return accepted, drafted


class EngineClient:
    """One served model's engine process, seen from the event loop."""

    def __init__(self, spec: EngineSpec, *, log_level: int = logging.INFO) -> None:
        self.spec = spec
        self.state = EngineState.STOPPED
        self.restarts = 0
        self.pid: int | None = None
        self._log_level = log_level
        self._ctx = multiprocessing.get_context("spawn")
        self._process: Any = None
        self._conn: Connection | None = None
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._streams: dict[int, asyncio.Queue[msg.EngineEvent | BaseException]] = {}
        self._stats_waiters: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ready: asyncio.Future[None] | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self._closing = False
        self.drafting = DraftingStats()

    # -- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the engine and wait until its pipeline is loaded; raises if it cannot load."""
        self.state = EngineState.LOADING
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        from ovserve.engine import worker

        self._process = self._ctx.Process(
            target=worker.main,
            args=(child_conn, self.spec, self._log_level),
            name=f"ovserve-engine-{self.spec.name}",
            daemon=True,
        )
        started = time.monotonic()
        self._process.start()
        child_conn.close()  # so that the child's death shows up as EOF here
        self._conn = parent_conn
        self._outbox = queue.SimpleQueue()
        self._writer = threading.Thread(
            target=self._write_loop,
            args=(parent_conn, self._outbox),
            daemon=True,
            name="ovserve-engine-writer",
        )
        self._writer.start()
        loop.add_reader(parent_conn.fileno(), self._on_readable)
        await self._ready
        self.state = EngineState.READY
        log.info(
            "model %r ready on %s (pid %s, loaded in %.1f s)",
            self.spec.name,
            self.spec.device,
            self.pid,
            time.monotonic() - started,
        )

    async def close(self) -> None:
        self._closing = True
        self.state = EngineState.STOPPED
        if self._restart_task is not None:
            self._restart_task.cancel()
        self._fail_all(ServiceUnavailableError("the server is shutting down"))
        self._detach()
        process = self._process
        if process is not None and process.is_alive():
            self._outbox.put((msg.SHUTDOWN,))
            await asyncio.get_running_loop().run_in_executor(None, process.join, 5.0)
            if process.is_alive():
                process.kill()

    def _detach(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
        self._outbox.put(None)  # stops the writer thread
        conn.close()

    @staticmethod
    def _write_loop(conn: Connection, outbox: queue.SimpleQueue[Any]) -> None:
        while (item := outbox.get()) is not None:
            try:
                conn.send(item)
            except (OSError, ValueError):
                return  # the reader notices the dead engine and restarts it

    # -- events from the engine -------------------------------------------------------------

    def _on_readable(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            while conn.poll():
                for event in conn.recv():
                    self._dispatch(event)
        except (EOFError, OSError):
            self._on_engine_death()

    def _dispatch(self, event: tuple) -> None:
        kind = event[0]
        if kind == msg.OUTPUT:
            _, request_id, seq_index, text, token_count, logprobs, finish = event
            stream = self._streams.get(request_id)
            if stream is not None:
                stream.put_nowait(msg.SequenceOutput(seq_index, text, token_count, logprobs, finish))
        elif kind == msg.END:
            _, request_id, error_kind, error_message = event
            stream = self._streams.pop(request_id, None)
            if stream is not None:
                stream.put_nowait(msg.RequestEnded(error_kind, error_message))
        elif kind == msg.STATS_REPLY:
            waiter = self._stats_waiters.pop(event[1], None)
            if waiter is not None and not waiter.done():
                waiter.set_result(event[2])
        elif kind == msg.READY:
            self.pid = event[1]["pid"]
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif kind == msg.FATAL:
            log.error("engine for %r failed to load: %s", self.spec.name, event[1])
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(RuntimeError(event[1]))

    def _on_engine_death(self) -> None:
        was_ready = self.state is EngineState.READY
        exitcode = self._process.exitcode if self._process is not None else None
        self._detach()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(RuntimeError(f"the engine process exited while loading (exit code {exitcode})"))
        if self._closing or not was_ready:
            return
        log.error(
            "engine process of %r died (pid %s); failing %d in-flight request(s) and restarting",
            self.spec.name,
            self.pid,
            len(self._streams),
        )
        self._fail_all(EngineError("the engine process died while generating; retry the request"))
        self.state = EngineState.RESTARTING
        self._restart_task = asyncio.get_running_loop().create_task(self._restart())

    async def _restart(self) -> None:
        for attempt, delay in enumerate(itertools.chain(_RESTART_BACKOFF_S, itertools.repeat(30.0))):
            if self._closing:
                return
            if self._process is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._process.join, 5.0)
            try:
                await self.start()
            except RuntimeError as exc:
                self.state = EngineState.RESTARTING
                log.error("restart %d of %r failed: %s; retrying in %.1f s", attempt + 1, self.spec.name, exc, delay)
                await asyncio.sleep(delay)
                continue
            self.restarts += 1
            return

    def _fail_all(self, error: BaseException) -> None:
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.put_nowait(error)
        waiters, self._stats_waiters = self._stats_waiters, {}
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_exception(error)

    # -- requests ---------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.state is EngineState.READY

    @property
    def inflight(self) -> int:
        return len(self._streams)

    def _send(self, command: tuple) -> None:
        if not self.ready or self._conn is None:
            raise ServiceUnavailableError(f"model '{self.spec.name}' is {self.state.value}; retry shortly")
        self._outbox.put(command)

    async def generate(self, prompt: msg.EnginePrompt, params: msg.Params) -> AsyncGenerator[msg.SequenceOutput, None]:
        """Yield the request's outputs as the engine produces them.

        Leaving the iteration early (client disconnect, a stop string found by the server)
        cancels the engine request: the engine frees it and confirms with END.
        """
        request_id = next(_request_ids)
        stream: asyncio.Queue[msg.EngineEvent | BaseException] = asyncio.Queue()
        self._send((msg.ADD, request_id, prompt, params))
        self._streams[request_id] = stream
        finished = False
        generated = steps = 0
        try:
            while True:
                event = await stream.get()
                if isinstance(event, BaseException):
                    finished = True
                    raise event
                if isinstance(event, msg.RequestEnded):
                    finished = True
                    if event.error_kind == msg.ERROR_REFUSED:
                        raise BadRequestError(event.error_message or "the engine refused the request")
                    if event.error_kind == msg.ERROR_IGNORED:
                        raise ServiceUnavailableError(event.error_message or "", code="engine_overloaded")
                    if event.error_kind is not None:
                        raise EngineError(event.error_message or "the engine failed")
                    return
                if event.index == 0:
                    if event.token_count:
                        generated += event.token_count
                        steps += 1
                    if event.finish_reason is not None:
                        # Recorded here: consumers may stop iterating at the finish, before END.
                        self._record_drafting(request_id, params, generated, steps)
                yield event
        finally:
            if not finished and request_id in self._streams and self._conn is not None:
                # Keep the stream registered until the engine confirms with END.
                self._streams[request_id] = asyncio.Queue()
                self._outbox.put((msg.CANCEL, request_id))

    def _record_drafting(self, request_id: int, params: msg.Params, generated: int, steps: int) -> None:
        drafting = self.spec.kind in (PipelineKind.SPECULATIVE, PipelineKind.PROMPT_LOOKUP)
        if not drafting or steps == 0 or params["n"] > 1 or params["beam_search"]:
            return
        accepted, drafted = self.drafting.record(generated, steps, params.get("num_assistant_tokens"))
        log.info(
            "request %d on %r (%s): %d tokens in %d steps, %d draft tokens accepted%s",
            request_id, self.spec.name, self.spec.kind.value, generated, steps, accepted,
            f" of {drafted} drafted" if drafted else "",
        )  # fmt: skip

    async def stats(self, timeout: float = 5.0) -> dict[str, Any]:
        """The engine's own counters (active requests as the pipeline sees them)."""
        token = next(_request_ids)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._stats_waiters[token] = waiter
        self._send((msg.STATS, token))
        try:
            return await asyncio.wait_for(waiter, timeout)
        finally:
            self._stats_waiters.pop(token, None)
