"""Stored responses (``store: true``), for ``previous_response_id`` and ``GET``/``DELETE /v3/responses/{id}``.

One SQLite database (the standard library's ``sqlite3``): ``--responses_store memory`` (the
default) keeps it in memory for the life of the process, a file path keeps it across restarts,
``none`` stores nothing (``previous_response_id`` is then a 400).

Each row holds one response object (what ``GET`` returns) and the whole conversation that led to
it, as Responses input items: the previous response's conversation, this request's input items,
then this response's output items. A row is self-contained, so evicting or deleting one response
never breaks another one's continuation; the price is that a chain of N turns stores the early
turns N times, which the byte bound accounts for.

Bounds: ``--responses_store_max_count`` rows and ``--responses_store_max_mb`` of stored JSON; past
either, the least recently used rows (written, read by ``GET`` or continued) are evicted first.

Threading: every statement runs on one dedicated thread, which owns the connection (an in-memory
database exists only for the connection that made it), so the event loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ovserve.service.threads import started_thread

log = logging.getLogger(__name__)

MEMORY = "memory"
DISABLED = "none"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    used INTEGER NOT NULL,      -- the LRU clock: larger is more recent
    size INTEGER NOT NULL,      -- bytes of response + conversation
    response TEXT NOT NULL,     -- the response object, as GET returns it
    conversation TEXT NOT NULL  -- JSON list of input items: the history this response continues
);
CREATE INDEX IF NOT EXISTS responses_used ON responses (used);
"""


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    conversation: list[dict[str, Any]]


class ResponseStore:
    """The bounded store; ``location`` is :data:`MEMORY`, :data:`DISABLED` or a database file path."""

    def __init__(self, location: str, *, max_count: int, max_bytes: int) -> None:
        self.location = location
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None
        self._clock = 0
        if self.enabled:
            self._thread = started_thread("responses-store")
            self._thread.submit(self._open).result()

    @property
    def enabled(self) -> bool:
        return self.location != DISABLED

    # -- the store's thread ----------------------------------------------------------------

    def _open(self) -> None:
        if self.location == MEMORY:
            target = ":memory:"
        else:
            path = Path(self.location)
            path.parent.mkdir(parents=True, exist_ok=True)
            target = str(path)
        db = sqlite3.connect(target, isolation_level=None)  # autocommit; writes are single statements or BEGIN
        if target != ":memory:":
            # WAL: readers do not wait for a writer; NORMAL: durable across a process crash (not
            # across power loss), which is the guarantee a conversation cache needs.
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        self._clock = db.execute("SELECT COALESCE(MAX(used), 0) FROM responses").fetchone()[0]
        self._db = db
        # A restart with smaller bounds applies them at once.
        self._evict()

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _put(self, response_object: dict[str, Any], conversation_items: list[dict[str, Any]]) -> None:
        assert self._db is not None
        response, conversation = json.dumps(response_object), json.dumps(conversation_items)
        size = len(response.encode()) + len(conversation.encode())
        self._db.execute(
            "INSERT OR REPLACE INTO responses (id, used, size, response, conversation) VALUES (?, ?, ?, ?, ?)",
            (response_object["id"], self._tick(), size, response, conversation),
        )
        self._evict()

    def _evict(self) -> None:
        assert self._db is not None
        count, total = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM responses").fetchone()
        if count <= self.max_count and total <= self.max_bytes:
            return
        evicted = 0
        self._db.execute("BEGIN")
        for response_id, size in self._db.execute("SELECT id, size FROM responses ORDER BY used").fetchall():
            if count <= self.max_count and total <= self.max_bytes:
                break
            self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
            count, total, evicted = count - 1, total - size, evicted + 1
        self._db.execute("COMMIT")
        log.debug("responses store: evicted %d responses (now %d, %d bytes)", evicted, count, total)

    def _get(self, response_id: str, conversation: bool) -> StoredResponse | None:
        assert self._db is not None
        column = "response, conversation" if conversation else "response, '[]'"
        row = self._db.execute(f"SELECT {column} FROM responses WHERE id = ?", (response_id,)).fetchone()
        if row is None:
            return None
        self._db.execute("UPDATE responses SET used = ? WHERE id = ?", (self._tick(), response_id))
        return StoredResponse(json.loads(row[0]), json.loads(row[1]))

    def _delete(self, response_id: str) -> bool:
        assert self._db is not None
        return self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0

    def _stats(self) -> tuple[int, int]:
        assert self._db is not None
        count, total = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM responses").fetchone()
        return int(count), int(total)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- the event loop's side -------------------------------------------------------------

    async def _run(self, function: Any, *args: Any) -> Any:
        assert self._thread is not None
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    async def put(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        """Keep ``response`` (its ``id`` is the key), then evict down to the bounds.

        The objects are serialised on the store's thread: the caller must not change them after.
        """
        await self._run(self._put, response, conversation)

    async def get(self, response_id: str, *, conversation: bool = True) -> StoredResponse | None:
        """The stored response (and its conversation), marked as just used; None if unknown or evicted."""
        result: StoredResponse | None = await self._run(self._get, response_id, conversation)
        return result

    async def delete(self, response_id: str) -> bool:
        deleted: bool = await self._run(self._delete, response_id)
        return deleted

    async def stats(self) -> tuple[int, int]:
        """(responses, bytes) stored now."""
        stats: tuple[int, int] = await self._run(self._stats)
        return stats

    def close(self) -> None:
        if self._thread is not None:
            self._thread.submit(self._close).result()
            self._thread.shutdown()
            self._thread = None
