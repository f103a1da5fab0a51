"""Stored responses (``store: true``), for ``previous_response_id`` and ``GET``/``DELETE /v3/responses/{id}``.

One SQLite database (the standard library's ``sqlite3``): ``--responses_store memory`` (the
default) keeps it in memory for the life of the process, a file path keeps it across restarts,
``none`` stores nothing (``previous_response_id`` is then a 400).

Each row holds one response object (what ``GET`` returns) and the whole conversation that led to
it, as Responses input items: the previous response's conversation, this request's input items,
then this response's output items. A row is self-contained, so evicting or deleting one response
never breaks another one's continuation; the price is that a chain of N turns stores the early
turns N times, which the byte bound accounts for.

Ownership: each row has an ``owner``, an opaque string the caller supplies (the HTTP layer passes a
SHA-256 digest of the API key that created the response, never the key; :data:`OPEN_OWNER` on a
server without keys). ``get`` and ``delete`` match on id *and* owner, so another owner's response
is indistinguishable from an unknown one (``None`` / ``False``): ids do not leak across keys.

Migration: a database written before owners existed gets the column added on open, every old row
owned by :data:`OPEN_OWNER`. A server without keys reads them as before; no key's digest equals
:data:`OPEN_OWNER`, so on a server with keys they are unreadable (we cannot know which key made
them, and guessing "anyone" would let every key read them). They age out under the bounds.

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
# The owner of every response on a server without API keys (everyone is the same caller), and of
# rows written before owners existed. Never a key digest (those are 64 hex digits).
OPEN_OWNER = ""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    used INTEGER NOT NULL,      -- the LRU clock: larger is more recent
    size INTEGER NOT NULL,      -- bytes of response + conversation
    response TEXT NOT NULL,     -- the response object, as GET returns it
    conversation TEXT NOT NULL, -- JSON list of input items: the history this response continues
    owner TEXT NOT NULL DEFAULT ''  -- who may read, continue or delete it (OPEN_OWNER: no keys)
);
CREATE INDEX IF NOT EXISTS responses_used ON responses (used);
"""


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    conversation: list[dict[str, Any]]


def _add_owner_column(db: sqlite3.Connection) -> None:
    """Bring a database from before owners up to date (a no-op on one made by :data:`_SCHEMA`)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
    if "owner" not in columns:
        # The default is OPEN_OWNER: see the module docstring for why old rows get it.
        db.execute(f"ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT '{OPEN_OWNER}'")
        log.info("responses store: added the owner column; earlier responses are readable only without API keys")


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
        _add_owner_column(db)
        self._clock = db.execute("SELECT COALESCE(MAX(used), 0) FROM responses").fetchone()[0]
        self._db = db
        # A restart with smaller bounds applies them at once.
        self._evict()

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _put(self, response_object: dict[str, Any], conversation_items: list[dict[str, Any]], owner: str) -> None:
        assert self._db is not None
        response, conversation = json.dumps(response_object), json.dumps(conversation_items)
        size = len(response.encode()) + len(conversation.encode())
        self._db.execute(
            "INSERT OR REPLACE INTO responses (id, used, size, response, conversation, owner)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (response_object["id"], self._tick(), size, response, conversation, owner),
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

    def _get(self, response_id: str, owner: str, conversation: bool) -> StoredResponse | None:
        assert self._db is not None
        column = "response, conversation" if conversation else "response, '[]'"
        query = f"SELECT {column} FROM responses WHERE id = ? AND owner = ?"
        row = self._db.execute(query, (response_id, owner)).fetchone()
        if row is None:
            return None  # unknown and someone else's look the same: no marking as used either
        self._db.execute("UPDATE responses SET used = ? WHERE id = ?", (self._tick(), response_id))
        return StoredResponse(json.loads(row[0]), json.loads(row[1]))

    def _delete(self, response_id: str, owner: str) -> bool:
        assert self._db is not None
        deleted = self._db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
        return deleted.rowcount > 0

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

    async def put(self, response: dict[str, Any], conversation: list[dict[str, Any]], *, owner: str) -> None:
        """Keep ``response`` (its ``id`` is the key) for ``owner``, then evict down to the bounds.

        The objects are serialised on the store's thread: the caller must not change them after.
        """
        await self._run(self._put, response, conversation, owner)

    async def get(self, response_id: str, *, owner: str, conversation: bool = True) -> StoredResponse | None:
        """``owner``'s stored response (and its conversation), marked as just used; None if unknown,
        evicted, or another owner's."""
        result: StoredResponse | None = await self._run(self._get, response_id, owner, conversation)
        return result

    async def delete(self, response_id: str, *, owner: str) -> bool:
        """Delete ``owner``'s response; False if unknown, evicted, or another owner's (left as it is)."""
        deleted: bool = await self._run(self._delete, response_id, owner)
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
