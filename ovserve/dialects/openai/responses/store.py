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

Bounds: ``--responses_store_max_count`` rows and ``--responses_store_max_mb``; past either, the
least recently used rows (written, read by ``GET`` or continued) are evicted first, in the same
transaction as the write that went past. In memory the byte bound counts the stored JSON. On disk
it is the files' footprint -- database, ``-wal`` and ``-shm`` -- because that is what fills a
volume: the WAL gets a share of the cap (:func:`wal_limit`) and is checkpointed into the database
and truncated whenever a write leaves it larger; the database's pages get the rest (rows are
evicted until the pages in use fit, which also covers SQLite's per-page overhead, up to twice the
JSON for rows of a few KB); ``auto_vacuum=FULL`` gives freed pages back to the file system at each
commit. Between calls the footprint is at most the cap plus :data:`FOOTPRINT_MARGIN` (the WAL
index); during a write, that write's own pages come on top until its checkpoint.

Age: ``--responses_store_max_age``, as :mod:`~ovserve.dialects.openai.responses.store_common`
says (the contract both backends share); rows from before the ``created`` column get the time of
the migration, so they have a whole ``max_age`` from the upgrade.

Faults: the disk can fill up or turn read-only, and the file (or its directory) can be deleted
under a running server. Every public call then raises :class:`StoreFault` (sqlite3's and the OS's
own errors get through only for bugs, such as a mistake in a statement:
:mod:`~ovserve.dialects.openai.responses.store_sqlite_faults` tells them apart); the fault is
counted in :attr:`ResponseStore.failures` by operation and logged as a WARNING, at most once a
minute (:class:`~ovserve.dialects.openai.responses.store_common.FaultLog`; never any content). The
store heals itself, with no restart: each call first checks that the path still names the file it
opened and starts a new database there if not (a deleted file or directory is recreated; reading
on from the deleted file would serve responses that no longer exist anywhere; counted, and told
each time, as it takes someone deleting the file again to happen again); a fault that leaves the
connection in doubt (an I/O error, a file that cannot be opened or read) closes it and the next
call opens a fresh one, while a full or read-only disk keeps it (it still reads, and writes again
once there is room). Work no caller waits for -- marking a read row as used, checkpoints, eviction
and expiry at start-up -- counts its faults under ``housekeeping`` and never fails the call it
rides on. A store that cannot even be
opened at start-up does not stop the server: it retries on every call.

Threading: every statement runs on one dedicated thread, which owns the connection (an in-memory
database exists only for the connection that made it), so the event loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.dialects.openai.responses.store_common import (
    DELETE,
    GET,
    HOUSEKEEPING,
    OPERATIONS,
    PUT,
    FaultLog,
    StoreFault,
    expiry_cutoff,
)
from ovserve.dialects.openai.responses.store_sqlite_faults import CONNECTION_SURVIVES, describe, is_fault, result_code
from ovserve.json_types import JsonObject
from ovserve.models.threads import started_thread

log = logging.getLogger(__name__)

MEMORY = "memory"
DISABLED = "none"
# The owner of every response on a server without API keys (everyone is the same caller), and of
# rows written before owners existed. Never a key digest (those are 64 hex digits).
OPEN_OWNER = ""

