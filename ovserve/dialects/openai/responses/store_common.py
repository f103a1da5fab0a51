"""What both Responses store backends share: the operations their faults are counted by,
:class:`StoreFault`, the rate-limited fault log, :class:`StoreSettingError`, and the age bound
(``--responses_store_max_age``).

Expiry by age, the same on both backends: a row keeps the Unix time it was written (``created``,
from the store's clock, :mod:`ovserve.clock`). Once it is older than ``max_age`` seconds it is
expired: ``get`` and ``delete`` treat it exactly as an unknown id (so ``GET`` and
``previous_response_id`` answer the same 404), and the next write deletes it -- every expired row,
in the write's own transaction, as eviction by the bounds -- as does opening the store. Nothing
runs in the background, so expiry can never fail a request. The age counts from the write, not
from the last read: a conversation that goes on is written again at each turn (a new response
holds the whole conversation), so only a conversation left alone for ``max_age`` expires. None:
no age bound.
"""

from __future__ import annotations

import logging
import time

# The store's own logger: its messages are known (and filtered) by it, whichever module writes them.
log = logging.getLogger("ovserve.dialects.openai.responses.store")

# What faults are counted by (ovserve_responses_store_failures_total{operation}). HOUSEKEEPING is
# store work no caller waits for: the LRU mark of a read, WAL checkpoints, opening at start-up.
PUT, GET, DELETE, HOUSEKEEPING = "put", "get", "delete", "housekeeping"
OPERATIONS = (PUT, GET, DELETE, HOUSEKEEPING)

_WARNING_INTERVAL_S = 60.0
# The cutoff of a store without an age bound: every row was written after it (SQLite and
# PostgreSQL both order -inf below every float).
NO_CUTOFF = float("-inf")


class StoreFault(Exception):
    """The store's disk or database failed (full, read-only, deleted, unreachable), so the call
    could not be done. Already logged and counted; the cause is chained."""


class StoreSettingError(ValueError):
    """A store setting that cannot work (a URL libpq cannot read, a password file that cannot be
    read): the server does not start. The message names the flag and never quotes a secret."""


def expiry_cutoff(now: float, max_age: float | None) -> float:
    """The ``created`` time before which a row is expired, at Unix time ``now``."""
    return NO_CUTOFF if max_age is None else now - max_age


class FaultLog:
    """Fault warnings, at most one per interval: a full disk under a busy server is one line a
    minute that counts the faults it stands for, not one line per request. Recovery (a write that
    works again) is told once, and only after a fault that was told."""

    def __init__(self, interval: float = _WARNING_INTERVAL_S) -> None:
        self._interval = interval
        self._quiet_until = float("-inf")
        self._untold = 0
        self._told = False

    def fault(self, operation: str, what: str) -> None:
        now = time.monotonic()
        if now < self._quiet_until:
            self._untold += 1
            return
        more = f" (and {self._untold} more store faults since the last warning)" if self._untold else ""
        log.warning(
            "responses store: %s failed: %s%s; responses are still served, but not stored, and stored ones "
            "may be out of reach (503) until the store works again",
            operation,
            what,
            more,
        )
        self._quiet_until, self._untold, self._told = now + self._interval, 0, True

    def recovered(self) -> None:
        if self._told:
            more = f" ({self._untold} more store faults since the last warning)" if self._untold else ""
            self._told, self._untold = False, 0
            log.info("responses store: writing again%s", more)
