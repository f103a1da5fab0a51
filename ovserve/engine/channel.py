"""The link between the server process and an engine process: two one-way pipes of framed pickles.

Contract: :func:`engine_channel` returns the server's and the engine's :class:`PipeChannel`. Each
sends on one pipe and receives on the other; a frame is an 8-byte little-endian length and a
pickle. ``send`` writes a whole frame (blocking); ``recv`` returns the next message (blocking);
:meth:`PipeChannel.receive_ready` (the server's side, whose pipe never blocks) returns every whole
message that has arrived without waiting, reading at most ~1 MiB per call, so an event loop that
calls it when the pipe is readable is never held up by a large message still being written. A
side gets ``EOFError`` once the other side's process is gone and every message has been read.

Why two pipes and not ``multiprocessing.Pipe(duplex=True)``: that is a socket pair, and a socket
has one wait queue for both directions. Every time the server read the engine's events, the
engine's socket announced free space to that queue and woke the engine's command-reader thread
(blocked in ``recv``), which found nothing and slept again: one wake per engine step on the cores
where the step's threads run (measured: 514 wakes over a 512-token stream). Why own frames: the
server read each message with ``Connection.poll`` (a ``select`` call and a new selector object),
then a blocking ``recv`` of header and body: three or four system calls per engine step where one
non-blocking ``read`` does.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

_HEADER = struct.Struct("<Q")
_READ_CHUNK = 1 << 16
_MAX_READ_PER_CALL = 1 << 20


class PipeChannel:
    """Receives on ``incoming``, sends on ``outgoing``.

    The two ``Connection`` objects only carry the pipes' descriptors (``multiprocessing`` knows how
    to hand them to a spawned process); reading and writing is done here, in frames.
    """

    def __init__(self, incoming: Connection, outgoing: Connection) -> None:
        self._incoming = incoming
        self._outgoing = outgoing
        self._buffer = bytearray()

    def fileno(self) -> int:
        """The receiving pipe's descriptor (what an event loop watches)."""
        return self._incoming.fileno()

    def send(self, obj: Any) -> None:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        frame = memoryview(_HEADER.pack(len(payload)) + payload)
        fd = self._outgoing.fileno()
        while frame:
            frame = frame[os.write(fd, frame) :]

    def recv(self) -> Any:
        """The next message; waits for it."""
        while (message := self._take_one()) is None:
            try:
                chunk = os.read(self.fileno(), _READ_CHUNK)
            except BlockingIOError:  # the server's side: wait for the pipe
                select.select([self.fileno()], [], [])
                continue
            if not chunk:
                raise EOFError("the other side of the engine channel is gone")
            self._buffer += chunk
        return message[0]

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Whether :meth:`recv` has something to read (a message, part of one, or EOF)."""
        if self._has_frame():
            return True
        readable, _, _ = select.select([self.fileno()], [], [], timeout)
        return bool(readable)

    def receive_ready(self) -> list[Any]:
        """Every whole message that has arrived, without waiting (the side made by
        :func:`engine_channel` for the server); ``EOFError`` once nothing more can come."""
        received = 0
        at_eof = False
        while received < _MAX_READ_PER_CALL:
            try:
                chunk = os.read(self.fileno(), _READ_CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                at_eof = True
                break
            self._buffer += chunk
            received += len(chunk)
            if len(chunk) < _READ_CHUNK:
                break  # the pipe is drained: skip the read that would say so
        messages = []
        while (message := self._take_one()) is not None:
            messages.append(message[0])
        if at_eof and not messages:
            raise EOFError("the other side of the engine channel is gone")
        return messages

    def close(self) -> None:
        self._incoming.close()
        self._outgoing.close()

    def _has_frame(self) -> bool:
        if len(self._buffer) < _HEADER.size:
            return False
        length: int = _HEADER.unpack_from(self._buffer)[0]
        return len(self._buffer) >= _HEADER.size + length

    def _take_one(self) -> tuple[Any] | None:
        """The next buffered message (in a 1-tuple: a message may be None), if one is whole."""
        if not self._has_frame():
            return None
        (length,) = _HEADER.unpack_from(self._buffer)
        end = _HEADER.size + length
        message = pickle.loads(self._buffer[_HEADER.size : end])
        del self._buffer[:end]
        return (message,)


def engine_channel(ctx: BaseContext) -> tuple[PipeChannel, PipeChannel]:
    """``(server side, engine side)``: commands flow one way, events the other. The server side's
    receiving pipe never blocks (:meth:`PipeChannel.receive_ready`)."""
    commands_in, commands_out = ctx.Pipe(duplex=False)
    events_in, events_out = ctx.Pipe(duplex=False)
    os.set_blocking(events_in.fileno(), False)
    return PipeChannel(events_in, commands_out), PipeChannel(commands_in, events_out)
