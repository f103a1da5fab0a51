"""How an engine process is started: what the client needs of it, and the real launcher.

:data:`EngineLauncher` is what :class:`~ovserve.engine.client.EngineClient` calls to start an
engine: :func:`spawn_engine` in production, an in-process stand-in speaking the same protocol in
the fast tests.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Protocol

from ovserve.engine.channel import PipeChannel, engine_channel
from ovserve.engine.spec import EngineSpec


class EngineProcess(Protocol):
    """What the client needs of an engine's process (a ``multiprocessing.Process``)."""

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...

    def kill(self) -> None: ...


EngineLauncher = Callable[[EngineSpec, int], tuple[PipeChannel, EngineProcess]]
"""Starts an engine for ``(spec, log_level)``; returns the server's side of its channel and its process.

The engine answers on the pipe with :class:`Ready` (or :class:`Fatal`) and then serves commands;
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
    return server_side, process
