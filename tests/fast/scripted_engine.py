"""A scripted engine that speaks the real wire protocol from a thread of the test process.

:class:`ScriptedLauncher` is an :data:`ovserve.engine.client.EngineLauncher`: ``EngineClient``
starts it instead of spawning ``ovserve.engine.worker``, gets the server's end of a real pipe,
and everything on its side (writer thread, ``add_reader``, ``_dispatch``, cancellation, death
and restart) runs as in production. The engine's end answers each :class:`AddRequest` from a
*script*: a function of the request that yields the events of one engine step at a time, and each
:class:`EmbedRequest` (an embeddings model) at once with :func:`embedding` of each text.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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
    Ready,
    RequestEnded,
    SequenceOutput,
    Shutdown,
    StatsReply,
    StatsRequest,
)
from ovserve.engine.spec import EngineSpec
from ovserve.engine.watchdog import ProcessSample, read_process_sample


class Die:
    """A script step that kills the engine: its end of the pipe closes, as when a process dies."""


DIE = Die()


@dataclass(frozen=True)
class Busy:
    """A script step that works in silence: the engine's thread burns CPU for ``seconds`` (wall
    clock) and sends nothing, as a long prefill does inside one ``step()``."""

    seconds: float


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
    gate: threading.Event  # Ready is sent once this is set (a model that is still loading)
    fatal: str | None = None  # sent instead of Ready: the pipeline could not be built
    step_interval_s: float = 0.001
    hung: threading.Event = field(default_factory=threading.Event)  # set: the engine hangs (SIGSTOP)
    received: list[Command] = field(default_factory=list)
    exitcode: int | None = None
    pid: int = field(default_factory=lambda: next(_pids))
    launched_at: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    busy_steps: int = 0  # Busy steps worked to their end

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
        """The engine thread's own state and CPU time (its /proc task), as the watchdog reads a process's."""
        if self._thread is None or self._thread.native_id is None:
            return None
        return read_process_sample(Path(f"/proc/{os.getpid()}/task/{self._thread.native_id}/stat"))

    # -- the engine loop ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.exitcode = self._serve()
        except (EOFError, OSError):  # the server closed its end
            self.exitcode = 0
        finally:
            self.conn.close()

    def _serve(self) -> int:
        while not self.gate.wait(0.01):
            if self._stop.is_set():
                return -9
        if self.fatal is not None:
            self.conn.send([Fatal(self.fatal)])
            return 1
        self.conn.send([Ready(self.pid)])
        active: dict[int, Iterator[Step]] = {}
        last_beat = 0.0
        while not self._stop.is_set():
            events: list[Event] = []
            if self.hung.is_set():  # as a stopped process: no word, no command read
                self._stop.wait(0.01)
                continue
            if time.monotonic() - last_beat >= HEARTBEAT_INTERVAL_S:  # alive, idle or busy
                events.append(Heartbeat(EngineStats(len(active), 0, len(active), len(active), 0.0)))
                last_beat = time.monotonic()
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
                            running = len(active)
                            events.append(StatsReply(token, EngineStats(running, 0, running, running, 0.0)))
                        case Shutdown():
                            return 0
            for request_id, steps in list(active.items()):
                step = next(steps, None)
                if isinstance(step, Die):
                    return -9  # the pipe closes without another word
                if isinstance(step, Busy):
                    self._work(step.seconds)
                    continue
                if step is None:  # a script that stops without saying so: the engine ends it
                    step = [RequestEnded(request_id)]
                events.extend(step)
                if any(isinstance(event, RequestEnded) for event in step):
                    del active[request_id]
            if events:
                self.conn.send(events)  # one list per step, as the real engine sends
        return -9

    def _work(self, seconds: float) -> None:
        """Burn CPU without a word until ``seconds`` have passed, the engine is killed or it hangs."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._stop.is_set() or self.hung.is_set():
                return
            sum(range(1_000))
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
    launched: list[ScriptedEngine] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.gate.set()  # loaded at once unless a test clears it

    def __call__(self, spec: EngineSpec, log_level: int) -> tuple[PipeChannel, EngineProcess]:
        server_end, engine_end = engine_channel(multiprocessing.get_context())
        # Through the launcher: a test may swap the script between requests.
        engine = ScriptedEngine(engine_end, lambda add: self.script(add), self.gate, self.fatal)
        engine.start()
        self.launched.append(engine)
        return server_end, engine

    @property
    def engine(self) -> ScriptedEngine:
        """The engine started last."""
        return self.launched[-1]
