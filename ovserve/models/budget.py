"""The memory budget of the loaded models (``--models_memory_budget``): what they take, whether a
load fits, which idle model an eviction takes, and waiting for room.

Contract (``ovserve.models.manager`` takes the decisions; this is the arithmetic and the waiting):

- what the budget counts for a model is ``Residency.accounted`` (0 unless resident);
- :meth:`MemoryBudget.place` reserves a load's estimate, evicting idle, unpinned, resident models
  least recently used first (through the manager's ``evict``); with nothing to evict it waits for
  room while a request still waits for the load, then raises :meth:`MemoryBudget.full_error`; an
  estimate over the whole budget is refused at once (``ModelTooLargeError``). Pinned models and a
  server without a budget are placed at once. Placements are serialised by one lock;
- :meth:`MemoryBudget.changed` wakes whoever waits for room (a request ended, a model unloaded).

Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

from ovserve.engine.client import EngineState
from ovserve.errors import ModelTooLargeError, ServiceUnavailableError
from ovserve.models.residency import SAMPLE_INTERVAL_S
from ovserve.models.served import ServedModel

log = logging.getLogger(__name__)

# Retry-After (s) of a request that found no room in the budget before its deadline.
_CAPACITY_RETRY_AFTER_S = 5


def mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB"


class MemoryBudget:
    """The budget of ``models()`` (the models a manager manages); ``limit`` None: no budget."""

    def __init__(self, limit: int | None, models: Callable[[], Iterable[ServedModel]]) -> None:
        self.limit = limit
        self._models = models
        self._placement = asyncio.Lock()
        self._room = asyncio.Event()  # set (and replaced) whenever room may have been made

    def in_use(self) -> int:
        """What the resident models take, as the budget counts it."""
        return sum(model.residency.accounted() for model in self._models())

    def usage(self) -> str:
        """For the logs: what is in use of the budget."""
        return f"{mib(self.in_use())} of {mib(self.limit)} budget in use" if self.limit else "no budget"

    def reserve_at_start(self, model: ServedModel) -> bool:
        """Count a model loaded at start against the budget; False (it loads on demand instead)
        when it does not fit next to those before it. Pinned models always load."""
        residency = model.residency
        need = residency.estimate()
        if self.limit is not None and self.in_use() + need > self.limit:
            if not residency.pinned:
                log.info(
                    "model %r loads on its first request: its estimated %s does not fit next to %s in use "
                    "(--models_memory_budget %s)",
                    model.name, mib(need), mib(self.in_use()), mib(self.limit),
                )  # fmt: skip
                model.engine.state = EngineState.UNLOADED
                return False
            log.warning(
                "pinned model %r (estimated %s) takes the models past --models_memory_budget (%s in use of %s)",
                model.name, mib(need), mib(self.in_use() + need), mib(self.limit),
            )  # fmt: skip
        residency.resident, residency.reserved = True, need
        return True

    async def place(self, model: ServedModel, evict: Callable[[ServedModel], Awaitable[None]]) -> None:
        """Reserve the model's estimate, evicting idle models least recently used first; wait for
        room while a request still waits for this load (see the module doc)."""
        residency = model.residency
        need = residency.estimate()
        budget = self.limit
        if budget is None or residency.pinned:
            residency.resident, residency.reserved = True, need
            return
        if need > budget:
            raise ModelTooLargeError(
                f"model '{model.name}' needs about {mib(need)}, more than the whole --models_memory_budget "
                f"({mib(budget)}): it cannot be loaded on this server"
            )
        residency.placing = True
        try:
            while True:
                async with self._placement:
                    if self.in_use() + need <= budget:
                        residency.resident, residency.reserved = True, need
                        return
                    victim = self._victim(exclude=model)
                    if victim is not None:
                        log.info(
                            "evicting model %r (idle %.0f s, %s) to load %r (about %s; %s of %s in use)",
                            victim.name, victim.residency.idle_for(), mib(victim.residency.accounted()),
                            model.name, mib(need), mib(self.in_use()), mib(budget),
                        )  # fmt: skip
                        await evict(victim)
                        continue
                    room_made = self._room
                if residency.waiting == 0:  # every request that wanted it left
                    raise self.full_error(model)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(room_made.wait(), SAMPLE_INTERVAL_S)
        finally:
            residency.placing = False

    def _victim(self, exclude: ServedModel) -> ServedModel | None:
        """The least recently used model that may be evicted: resident, unpinned, idle, not being
        loaded or unloaded, its engine ready or failed (not in the middle of a start)."""
        candidates = [
            model
            for model in self._models()
            if model is not exclude
            and model.residency.resident
            and not (model.residency.pinned or model.residency.busy or model.residency.changing)
            and not model.residency.retiring
            and model.engine.state in (EngineState.READY, EngineState.FAILED)
        ]
        return min(candidates, key=lambda model: model.residency.last_used_at, default=None)

    def full_error(self, model: ServedModel) -> ServiceUnavailableError:
        """The 503 of a request whose model found no room before its deadline."""
        return ServiceUnavailableError(
            f"no room for model '{model.name}' in --models_memory_budget ({mib(self.limit or 0)}): the loaded "
            f"models ({mib(self.in_use())}) are pinned or busy; retry later",
            code="model_capacity_exceeded",
            retry_after=_CAPACITY_RETRY_AFTER_S,
        )

    def changed(self) -> None:
        """Room may have been made (a request ended, a model unloaded): wake the loads that wait."""
        self._room.set()
        self._room = asyncio.Event()

    async def wait_for_change(self, timeout: float) -> None:
        """Until :meth:`changed`, or ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._room.wait(), timeout)
