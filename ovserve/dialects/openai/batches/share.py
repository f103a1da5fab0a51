"""The batches' share of a model's engine: how many batch requests may be in it at once.

Policy, per model (``--batch_concurrency`` N, ``--batch_concurrency_shared`` K):

- while no interactive request of the model waits or runs (its admission's ``waiting + running``
  is 0), up to N batch requests are in the engine at once: a batch fills an idle engine;
- while any does, and for ``--batch_share_hold`` H seconds (default 5) after the last one ended,
  at most K (default 1; 0 pauses the batches): a batch request that finishes is not replaced until
  the count is below K, so the interactive requests get the engine's batch slots within about one
  batch request's time, and never wait behind queued batch requests. The hold is what makes the
  share follow interactive *traffic* rather than single requests: a chat request is far shorter
  than a batch request, so at 1 request/s the engine is free of interactive work most of each
  second, and without the hold the batch refilled all N slots between two requests, each of which
  then met N batch sequences in its first step (measured on the 0.5B model: TTFT p50 2.2 x idle);
- batch requests are admitted with ``batch=True`` (``ovserve.models.admission``): they never
  count against ``--max_queued_requests``, so a batch never pushes interactive requests into 429s.

A batch request waits here, outside the engine and before its body is even parsed; the waiting
ones are woken whenever their model's admission counts change (:meth:`Admission.watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time

from ovserve.errors import ModelNotFoundError
from ovserve.models.admission import Admission
from ovserve.models.served import ModelRegistry


class ModelShare:
    """One model's batch slots, watching that model's admission counts."""

    def __init__(self, admission: Admission, alone: int, shared: int, hold: float) -> None:
        self.admission = admission
        self.alone = alone
        self.shared = shared
        self.hold = hold
        self.inside = 0  # batch requests this share let through and not yet finished
        self.changed = asyncio.Event()
        self.busy = False  # an interactive request waited or ran at the last change of the counts
        self.shared_until = -math.inf  # monotonic time the hold after the last interactive request ends
        admission.watch(self._counts_changed)

    def _counts_changed(self) -> None:
        busy = self.admission.interactive > 0
        if self.busy and not busy and self.hold > 0:
            # only the end of interactive work starts the hold: a batch request's admission
            # changes the counts too, and must not extend it
            self.shared_until = time.monotonic() + self.hold
            with contextlib.suppress(RuntimeError):  # counts changed outside a loop: no waiter exists
                asyncio.get_running_loop().call_later(self.hold, self.changed.set)  # wake the waiters
        self.busy = busy
        self.changed.set()

    @property
    def limit(self) -> int:
        if self.admission.interactive or time.monotonic() < self.shared_until:
            return self.shared
        return self.alone

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

    def __init__(self, models: ModelRegistry, *, alone: int, shared: int, hold: float = 0.0) -> None:
        self.models = models
        self.alone = alone
        self.shared = shared
        self.hold = hold
        self._shares: dict[str, ModelShare] = {}

    def limit(self, model: str) -> int:
        """How many batch requests of ``model`` may be in its engine now."""
        return self._share(model).limit

    def taken(self, model: str) -> int:
        """How many of ``model``'s batch slots are held now."""
        return self._share(model).inside

    def _share(self, model: str) -> ModelShare:
        try:
            admission = self.models.get(model).admission
        except ModelNotFoundError:
            # A config reload removed the model mid-batch: its lines answer 404 through the
            # envelope; they keep the slots they had until then.
            if model in self._shares:
                return self._shares[model]
            raise
        share = self._shares.get(model)
        if share is None or share.admission is not admission:
            # First use, or a config reload replaced the model (a new engine, a new admission):
            # the share watches the counts of the model that serves now. Slots taken on the old one
            # go back to the old share (see release).
            share = self._shares[model] = ModelShare(admission, self.alone, self.shared, self.hold)
        return share

    async def acquire(self, model: str) -> ModelShare:
        """Take one of ``model``'s batch slots, waiting for one; give it back exactly once with
        :meth:`release` of what this returns."""
        share = self._share(model)
        await share.enter()
        return share

    def release(self, share: ModelShare) -> None:
        share.leave()
