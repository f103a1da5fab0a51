"""How an engine process is started: what the client needs of it, and the real launcher.

:data:`EngineLauncher` is what :class:`~ovserve.engine.client.EngineClient` calls to start an
engine: :func:`spawn_engine` in production, an in-process stand-in speaking the same protocol in
the fast tests.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Protocol

from ovserve.engine.channel import PipeChannel, engine_channel
from ovserve.engine.spec import EngineSpec
from ovserve.engine.watchdog import ProcessSample, read_process_sample


class EngineProcess(Protocol):
    """What the client needs of an engine's process (a ``multiprocessing.Process``)."""

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...

    def kill(self) -> None: ...

    def sample(self) -> ProcessSample | None:
        """Its run state and the CPU time it used so far (the stall watchdog's evidence of work);
        None when that cannot be read."""
        ...


EngineLauncher = Callable[[EngineSpec, int], tuple[PipeChannel, EngineProcess]]
"""Starts an engine for ``(spec, log_level)``; returns the server's side of its channel and its process.

The engine reports each stage of its load on the pipe (:class:`Loading`), answers with :class:`Ready`
(or :class:`Fatal`) and then serves commands;
its death shows as EOF on the pipe.
"""


def spawn_engine(spec: EngineSpec, log_level: int) -> tuple[PipeChannel, EngineProcess]:
    """The real engine: ``ovserve.engine.worker.main`` in a spawned process."""
    from ovserve.engine import worker

    ctx = multiprocessing.get_context("spawn")
    server_side, engine_side = engine_channel(ctx)
    process = ctx.Process(
        target=worker.main,
        args=(engine_side, spec, log_level),
        name=f"ovserve-engine-{spec.name}",
        daemon=True,
    )
    process.start()
    engine_side.close()  # so that the child's death shows up as EOF here
    return server_side, SpawnedEngine(process)


class SpawnedEngine:
    """A spawned engine process (:class:`EngineProcess`): ``multiprocessing``'s process, and its
    ``/proc/<pid>/stat`` (all its threads' CPU time) for the watchdog."""

    def __init__(self, process: BaseProcess) -> None:
        self._process = process

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode

    def is_alive(self) -> bool:
        return self._process.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._process.join(timeout)

    def kill(self) -> None:
        self._process.kill()

    def sample(self) -> ProcessSample | None:
        # The watchdog samples only an engine it is attached to: a dead one's pipe reports EOF and
        # detaches it long before its pid could be handed to another process.
        pid = self._process.pid
        return None if pid is None else read_process_sample(Path(f"/proc/{pid}/stat"))
