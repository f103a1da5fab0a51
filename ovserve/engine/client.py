"""The server-process side of an engine: spawns it, talks to it, restarts it when it dies.

Commands go to the child through a writer thread (a pipe write can block while the child is
inside ``step()`` and not reading); events come back through ``loop.add_reader`` on their own
pipe (``ovserve.engine.channel``), so nothing here ever blocks the event loop. The requests
themselves (``generate``, ``embed``, ``transcribe``...: each one's queue, filled from the reader)
are :class:`~ovserve.engine.requests.EngineRequests`; a request cut by the engine's death or stall
ends with a retryable :class:`ServiceUnavailableError` (503 with ``Retry-After``).

How the engine is started is a :data:`~ovserve.engine.launcher.EngineLauncher`:
:func:`~ovserve.engine.launcher.spawn_engine` (a real engine process) in production, an
in-process stand-in speaking the same protocol in the fast tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import queue
import threading
import time
from collections.abc import AsyncGenerator

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.engine.channel import PipeChannel
from ovserve.engine.launcher import EngineLauncher, EngineProcess, spawn_engine
from ovserve.engine.memory import resident_memory_bytes
from ovserve.engine.messages import (
    AddRequest,
    Command,
    EnginePrompt,
    EngineStats,
    Event,
    Fatal,
    GenerationParams,
    Heartbeat,
    Loading,
    LoadStage,
    Ready,
    RequestEnded,
    SequenceOutput,
    Shutdown,
)
from ovserve.engine.requests import EngineRequests, request_error
from ovserve.engine.restarts import RestartPolicy
from ovserve.engine.spec import EngineSpec
from ovserve.engine.watchdog import StallWatch
from ovserve.errors import EngineError, OvserveError, ServiceUnavailableError
from ovserve.ticks import sleep_to_next_tick

log = logging.getLogger(__name__)

# How long an unloaded engine may take to exit once its pipe closed, before it is killed.
_EXIT_WAIT_S = 10.0


class EngineState(enum.Enum):
    LOADING = "loading"  # a start (the first one, or a load after an unload) is under way
    READY = "ready"
    RESTARTING = "restarting"  # it died or stalled; a new process is on its way
    FAILED = "failed"  # its last start failed; it is tried again after a growing delay
    UNLOADED = "unloaded"  # no process, on purpose (idle, evicted, on demand): a start loads it
    STOPPED = "stopped"  # not started yet, or closed with the server


class EngineClient(EngineRequests):
    """One served model's engine process, seen from the event loop.

    Its lifetime: :meth:`keep_started` starts the process and retries a start that fails, with
    delays that double up to a cap; a process that dies or stalls once ready is replaced the same
    way. Requests cut by a death or a stall end with a 503 that tells when to retry.

    On demand (``ovserve.models.residency``): :meth:`load_once` is one start whose failure is
    raised (and retried by a later request once :meth:`backoff_remaining` is over), and
    :meth:`unload` ends the process on purpose; a load after an unload is not a restart.
    """

    def __init__(
        self,
        spec: EngineSpec,
        *,
        log_level: int = logging.INFO,
        launcher: EngineLauncher = spawn_engine,
        stall_timeout: float,
        step_timeout: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__()
        # The watchdog's and the restart delays' (ovserve.clock): a test's clock moves by hand.
        self._clock = clock
        self.spec = spec
        self.state = EngineState.STOPPED
        # Processes launched to replace a dead or stalled one, or after a failed start (each attempt
        # counts); a load after an unload is not one.
        self.restarts = 0
        self.start_failures = 0  # attempts that ended before the engine was ready
        self.stalls = 0
        # The engine's last Heartbeat, and when it came: what /metrics reports without asking.
        self.last_report: EngineStats | None = None
        self.last_report_at: float | None = None
        # Whether the engine is alive: its events (it reports at least once a second between steps)
        # and its CPU time (a long step works in silence), judged by ovserve.engine.watchdog.
        self._stall_watch = StallWatch(stall_timeout, step_timeout, clock.monotonic())
        self._watchdog: asyncio.Task[None] | None = None
        self.pid: int | None = None
        self._log_level = log_level
        self._launcher = launcher
        self._process: EngineProcess | None = None
        self._conn: PipeChannel | None = None
        self._ready: asyncio.Future[None] | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self._closing = False
        self._launches = 0
        self._restarts = RestartPolicy()  # when the next start is due, and Retry-After
        self.last_failure: str | None = None  # why the last start failed (the 503 of a failed load says it)
        self._after_unload = False  # the next start loads an unloaded model: not a restart
        # The stage of the start under way (the engine's Loading reports) and since when (real time:
        # a measured duration); None when no start is under way.
        self._load_stage: LoadStage | None = None
        self._load_stage_since = 0.0

    # -- lifetime ---------------------------------------------------------------------------

    async def keep_started(self) -> None:
        """Start the engine; a start that fails is logged (one line) and tried again after a delay
        that doubles with each failure in a row, up to a minute. Returns once the engine is ready;
        never raises (the model stays in the ``failed`` state, 503, meanwhile)."""
        while not self._closing:
            try:
                await self.start()
                return
            except RuntimeError as exc:
                self._on_failed_start(exc)
            await self._restarts.wait(self._clock)

    async def load_once(self) -> None:
        """One start, for a load on demand: returns once the engine is ready; a start that fails
        leaves the model ``failed`` and raises its 503 (``model_load_failed`` with the reason and
        ``Retry-After``); a later call tries again once :meth:`backoff_remaining` is over."""
        try:
            await self.start()
        except RuntimeError as exc:
            self._on_failed_start(exc)
            raise self.not_ready_error() from None

    def backoff_remaining(self) -> float:
        """Seconds before a failed model may be tried again (0 when it may be tried now)."""
        return self._restarts.remaining(self._clock.monotonic()) if self.state is EngineState.FAILED else 0.0

    def load_progress(self) -> tuple[LoadStage, float] | None:
        """The stage of the start under way and the seconds spent in it so far; None when no start
        is under way (``GET /v3/models``' ``load_stage``)."""
        if self._load_stage is None:
            return None
        return self._load_stage, time.monotonic() - self._load_stage_since

    def _enter_stage(self, stage: LoadStage | None) -> None:
        self._load_stage, self._load_stage_since = stage, time.monotonic()

    @property
    def load_seconds(self) -> float:
        """How long the last successful load took (an assumed figure before the first)."""
        return self._restarts.load_seconds

    def _on_failed_start(self, exc: RuntimeError) -> None:
        self.start_failures += 1
        self.state = EngineState.FAILED
        delay = self._restarts.start_failed(self._clock.monotonic())
        reason = " ".join(str(exc).split())  # OpenVINO's messages span lines: one log line per attempt
        self.last_failure = reason
        log.error(
            "model %r could not start (attempt %d in a row): %s; next attempt in %.0f s",
            self.spec.name, self._restarts.failures_in_a_row, reason, delay,
        )  # fmt: skip

    async def start(self) -> None:
        """One start: spawn the engine and wait until its pipeline is loaded; raises RuntimeError
        if it cannot load (see :meth:`keep_started` for the retrying lifetime)."""
        fresh = self._launches == 0 or self._after_unload
        if self.state is not EngineState.FAILED:  # a retry after failures stays "failed" until it works
            self.state = EngineState.LOADING if fresh else EngineState.RESTARTING
        self._launches += 1
        if not fresh:
            self.restarts += 1
        self._after_unload = False
        self.pid = None  # the new process's Ready tells its pid
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        started = time.monotonic()
        self._enter_stage(LoadStage.STARTING)
        parent_conn, self._process = self._launcher(self.spec, self._log_level)
        self._conn = parent_conn
        self._outbox = queue.SimpleQueue()
        writer = threading.Thread(target=self._write_loop, args=(parent_conn, self._outbox), daemon=True)
        writer.name = "ovserve-engine-writer"
        writer.start()
        loop.add_reader(parent_conn.fileno(), self._on_readable)
        try:
            await self._ready
        except BaseException:
            self._enter_stage(None)
            self._stop_process()
            raise
        self._enter_stage(None)
        self.state = EngineState.READY
        self._restarts.became_ready(time.monotonic() - started, self._clock.monotonic())
        self._stall_watch.restart(self._clock.monotonic())
        if self._watchdog is None:
            self._watchdog = loop.create_task(self._watch(), name=f"watchdog-{self.spec.name}")
        log.info(
            "model %r ready on %s (pid %s, loaded in %.1f s)",
            self.spec.name, self.spec.device, self.pid, self._restarts.load_seconds,
        )  # fmt: skip

    async def unload(self) -> None:
        """End the engine process on purpose (idle, evicted, unloaded through the API, removed from
        the config) and wait until it has exited, so that its memory is back with the OS. A start
        loads it again. The caller waits for the requests in flight first: any still open fail
        with a retryable 503."""
        for task in (self._restart_task, self._watchdog):
            if task is not None:
                task.cancel()
        self._restart_task = self._watchdog = None
        self.state = EngineState.UNLOADED
        self._enter_stage(None)
        self._after_unload = True
        self._restarts.forget()
        unloaded = f"model '{self.spec.name}' was unloaded; retry the request"
        self.fail_all(ServiceUnavailableError(unloaded, code="model_unloaded", retry_after=1))
        process, self._process = self._process, None
        self._detach()  # the engine reads EOF on its pipe and shuts down
        self.pid = None
        if process is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, process.join, _EXIT_WAIT_S)
        if process.is_alive():
            log.warning("engine of %r did not exit within %g s of its unload; killing it", self.spec.name, _EXIT_WAIT_S)
            process.kill()
            await loop.run_in_executor(None, process.join, _EXIT_WAIT_S)

    async def close(self) -> None:
        self._closing = True
        self.state = EngineState.STOPPED
        self._enter_stage(None)
        if self._restart_task is not None:
            self._restart_task.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
        self.fail_all(ServiceUnavailableError("the server is shutting down", code="shutting_down"))
        self._detach()
        process = self._process
        if process is not None and process.is_alive():
            self._outbox.put(Shutdown())
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

    def _stop_process(self) -> None:
        """Forget the current process and kill it if it still runs (a failed load, a stall)."""
        process = self._process
        self._detach()
        if process is not None and process.is_alive():
            process.kill()

    @staticmethod
    def _write_loop(conn: PipeChannel, outbox: queue.SimpleQueue[Command | None]) -> None:
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
            for events in conn.receive_ready():
                self._stall_watch.heard(self._clock.monotonic())
                for event in events:
                    self._dispatch(event)
        except (EOFError, OSError):
            self._on_engine_death()

    def _dispatch(self, event: Event) -> None:
        if self.deliver(event):  # a request's answer
            return
        match event:
            case Heartbeat(stats):
                self.last_report, self.last_report_at = stats, time.monotonic()
            case Loading(stage):
                if self._ready is not None and not self._ready.done():
                    self._enter_stage(stage)
            case Ready(pid):
                self.pid = pid
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(None)
            case Fatal(message):  # logged once, by the start that it fails
                if self._ready is not None and not self._ready.done():
                    self._ready.set_exception(RuntimeError(message))

    def _on_engine_death(self) -> None:
        was_ready = self.state is EngineState.READY
        exitcode = self._process.exitcode if self._process is not None else None
        self._detach()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(RuntimeError(f"the engine process exited while loading (exit code {exitcode})"))
        if self._closing or not was_ready:
            return
        log.error(
            "engine process of %r died (pid %s, exit code %s, %.0f s after it was ready); failing %d in-flight "
            "request(s) and restarting it",
            self.spec.name, self.pid, exitcode, self._restarts.ready_for(self._clock.monotonic()), len(self._streams),
        )  # fmt: skip
        self._replace("the engine process died while serving this request; retry the request", code="engine_died")

    def _replace(self, message: str, *, code: str) -> None:
        """Fail every request in flight with a retryable 503 and start a new engine process, at
        once if this one had served a while, else after the delay of a failed start."""
        self.state = EngineState.RESTARTING  # readiness turns 503 now
        self._restarts.engine_lost(self._clock.monotonic())
        self.fail_all(ServiceUnavailableError(message, code=code, retry_after=self.retry_after()))
        self._stop_process()
        self._restart_task = asyncio.get_running_loop().create_task(self._restart())

    # -- stall watchdog ---------------------------------------------------------------------

    async def _watch(self) -> None:
        """Kill and restart an engine that stalled (``ovserve.engine.watchdog`` tells a hung engine
        from one in a long step). Readiness turns 503 and the requests in flight get an error at once;
        a request that arrives meanwhile is refused at once instead of waiting for a dead engine."""
        interval = min(1.0, self._stall_watch.stall_timeout / 4)
        while not self._closing:
            await sleep_to_next_tick(interval, self._clock)  # with the other housekeeping (ovserve.ticks)
            if not self.ready or self._process is None:
                continue
            now = self._clock.monotonic()
            sample = self._process.sample() if self._stall_watch.wants_sample(now) else None
            finding = self._stall_watch.check(now, sample)
            if finding is None:
                continue
            engine = f"engine of {self.spec.name!r} (pid {self.pid}) {finding.why}"
            if not finding.stalled:
                log.warning("%s; %d request(s) in flight; left alone while it works", engine, self.inflight)
                continue
            self.stalls += 1
            log.error("%s; failing %d request(s) in flight, killing and restarting the engine", engine, self.inflight)
            self._replace("the engine stopped making progress; retry the request", code="engine_stalled")

    async def _restart(self) -> None:
        if self._process is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._process.join, 5.0)
        await self._restarts.wait(self._clock)
        await self.keep_started()

    def retry_after(self) -> int:
        """Seconds until this model is expected to serve again (``ovserve.engine.restarts``)."""
        return self._restarts.retry_after(self._clock.monotonic())

    # -- requests ---------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.state is EngineState.READY

    @property
    def retrying(self) -> bool:
        """A replacement for a dead or stalled process is on its way (or waits for its next attempt)."""
        return self._restart_task is not None and not self._restart_task.done()

    @property
    def running_pid(self) -> int | None:
        """The engine process's pid while this client is attached to it; None before its Ready and
        once it died, stalled or stopped (a reaped process's pid may soon be another's)."""
        return self.pid if self._conn is not None else None

    def resident_bytes(self) -> int | None:
        """The engine process's resident memory now (VmRSS); None without a running process."""
        pid = self.running_pid
        return None if pid is None else resident_memory_bytes(pid)

    def not_ready_error(self) -> ServiceUnavailableError:
        """The 503 for a request to this model while it loads, restarts, fails to start or stops."""
        if self.state is EngineState.FAILED:
            reason = f": {self.last_failure}" if self.last_failure else " (the server log has the reason)"
            return ServiceUnavailableError(
                f"model '{self.spec.name}' failed to load and will be tried again{reason}",
                code="model_load_failed",
                retry_after=self.retry_after(),
            )
        return ServiceUnavailableError(
            f"model '{self.spec.name}' is {self.state.value}; retry shortly", retry_after=self.retry_after()
        )

    def _send(self, command: Command) -> None:
        if not self.ready or self._conn is None:
            raise self.not_ready_error()
        self._outbox.put(command)

    @property
    def _connected(self) -> bool:
        return self._conn is not None

    async def generate(self, prompt: EnginePrompt, params: GenerationParams) -> AsyncGenerator[SequenceOutput, None]:
        """Yield the request's outputs as the engine produces them.

        Leaving the iteration early (client disconnect, a stop string found by the server)
        cancels the engine request: the engine frees it and confirms with :class:`RequestEnded`.
        Here rather than with the other requests (``ovserve.engine.requests``): it is the stream
        path's first generator, and the tests that count the path's generators name it.
        """
        request_id, stream = self._open(lambda request_id: AddRequest(request_id, prompt, params))
        finished = False
        try:
            while True:
                event = await stream.get()
                match event:
                    case SequenceOutput():
                        yield event
                    case RequestEnded(error=None):
                        finished = True
                        return
                    case RequestEnded(error=error, message=message):
                        finished = True
                        raise request_error(error, message)
                    case BaseException():
                        finished = True
                        raise event
                    case _:  # a retrieval result: never sent for a generation
                        finished = True
                        raise EngineError("the engine answered a generation with a retrieval result")
        finally:
            if not finished:
                self._cancel(request_id)

    async def refresh_report(self, timeout: float) -> None:
        """Ask for fresh counters (``last_report``); keep the last ones if the engine does not answer
        within ``timeout``."""
        with contextlib.suppress(OvserveError, TimeoutError):
            stats = await self.stats(timeout)
            self.last_report, self.last_report_at = stats, time.monotonic()