# How far past the cap a file store's footprint may be between calls: the -shm file (the WAL
# index: 32 KiB for a WAL of up to 4096 pages, and it rests below wal_limit, at most 1024 pages).
# The WAL itself is inside the cap: the database's pages leave its share free.
FOOTPRINT_MARGIN = 32 * 1024
# The WAL's share of --responses_store_max_mb: an eighth, at most 4 MiB (SQLite's own default
# checkpoint point is about 4 MB; more only makes checkpoints rarer and longer).
_WAL_SHARE = 8
_WAL_MAX = 4 * 1024 * 1024
_AUTO_VACUUM_FULL = 1  # what PRAGMA auto_vacuum reads for FULL (0 is NONE, 2 INCREMENTAL)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    used INTEGER NOT NULL,      -- the LRU clock: larger is more recent
    size INTEGER NOT NULL,      -- bytes of response + conversation
    response TEXT NOT NULL,     -- the response object, as GET returns it
    conversation TEXT NOT NULL, -- JSON list of input items: the history this response continues
    owner TEXT NOT NULL DEFAULT '', -- who may read, continue or delete it (OPEN_OWNER: no keys)
    created REAL NOT NULL           -- Unix time of the write, for --responses_store_max_age
);
CREATE INDEX IF NOT EXISTS responses_used ON responses (used);
"""
# After the migration (an older table gets its created column first).
_CREATED_INDEX = "CREATE INDEX IF NOT EXISTS responses_created ON responses (created)"
_OLDEST = "SELECT id, size FROM responses ORDER BY used LIMIT 1"  # the next to evict (responses_used)
_TOTALS = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM responses"

T = TypeVar("T")


@dataclass(frozen=True)
class StoredResponse:
    response: JsonObject
    conversation: list[JsonObject]


def wal_limit(max_bytes: int) -> int:
    """The WAL's share of a file store's byte cap: past it, a write checkpoints and truncates it."""
    return min(max_bytes // _WAL_SHARE, _WAL_MAX)


def _file_identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` names now (None: none)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _remove_journals(path: Path) -> None:
    """Remove the WAL files of a database that is gone (deleted or replaced): SQLite would read them
    as part of whatever file is at ``path`` next (the old rows back, or a corrupt database)."""
    for suffix in ("-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _migrate(db: sqlite3.Connection, now: float) -> None:
    """Bring a database from before owners or ages up to date (a no-op on one made by :data:`_SCHEMA`)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
    if "owner" not in columns:
        # The default is OPEN_OWNER: see the module docstring for why old rows get it.
        db.execute(f"ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT '{OPEN_OWNER}'")
        log.info("responses store: added the owner column; earlier responses are readable only without API keys")
    if "created" not in columns:
        # SQLite takes only a constant default: the rows already there are given now just after,
        # in the same transaction (a row left at 0 would expire at once).
        db.execute("BEGIN")
        db.execute("ALTER TABLE responses ADD COLUMN created REAL NOT NULL DEFAULT 0")
        db.execute("UPDATE responses SET created = ?", (now,))
        db.execute("COMMIT")
        log.info("responses store: added the created column; earlier responses count their age from now")
    db.execute(_CREATED_INDEX)


