"""The batches' share of a model's engine: how many batch requests may be in it at once.

Policy, per model (``--batch_concurrency`` N, ``--batch_concurrency_shared`` K):

- while no interactive request of the model waits or runs (its admission's ``waiting + running``
  is 0), up to N batch requests are in the engine at once: a batch fills an idle engine;
- while any does, at most K (default 1; 0 pauses the batches): a batch request that finishes is
  not replaced until the count is below K, so the interactive requests get the engine's batch
  slots within about one batch request's time, and never wait behind queued batch requests;
- batch requests are admitted with ``batch=True`` (``ovserve.models.admission``): they never
  count against ``--max_queued_requests``, so a batch never pushes interactive requests into 429s.

A batch request waits here, outside the engine and before its body is even parsed; the waiting
ones are woken whenever their model's admission counts change (:meth:`Admission.watch`).
"""

from __future__ import annotations

import asyncio

from ovserve.models.admission import Admission
from ovserve.models.served import ModelRegistry


class _ModelShare:
    def __init__(self, admission: Admission, alone: int, shared: int) -> None:
        self.admission = admission
        self.alone = alone
        self.shared = shared
        self.inside = 0  # batch requests this share let through and not yet finished
        self.changed = asyncio.Event()
        admission.watch(self.changed.set)

    @property
    def limit(self) -> int:
        return self.shared if self.admission.interactive else self.alone

    async def enter(self) -> None:
        while self.inside >= self.limit:
            self.changed.clear()
            await self.changed.wait()
        self.inside += 1

    def leave(self) -> None:
        self.inside -= 1
        self.changed.set()


class BatchShare:
    """The policy above over the served ``models``."""

    def __init__(self, models: ModelRegistry, *, alone: int, shared: int) -> None:
        self.models = models
        self.alone = alone
        self.shared = shared
        self._shares: dict[str, _ModelShare] = {}

    def limit(self, model: str) -> int:
        """How many batch requests of ``model`` may be in its engine now."""
        return self._share(model).limit

    def taken(self, model: str) -> int:
        """How many of ``model``'s batch slots are held now."""
        return self._share(model).inside

    def _share(self, model: str) -> _ModelShare:
        share = self._shares.get(model)
        if share is None:
            share = self._shares[model] = _ModelShare(self.models.get(model).admission, self.alone, self.shared)
        return share

    async def acquire(self, model: str) -> None:
        """Take one of ``model``'s batch slots, waiting for one; :meth:`release` it exactly once."""
        await self._share(model).enter()

    def release(self, model: str) -> None:
        self._share(model).leave()
