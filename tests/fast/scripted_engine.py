"""A scripted engine that speaks the real wire protocol from a thread of the test process.

:class:`ScriptedLauncher` is an :data:`ovserve.engine.client.EngineLauncher`: ``EngineClient``
starts it instead of spawning ``ovserve.engine.worker``, gets the server's end of a real pipe,
and everything on its side (writer thread, ``add_reader``, ``_dispatch``, cancellation, death
and restart) runs as in production. The engine's end answers each :class:`AddRequest` from a
*script*: a function of the request that yields the events of one engine step at a time, and each
:class:`EmbedRequest` (an embeddings model) at once with :func:`embedding` of each text. Its
reports carry a KV cache only when its launcher has a :class:`ScriptedCache`.

The engine keeps time on a :class:`~ovserve.clock.Clock` (the real one unless a test hands it a
:class:`~ovserve.clock.ManualClock`): its heartbeats, the length of a :class:`Busy` step and the
CPU time the stall watchdog samples of it (:class:`WorkMeter`). On a clock the test moves, a long
step and a hang take no real time.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.engine.channel import PipeChannel, engine_channel
from ovserve.engine.launcher import EngineProcess
from ovserve.engine.messages import (
    AddRequest,
    CancelRequest,
    Command,
    EmbedRequest,
    EmbedResult,
    EngineErrorKind,
    EngineStats,
    Event,
    Fatal,
    Heartbeat,
    Loading,
    LoadStage,
    Ready,
    RequestEnded,
    SequenceOutput,
    Shutdown,
    StatsReply,
    StatsRequest,
)
from ovserve.engine.spec import EngineSpec
from ovserve.engine.watchdog import ProcessSample


@dataclass(frozen=True)
class ScriptedCache:
    """A paged KV cache for the scripted engine to report: each request it runs holds
    ``blocks_per_request`` of ``num_blocks`` blocks of ``block_size`` tokens (``block_bytes`` each)."""

    block_size: int = 32
    num_blocks: int = 100
    blocks_per_request: int = 10
    block_bytes: int = 4096

    def stats(self, running: int) -> EngineStats:
        used = min(self.num_blocks, running * self.blocks_per_request)
        return EngineStats(
            running,
            0,
            running,
            running,
            used / self.num_blocks,
            kv_cache_bytes=self.num_blocks * self.block_bytes,
            block_size=self.block_size,
            num_blocks=self.num_blocks,
        )


def no_cache_stats(running: int) -> EngineStats:
    """What an engine without a paged KV cache of its own reports (the default)."""
    return EngineStats(running, 0, running, running, 0.0)


class Die:
    """A script step that kills the engine: its end of the pipe closes, as when a process dies."""


DIE = Die()


@dataclass(frozen=True)
class Busy:
    """A script step that works in silence, as a long prefill does inside one ``step()``: the
    engine sends nothing until its clock has moved ``seconds`` on, and its CPU time grows
    meanwhile by ``cpu_share`` of a core (all of one; less on a crowded machine)."""

    seconds: float
    cpu_share: float = 1.0


class WorkMeter:
    """The scripted engine's CPU time, on its clock: it grows by the share of a core of the step at
    work and stands still otherwise (idle, or hung: a deadlocked or stopped process uses none).
    What the watchdog reads of a real engine from ``/proc`` (``tests/unit/test_stall_watch.py``
    reads a real process's), without a thread that burns a core for real seconds."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # the engine's thread starts and stops work; the loop samples
        self._seconds = 0.0
        self._share = 0.0
        self._since = clock.monotonic()
        self._halted = False

    def work(self, share: float) -> None:
        with self._lock:
            self._settle()
            self._share = 0.0 if self._halted else share

    def halt(self) -> None:
        """No more work, ever: the engine hung."""
        with self._lock:
            self._settle()
            self._share = 0.0
            self._halted = True

    def rest(self) -> None:
        with self._lock:
            self._settle()
            self._share = 0.0

    @property
    def working(self) -> bool:
        return self._share > 0

    def seconds(self) -> float:
        with self._lock:
            self._settle()
            return self._seconds

    def _settle(self) -> None:
        now = self._clock.monotonic()
        self._seconds += self._share * (now - self._since)
        self._since = now


Step = list[Event] | Die | Busy
Script = Callable[[AddRequest], Iterable[Step]]

_pids = itertools.count(90_000)

# As the real engine: a report at least this often, idle or busy (ovserve.engine.loop).
HEARTBEAT_INTERVAL_S = 0.2


def output(
    add: AddRequest, text: str, *, index: int = 0, tokens: int = 1, finish: str | None = None, logprobs: bool = False
) -> SequenceOutput:
    """One sequence's new text; with ``logprobs``, one entry per character (the fake tokens)."""
    entries = [(ord(char), char, -0.5) for char in text] if logprobs else None
    return SequenceOutput(add.request_id, index, text, tokens, entries, finish)


def reply(*pieces: str, finish: str = "stop", tokens: int = 1) -> Script:
    """A script: each piece is one step of choice 0 (``tokens`` tokens each); the last one finishes."""

    def script(add: AddRequest) -> Iterator[Step]:
        for position, piece in enumerate(pieces):
            last = position == len(pieces) - 1
            yield [output(add, piece, tokens=tokens, finish=finish if last else None, logprobs=add.params.logprobs)]
        yield [RequestEnded(add.request_id)]

    return script


def held_reply(pieces: int, release: threading.Event, piece: str = "word ") -> Script:
    """A script: a stream of ``pieces`` pieces that stays in flight after its first until the test
    sets ``release`` (a stream that lasts as long as the test needs, without a fixed sleep)."""

    def script(add: AddRequest) -> Iterator[Step]:
        for position in range(pieces):
            if position == 1 and not release.wait(timeout=60):
                raise TimeoutError("held_reply: the test never released the stream")
            yield [output(add, piece, finish="stop" if position == pieces - 1 else None)]

    return script


def embedding(text: str) -> list[float]:
    """The scripted engine's embedding of ``text``: a unit vector that depends on its length."""
    angle = len(text) / 10
    return [float(np.cos(angle)), float(np.sin(angle)), 0.0, 0.0]


def end_with(error: EngineErrorKind, message: str) -> Script:
    """A script: the engine ends the request at once with ``error`` (refused, ignored, failed)."""

    def script(add: AddRequest) -> Iterator[Step]:
        yield [RequestEnded(add.request_id, error, message)]

    return script


@dataclass
class ScriptedEngine:
    """The engine's end of the pipe: one thread that reads commands and "steps" the scripts."""

    conn: PipeChannel
    script: Script
    gate: threading.Event  # Ready is sent once this is set (a model that is still compiling)
    fatal: str | None = None  # sent instead of Ready: the pipeline could not be built
    step_interval_s: float = 0.001
    clock: Clock = SYSTEM_CLOCK  # its time: heartbeats, Busy steps, CPU time
    hung: threading.Event = field(default_factory=threading.Event)  # set: the engine hangs (SIGSTOP)
    received: list[Command] = field(default_factory=list)
    exitcode: int | None = None
    pid: int = field(default_factory=lambda: next(_pids))
    launched_at: float = 0.0  # on its clock
    stats: Callable[[int], EngineStats] = no_cache_stats  # its report with this many requests running
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    busy_steps: int = 0  # Busy steps worked to their end
    meter: WorkMeter = field(init=False)  # its CPU time

    def __post_init__(self) -> None:
        self.launched_at = self.clock.monotonic()
        self.meter = WorkMeter(self.clock)

    # -- EngineProcess -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"scripted-engine-{self.pid}", daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def kill(self) -> None:
        self._stop.set()

    def sample(self) -> ProcessSample | None:
        """Its state and CPU time (:class:`WorkMeter`), as the watchdog reads a process's; None once
        it ended, as for a reaped process."""
        if not self.is_alive():
            return None
        return ProcessSample(state="R" if self.meter.working else "S", cpu_seconds=self.meter.seconds())

    def hang(self) -> None:
        """Hang now, as after SIGSTOP or a deadlock: no word, no command read, no CPU used from this
        instant of its clock (not from whenever its thread notices)."""
        self.meter.halt()
        self.hung.set()

    # -- the engine loop ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.exitcode = self._serve()
        except (EOFError, OSError):  # the server closed its end
            self.exitcode = 0
        finally:
            self.conn.close()

    def _serve(self) -> int:
        # As the real engine reports its load: compiling until the gate opens, then warming up.
        self.conn.send([Loading(LoadStage.COMPILING)])
        while not self.gate.wait(0.01):
            if self._stop.is_set():
                return -9
        if self.fatal is not None:
            self.conn.send([Fatal(self.fatal)])
            return 1
        self.conn.send([Loading(LoadStage.WARMING_UP), Ready(self.pid)])
        active: dict[int, Iterator[Step]] = {}
        last_beat = 0.0
        while not self._stop.is_set():
            events: list[Event] = []
            if self.hung.is_set():  # as a stopped process: no word, no command read
                self._stop.wait(0.01)
                continue
            if self.clock.monotonic() - last_beat >= HEARTBEAT_INTERVAL_S:  # alive, idle or busy
                events.append(Heartbeat(self.stats(len(active))))
                last_beat = self.clock.monotonic()
            # Like the real loop: wait for a command only when nothing is running.
            if self.conn.poll(self.step_interval_s if active else 0.05):
                while self.conn.poll():
                    command: Command = self.conn.recv()
                    self.received.append(command)
                    match command:
                        case AddRequest(request_id):
                            active[request_id] = iter(self.script(command))
                        case EmbedRequest(request_id, texts):
                            vectors = np.array([embedding(text) for text in texts], dtype=np.float32)
                            events.append(EmbedResult(request_id, vectors))
                        case CancelRequest(request_id):
                            if active.pop(request_id, None) is not None:
                                events.append(RequestEnded(request_id))
                        case StatsRequest(token):
                            events.append(StatsReply(token, self.stats(len(active))))
                        case Shutdown():
                            return 0
            for request_id, steps in list(active.items()):
                step = next(steps, None)
                if isinstance(step, Die):
                    return -9  # the pipe closes without another word
                if isinstance(step, Busy):
                    self._work(step)
                    continue
                if step is None:  # a script that stops without saying so: the engine ends it
                    step = [RequestEnded(request_id)]
                events.extend(step)
                if any(isinstance(event, RequestEnded) for event in step):
                    del active[request_id]
            # One list per step, as the real engine sends; none once hung in the step (a heartbeat
            # due before it is not sent after it).
            if events and not self.hung.is_set():
                self.conn.send(events)
        return -9

    def _work(self, step: Busy) -> None:
        """Work without a word until the clock has moved ``step.seconds`` on, the engine is killed
        or it hangs. The thread only looks at the clock (a test's moves by hand): the work is the
        meter's, not a core's."""
        deadline = self.clock.monotonic() + step.seconds
        self.meter.work(step.cpu_share)
        try:
            while self.clock.monotonic() < deadline:
                if self._stop.wait(0.001) or self.hung.is_set():
                    return
        finally:
            self.meter.rest()
        self.busy_steps += 1

    def adds(self) -> list[AddRequest]:
        return [command for command in self.received if isinstance(command, AddRequest)]

    def cancels(self) -> list[int]:
        return [command.request_id for command in self.received if isinstance(command, CancelRequest)]


@dataclass
class ScriptedLauncher:
    """Starts a :class:`ScriptedEngine` each time the client (re)starts its engine."""

    script: Script
    gate: threading.Event = field(default_factory=threading.Event)
    fatal: str | None = None
    clock: Clock = SYSTEM_CLOCK  # its engines' (ScriptedEngine.clock)
    cache: ScriptedCache | None = None  # the KV cache its engines report (None: none)
    launched: list[ScriptedEngine] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.gate.set()  # loaded at once unless a test clears it

    def __call__(self, spec: EngineSpec, log_level: int) -> tuple[PipeChannel, EngineProcess]:
        server_end, engine_end = engine_channel(multiprocessing.get_context())
        # Through the launcher: a test may swap the script between requests.
        engine = ScriptedEngine(engine_end, lambda add: self.script(add), self.gate, self.fatal, clock=self.clock)
        if self.cache is not None:
            engine.stats = self.cache.stats
        engine.start()
        self.launched.append(engine)
        return server_end, engine

    @property
    def engine(self) -> ScriptedEngine:
        """The engine started last."""
        return self.launched[-1]