class ResponseStore:
    """The bounded store; ``location`` is :data:`MEMORY`, :data:`DISABLED` or a database file path."""

    def __init__(
        self,
        location: str,
        *,
        max_count: int,
        max_bytes: int,
        max_age: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.location = location
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.max_age = max_age  # seconds; None: no age bound
        self._wall = clock.wall  # read on the store's thread: a float, nothing to lock
        # Faults by operation, read by /metrics (from the event loop; only the store's thread writes).
        self.failures: dict[str, int] = dict.fromkeys(OPERATIONS, 0)
        self._path = None if location in (MEMORY, DISABLED) else Path(location)
        self._wal_limit = wal_limit(max_bytes) if self._path is not None else 0
        # What the database's pages may take: the cap, less the WAL's share on disk.
        self._db_bytes = max_bytes - self._wal_limit
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None  # the file the connection opened
        self._totals: tuple[int, int, int] | None = None  # the connection's data_version, rows, bytes
        self._clock = 0
        self._faults = FaultLog()
        if self.enabled:
            self._thread = started_thread("responses-store")
            self._thread.submit(self._start).result()

    @property
    def enabled(self) -> bool:
        return self.location != DISABLED

    # -- the store's thread ----------------------------------------------------------------

    def _start(self) -> None:
        with contextlib.suppress(StoreFault):  # logged and counted; every call retries
            self._guarded(HOUSEKEEPING, lambda db: None)

    def _guarded(self, operation: str, work: Callable[..., T], *args: Any) -> T:
        """``work(db, *args)`` on a working connection; a fault is logged, counted, cleaned up
        after, and raised as :class:`StoreFault`."""
        faults = sum(self.failures.values())
        try:
            result = work(self._connection(), *args)
        except (OSError, sqlite3.Error) as exc:
            if not is_fault(exc):
                raise
            self._fault(operation, exc, self._db)
            raise StoreFault(f"responses store: {operation} failed ({describe(exc)})") from exc
        if operation in (PUT, DELETE) and sum(self.failures.values()) == faults:  # a write, all of it
            self._faults.recovered()
        return result

    @contextlib.contextmanager
    def _housekeeping(self, db: sqlite3.Connection) -> Iterator[None]:
        """Work on ``db`` no caller waits for: a fault is logged and counted under ``housekeeping``,
        not raised (the connection may be closed by it: see :meth:`_fault`)."""
        try:
            yield
        except (OSError, sqlite3.Error) as exc:
            if not is_fault(exc):
                raise
            self._fault(HOUSEKEEPING, exc, db)

    def _fault(self, operation: str, exc: BaseException, db: sqlite3.Connection | None) -> None:
        """Count and log a fault on ``db``, roll back what it left open, and close it if it is the
        store's connection and the fault leaves it in doubt."""
        self.failures[operation] += 1
        self._faults.fault(operation, describe(exc))
        if db is None:
            return
        with contextlib.suppress(sqlite3.Error):
            if db.in_transaction:
                db.rollback()
        if db is self._db and self._path is not None and result_code(exc) not in CONNECTION_SURVIVES:
            self._drop()

    def _drop(self) -> None:
        db, self._db, self._identity, self._totals = self._db, None, None, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def _connection(self) -> sqlite3.Connection:
        """The open connection; a new one if there is none, or if the path names another file than
        the one it opened (deleted, or replaced)."""
        if self._db is not None and self._path is not None and _file_identity(self._path) != self._identity:
            # Counted as a fault: every response stored so far is gone. Told each time (not rate
            # limited): it takes someone deleting the file again to happen again.
            self.failures[HOUSEKEEPING] += 1
            log.warning("responses store: %s was deleted or replaced; starting a new, empty database", self._path)
            self._drop()
            _remove_journals(self._path)
        if self._db is None:
            self._open()
        assert self._db is not None
        return self._db

    def _open(self) -> None:
        """Open (or create) the database and make it the store's connection."""
        path, self._totals = self._path, None
        if path is None:
            db = sqlite3.connect(":memory:", isolation_level=None)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                _remove_journals(path)
            db = sqlite3.connect(path, isolation_level=None)  # autocommit; a write of several statements BEGINs
        try:
            if path is not None:
                # FULL: each commit gives freed pages back to the file system (a new database only;
                # older ones are converted below). WAL: readers do not wait for a writer. NORMAL:
                # durable across a process crash (not power loss), what a conversation cache needs.
                db.execute("PRAGMA auto_vacuum=FULL")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute(f"PRAGMA journal_size_limit={self._wal_limit}")
            db.executescript(_SCHEMA)
            _migrate(db, self._wall())
            self._clock = db.execute("SELECT COALESCE(MAX(used), 0) FROM responses").fetchone()[0]
            identity = _file_identity(path) if path is not None else None
            # Not yet the store's connection: a fault here is counted, and the call that opened it
            # goes on (a connection that is really broken fails that call next).
            with self._housekeeping(db):
                if path is not None and db.execute("PRAGMA auto_vacuum").fetchone()[0] != _AUTO_VACUUM_FULL:
                    # A database from before the footprint bound: VACUUM rebuilds it with FULL (once).
                    db.execute("VACUUM")
                    log.info("responses store: %s converted to auto_vacuum=FULL", path)
                # A restart with smaller bounds applies them at once.
                db.execute("BEGIN")
                totals = self._evict(db, self._expire(db, self._counted(db)))
                db.execute("COMMIT")
                self._totals = totals
            self._after_write(db)
        except BaseException:
            db.close()
            raise
        self._db, self._identity = db, identity

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _after_write(self, db: sqlite3.Connection) -> None:
        """Once the WAL outgrows its share of the cap, copy it into the database and truncate it."""
        if self._path is None:
            return
        with self._housekeeping(db):
            if _file_size(Path(f"{self._path}-wal")) > self._wal_limit:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()

    def _put(
        self, db: sqlite3.Connection, response_object: JsonObject, conversation_items: list[JsonObject], owner: str
    ) -> bool:
        response, conversation = json.dumps(response_object), json.dumps(conversation_items)
        size = len(response.encode()) + len(conversation.encode())
        if size > self._db_bytes:
            # It would evict every other response, then itself.
            log.info("responses store: a response of %d bytes does not fit --responses_store_max_mb; not stored", size)
            return False
        response_id = response_object["id"]
        db.execute("BEGIN")  # the row and the expiries and evictions it causes: all or nothing
        version, count, total = self._expire(db, self._counted(db))
        replaced = db.execute("SELECT size FROM responses WHERE id = ?", (response_id,)).fetchone()
        db.execute(
            "INSERT OR REPLACE INTO responses (id, used, size, response, conversation, owner, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (response_id, self._tick(), size, response, conversation, owner, self._wall()),
        )
        count, total = (count, total - replaced[0] + size) if replaced else (count + 1, total + size)
        totals = self._evict(db, (version, count, total))
        kept = db.execute("SELECT 1 FROM responses WHERE id = ?", (response_id,)).fetchone() is not None
        db.execute("COMMIT")
        self._totals = totals  # only once committed: a write that failed changed nothing
        self._after_write(db)
        return kept

    def _counted(self, db: sqlite3.Connection) -> tuple[int, int, int]:
        """``PRAGMA data_version``, rows and bytes stored: counted once per connection, then kept by its
        writes (a count per write cost a full store more than the write), again when another wrote."""
        version = db.execute("PRAGMA data_version").fetchone()[0]
        if self._totals is None or self._totals[0] != version:
            self._totals = (version, *db.execute(_TOTALS).fetchone())
        return self._totals

    def _over_bounds(self, db: sqlite3.Connection, count: int, total: int) -> bool:
        if count > self.max_count or total > self.max_bytes:
            return True
        if self._path is None:
            return False
        # The pages in use: what the file will be once this transaction commits (auto_vacuum=FULL).
        pages = db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0]
        return bool(pages * db.execute("PRAGMA page_size").fetchone()[0] > self._db_bytes)

    def _cutoff(self) -> float:
        return expiry_cutoff(self._wall(), self.max_age)

    def _expire(self, db: sqlite3.Connection, totals: tuple[int, int, int]) -> tuple[int, int, int]:
        """Delete every expired row (in the caller's transaction; by the ``created`` index)."""
        if self.max_age is None:
            return totals
        version, count, total = totals
        cutoff = self._cutoff()
        expired, size = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM responses WHERE created < ?", (cutoff,)
        ).fetchone()
        if expired:
            db.execute("DELETE FROM responses WHERE created < ?", (cutoff,))
            log.debug("responses store: %d responses expired (--responses_store_max_age)", expired)
        return version, count - expired, total - size

    def _evict(self, db: sqlite3.Connection, totals: tuple[int, int, int]) -> tuple[int, int, int]:
        """Evict the least recently used rows until the bounds hold (in the caller's transaction)."""
        (version, count, total), evicted = totals, 0
        # The oldest row, one at a time (an index lookup): a full store evicts about one per write.
        while self._over_bounds(db, count, total) and (oldest := db.execute(_OLDEST).fetchone()):
            db.execute("DELETE FROM responses WHERE id = ?", (oldest[0],))
            count, total, evicted = count - 1, total - oldest[1], evicted + 1
        if evicted:
            log.debug("responses store: evicted %d responses (now %d, %d bytes)", evicted, count, total)
        return version, count, total

    def _get(self, db: sqlite3.Connection, response_id: str, owner: str, conversation: bool) -> StoredResponse | None:
        column = "response, conversation" if conversation else "response, '[]'"
        query = f"SELECT {column} FROM responses WHERE id = ? AND owner = ? AND created >= ?"
        row = db.execute(query, (response_id, owner, self._cutoff())).fetchone()
        if row is None:
            return None  # unknown, expired and someone else's look the same: no marking as used either
        with self._housekeeping(db):  # a full or read-only disk still reads
            db.execute("UPDATE responses SET used = ? WHERE id = ?", (self._tick(), response_id))
        if self._db is db:
            self._after_write(db)
        return StoredResponse(json.loads(row[0]), json.loads(row[1]))

    def _delete(self, db: sqlite3.Connection, response_id: str, owner: str) -> bool:
        query = "DELETE FROM responses WHERE id = ? AND owner = ? AND created >= ?"
        deleted = db.execute(query, (response_id, owner, self._cutoff())).rowcount > 0
        if deleted:
            self._totals = None  # counted again at the next write
            self._after_write(db)
        return deleted

    # -- the event loop's side -------------------------------------------------------------

    async def _run(self, operation: str, work: Callable[..., T], *args: Any) -> T:
        assert self._thread is not None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._guarded, operation, work, *args)

    async def put(self, response: JsonObject, conversation: list[JsonObject], *, owner: str) -> bool:
        """Keep ``response`` (its ``id`` is the key) for ``owner``, then evict down to the bounds.
        False if it was not kept: alone, it is larger than the bounds allow. StoreFault on a fault
        (nothing was written).

        The objects are serialised on the store's thread: the caller must not change them until
        this returns.
        """
        return await self._run(PUT, self._put, response, conversation, owner)

    async def get(self, response_id: str, *, owner: str, conversation: bool = True) -> StoredResponse | None:
        """``owner``'s stored response (and its conversation), marked as just used; None if unknown,
        evicted, expired, or another owner's; StoreFault if it cannot be read now."""
        return await self._run(GET, self._get, response_id, owner, conversation)

    async def delete(self, response_id: str, *, owner: str) -> bool:
        """Delete ``owner``'s response; False if unknown, evicted, expired, or another owner's (left as
        it is); StoreFault if it cannot be deleted now."""
        return await self._run(DELETE, self._delete, response_id, owner)

    async def stats(self) -> tuple[int, int]:
        """(responses, bytes of JSON) stored now, counted (not the totals the writes keep)."""
        count, total = await self._run(HOUSEKEEPING, lambda db: db.execute(_TOTALS).fetchone())
        return int(count), int(total)

    async def start(self) -> None:  # the database opened in the constructor
        pass

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.submit(self._drop).result()
            self._thread.shutdown()
            self._thread = None
