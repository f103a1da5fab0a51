"""What every engine loop shares: the reader thread that moves commands from the pipe into a queue,
the one place commands are drained from that queue, sending events, when a heartbeat is due, and
the messages a client is told when the engine ends its request.

Contract for a loop (``continuous``, ``stateful``, ``retrieval_loop``): only its own thread touches
the pipeline; it reports (a ``Heartbeat`` or any event) at least every :data:`HEARTBEAT_INTERVAL_S`
between pipeline calls, idle or busy, because the server's watchdog takes silence without CPU use
for a hang (``ovserve.engine.watchdog``; inside one long call, its CPU time speaks for it).
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ovserve.engine.channel import PipeChannel
from ovserve.engine.detokenizer import Detokenizer
from ovserve.engine.messages import Command, EngineStats, Event, GenerationParams, Heartbeat, Shutdown

log = logging.getLogger("ovserve.engine")

# The engine reports its state (and so that it is alive) at least this often between pipeline calls,
# idle or busy: the server's watchdog takes silence without CPU use for a hang (ovserve.engine.watchdog).
HEARTBEAT_INTERVAL_S = 1.0
# Finished and cancelled handles stay referenced this many steps: the pipeline frees a request in
# the step after it ends and updates its metrics one step later.
STEPS_TO_FREE = 2
# Vocabularies up to this size get a token-piece table (~70 bytes per id); 256k covers Gemma's.
_MAX_VOCAB_PIECES = 300_000

# What a client is told; the engine's own message is logged.
REFUSED = "the engine refused the request's generation settings (the server log has the engine's reason)"
IGNORED = "the engine could not schedule the request (not enough KV cache for its prompt)"
FAILED = "the engine failed while generating this request; retry it (the server log has the details)"


@dataclass(slots=True)
class Admitted:
    """A VLM request whose ``add_request`` ran on the admission thread (engine-internal, never on the wire)."""

    request_id: int
    params: GenerationParams
    future: concurrent.futures.Future[Any]


class LoopBase:
    """What both engine loops share: the pipe, the command queue its reader thread fills, sending."""

    def __init__(self, pipe: Any, conn: PipeChannel) -> None:
        self._pipe = pipe
        # Retrieval pipelines keep their tokenizer to themselves (and need none here).
        self._tokenizer: Any = pipe.get_tokenizer() if hasattr(pipe, "get_tokenizer") else None
        self._conn = conn
        self._commands: queue.SimpleQueue[Command | Admitted] = queue.SimpleQueue()
        self._send_lock = threading.Lock()
        self._running = True
        self._last_beat = 0.0

    def start_reader(self) -> None:
        threading.Thread(target=self._read_commands, name="ovserve-engine-reader", daemon=True).start()

    def _read_commands(self) -> None:
        while True:
            try:
                command: Command = self._conn.recv()
            except (EOFError, OSError):
                self._commands.put(Shutdown())
                return
            if self._on_command_received(command):
                self._commands.put(command)

    def _queued(self, wait: float | None) -> Iterator[Command | Admitted]:
        """The commands waiting, in order; with ``wait``, up to that long for the first one (idle
        loops wait no longer than a heartbeat). The one place every loop drains its queue."""
        try:
            yield self._commands.get(block=wait is not None, timeout=wait)
        except queue.Empty:
            return
        while True:
            try:
                yield self._commands.get(block=False)
            except queue.Empty:
                return

    def _on_command_received(self, command: Command) -> bool:
        """Runs on the reader thread; False when the command was fully handled there."""
        return True

    def _stats(self) -> EngineStats:
        """The loop's state now, as its heartbeats and stats replies carry it."""
        raise NotImplementedError

    def _due_heartbeat(self, now: float, *, force: bool = False) -> Heartbeat | None:
        """The heartbeat to send now, if one is due: :data:`HEARTBEAT_INTERVAL_S` after the last
        one, or at once with ``force``."""
        if not force and now - self._last_beat < HEARTBEAT_INTERVAL_S:
            return None
        self._last_beat = now
        return Heartbeat(self._stats())

    def _beat(self, *, force: bool = False) -> None:
        """Send the heartbeat, if one is due (see :meth:`_due_heartbeat`)."""
        heartbeat = self._due_heartbeat(time.monotonic(), force=force)
        if heartbeat is not None:
            self._send([heartbeat])

    def _send(self, events: list[Event]) -> None:
        try:
            with self._send_lock:  # the stateful loop sends from its reader thread too
                self._conn.send(events)
        except (BrokenPipeError, OSError):
            self._running = False  # the server is gone; nothing left to serve


def serial_stats(outstanding: int, *, busy: bool) -> EngineStats:
    """The stats of a loop that runs one request at a time (stateful, retrieval and speech): the
    requests it holds, and whether one is running; no KV cache of its own to report."""
    return EngineStats(
        active_requests=outstanding,
        releasing_requests=0,
        engine_requests=int(busy),
        scheduled_requests=int(busy),
        cache_usage=0.0,
    )


def detokenizer(tokenizer: Any, vocab_size: int | None) -> Detokenizer:
    """The loop's detokenizer, with token pieces when the vocabulary's size is known and not huge."""
    detokenizer = Detokenizer(tokenizer)
    if vocab_size is not None and vocab_size <= _MAX_VOCAB_PIECES:
        started = time.monotonic()
        detokenizer.learn_pieces(vocab_size)
        log.debug("token pieces of %d ids in %.2f s", vocab_size, time.monotonic() - started)
    return detokenizer
