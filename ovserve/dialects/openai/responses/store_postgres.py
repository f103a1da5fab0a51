"""The Responses store on PostgreSQL (``--responses_store postgresql://user@host/db``): one database
that every replica reads and writes, so any replica continues any conversation.

Same semantics as the SQLite store (:mod:`~ovserve.dialects.openai.responses.store`; its module
doc is the contract): rows of one response object plus its whole conversation, ``get``/``delete``
matched on id *and* owner, ``--responses_store_max_count`` rows and ``--responses_store_max_mb`` of
stored JSON (the bytes of the two text columns), least recently used rows evicted first in the
transaction of the write that went past. The LRU clock is a database sequence, so it is one clock
for all replicas; writes take a transaction-scoped advisory lock, so two replicas' evictions never
race past the bounds.

Connections: :mod:`~ovserve.dialects.openai.postgres` (shared with the files' and batches'
metadata): the driver (psycopg 3), the password kept out of the command line and the logs
(``--responses_store_password_file``), the bounded waits (a call is a counted :class:`StoreFault`
past any of them), the pool that heals when the database is back.

Faults: the database down, restarting, unreachable, full or read-only (psycopg's
``OperationalError`` and its ``PoolTimeout``, a read-only transaction, a timeout) are counted in
:attr:`failures` by operation, logged at most once a minute, and raised as :class:`StoreFault`;
errors in a statement stay errors. The pool checks a connection before lending it and replaces
broken ones, so the store heals when the database is back, with no fault for a restart it
missed. The LRU mark of a read and the schema set-up at start count under ``housekeeping``; a
set-up that failed is retried by the next call.

Schema: created and migrated by the server under an advisory lock (replicas starting together
migrate once). ``ovserve_schema_version`` records each version reached; :data:`MIGRATIONS` takes a
database from each version to the next (v2: ``created``, for ``--responses_store_max_age``; rows
already there count their age from the migration, on the store's clock, as in SQLite). Expiry, as
:mod:`~ovserve.dialects.openai.responses.store_common` says, uses the replica's clock, not the
database's: the same clock as the SQLite store's, and a test's. A database of a newer version than
this server knows is a fault: an older replica must not write rows it does not understand.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import psycopg

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.dialects.openai.postgres import (
    CALL_TIMEOUT_S,
    POOL_TIMEOUT_S,
    Connection,
    PasswordFile,
    Pool,
    check_url,
    is_fault,
    migrate,
    open_pool,
    redacted,
)
from ovserve.dialects.openai.responses.store import StoredResponse
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
from ovserve.json_types import JsonObject

log = logging.getLogger(__name__)

# pg_advisory_xact_lock keys: one for schema migration, one serialising writes (bounds).
_MIGRATION_LOCK = 0x6F76_7365_0001
_WRITE_LOCK = 0x6F76_7365_0002

SCHEMA_VERSION = 2
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE SEQUENCE ovserve_responses_clock",
        """CREATE TABLE ovserve_responses (
            id text PRIMARY KEY,
            owner text NOT NULL,       -- who may read, continue or delete it ('' without API keys)
            used bigint NOT NULL,      -- the LRU clock (ovserve_responses_clock): larger is more recent
            size bigint NOT NULL,      -- bytes of response + conversation
            response text NOT NULL,    -- the response object, as GET returns it
            conversation text NOT NULL -- JSON list of input items: the history this response continues
        )""",
        "CREATE INDEX ovserve_responses_used ON ovserve_responses (used)",
    ),
    2: (
        # Unix time of the write (the replica's clock), for --responses_store_max_age. The rows
        # already there get the migration's time (%(now)s), then every write sets its own.
        "ALTER TABLE ovserve_responses ADD COLUMN created double precision NOT NULL DEFAULT 0",
        "UPDATE ovserve_responses SET created = %(now)s",
        "ALTER TABLE ovserve_responses ALTER COLUMN created DROP DEFAULT",
        "CREATE INDEX ovserve_responses_created ON ovserve_responses (created)",
    ),
}

# The newest rows that fit both bounds stay; the rest -- the oldest -- go (one statement).
_EVICT = """
DELETE FROM ovserve_responses WHERE id IN (
    SELECT id FROM (
        SELECT id, count(*) OVER newest AS n, sum(size) OVER newest AS total FROM ovserve_responses
        WINDOW newest AS (ORDER BY used DESC ROWS UNBOUNDED PRECEDING)
    ) AS ranked
    WHERE n > %(max_count)s OR total > %(max_bytes)s
)"""
_EXPIRE = "DELETE FROM ovserve_responses WHERE created < %(cutoff)s"
_PUT = """
INSERT INTO ovserve_responses (id, owner, used, size, response, conversation, created)
VALUES (%s, %s, nextval('ovserve_responses_clock'), %s, %s, %s, %s)
ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, used = EXCLUDED.used, size = EXCLUDED.size,
    response = EXCLUDED.response, conversation = EXCLUDED.conversation, created = EXCLUDED.created"""

T = TypeVar("T")


class PostgresResponseStore:
    """The bounded store in a PostgreSQL database; ``url`` is a libpq URL (``postgresql://...``).
    ``max_age``: seconds a row is kept (None: no age bound), on ``clock``'s :meth:`~ovserve.clock.Clock.wall`."""

    def __init__(
        self,
        url: str,
        *,
        max_count: int,
        max_bytes: int,
        max_age: float | None = None,
        password_file: Path | None = None,
        clock: Clock = SYSTEM_CLOCK,
        pool_timeout: float | None = None,
    ) -> None:
        self.location = redacted(url)
        self.pool_timeout = POOL_TIMEOUT_S if pool_timeout is None else pool_timeout
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.failures: dict[str, int] = dict.fromkeys(OPERATIONS, 0)
        check_url(url)
        self._url = url
        self._password_file = PasswordFile(password_file) if password_file is not None else None
        self._wall = clock.wall
        self._pool: Pool | None = None
        self._migrated = False
        self._faults = FaultLog()

    @property
    def enabled(self) -> bool:
        return True

    # -- connections, faults and the schema ------------------------------------------------

    async def _connection_pool(self) -> Pool:
        if self._pool is None:
            self._pool = await open_pool(
                self._url, name="ovserve-responses", timeout=self.pool_timeout, password_file=self._password_file
            )
        return self._pool

    def _cutoff(self) -> float:
        return expiry_cutoff(self._wall(), self.max_age)

    async def _expire(self, db: Connection) -> None:
        """Delete every expired row (in the caller's transaction, which holds the write lock)."""
        if self.max_age is not None:
            await db.execute(_EXPIRE, {"cutoff": self._cutoff()})

    async def _guarded(self, operation: str, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work(connection)`` on a pooled connection of a migrated database; a fault is logged,
        counted and raised as :class:`StoreFault`."""
        faults = sum(self.failures.values())
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                pool = await self._connection_pool()
                async with pool.connection() as db:
                    if not self._migrated:
                        await self._migrate(db)
                    result = await work(db)
        except Exception as exc:
            if not is_fault(exc):
                raise
            self._fault(operation, exc)
            raise StoreFault(f"responses store: {operation} failed ({type(exc).__name__})") from exc
        if operation in (PUT, DELETE) and sum(self.failures.values()) == faults:
            self._faults.recovered()
        return result

    def _fault(self, operation: str, exc: BaseException) -> None:
        self.failures[operation] += 1
        # psycopg's messages name the host and user, never the password.
        self._faults.fault(operation, f"{type(exc).__name__}: {exc} ({self.location})")

    async def _migrate(self, db: Connection) -> None:
        """Bring the database to :data:`SCHEMA_VERSION` (once per replica; replicas take turns)."""
        async with db.transaction():
            reached = await migrate(
                db,
                version_table="ovserve_schema_version",
                migrations=MIGRATIONS,
                lock=_MIGRATION_LOCK,
                params={"now": self._wall()},
            )
            for step in reached:
                log.info("responses store: %s migrated to schema version %d", self.location, step)
            # A restart with smaller bounds, or a shorter age, applies them at once.
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
            await self._expire(db)
            await db.execute(_EVICT, {"max_count": self.max_count, "max_bytes": self.max_bytes})
        self._migrated = True

    # -- the calls -------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the pool and set the schema up now, so the first request does not wait for it; a
        database that is not there yet is counted under ``housekeeping`` and retried by the next call."""
        with contextlib.suppress(StoreFault):
            await self._guarded(HOUSEKEEPING, self._nothing)

    @staticmethod
    async def _nothing(db: Connection) -> None:
        return None

    async def put(self, response: JsonObject, conversation: list[JsonObject], *, owner: str) -> bool:
        """As :meth:`ResponseStore.put <ovserve.dialects.openai.responses.store.ResponseStore.put>`."""
        response_json, conversation_json = json.dumps(response), json.dumps(conversation)
        size = len(response_json.encode()) + len(conversation_json.encode())
        if size > self.max_bytes:
            log.info("responses store: a response of %d bytes does not fit --responses_store_max_mb; not stored", size)
            return False
        response_id = response["id"]

        async def work(db: Connection) -> bool:
            async with db.transaction():  # the row and the expiries and evictions it causes: all or nothing
                await db.execute("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
                await self._expire(db)
                await db.execute(_PUT, (response_id, owner, size, response_json, conversation_json, self._wall()))
                await db.execute(_EVICT, {"max_count": self.max_count, "max_bytes": self.max_bytes})
                kept = await db.execute("SELECT 1 FROM ovserve_responses WHERE id = %s", (response_id,))
                return await kept.fetchone() is not None

        return await self._guarded(PUT, work)

    async def get(self, response_id: str, *, owner: str, conversation: bool = True) -> StoredResponse | None:
        """``owner``'s stored response, marked as just used; None if unknown, evicted, expired, or another's."""
        columns = "response, conversation" if conversation else "response, '[]'"

        async def work(db: Connection) -> StoredResponse | None:
            query = f"SELECT {columns} FROM ovserve_responses WHERE id = %s AND owner = %s AND created >= %s"
            row = await (await db.execute(query, (response_id, owner, self._cutoff()))).fetchone()
            if row is None:
                return None
            try:
                mark = "UPDATE ovserve_responses SET used = nextval('ovserve_responses_clock') WHERE id = %s"
                await db.execute(mark, (response_id,))
            except psycopg.Error as exc:  # the read stands; a read-only database still reads
                if not is_fault(exc):
                    raise
                self._fault(HOUSEKEEPING, exc)
            return StoredResponse(json.loads(str(row[0])), json.loads(str(row[1])))

        return await self._guarded(GET, work)

    async def delete(self, response_id: str, *, owner: str) -> bool:
        """Delete ``owner``'s response; False if unknown, evicted, expired, or another owner's."""

        async def work(db: Connection) -> bool:
            query = "DELETE FROM ovserve_responses WHERE id = %s AND owner = %s AND created >= %s"
            return (await db.execute(query, (response_id, owner, self._cutoff()))).rowcount > 0

        return await self._guarded(DELETE, work)

    async def stats(self) -> tuple[int, int]:
        """(responses, bytes of JSON) stored now."""

        async def work(db: Connection) -> tuple[int, int]:
            query = "SELECT count(*), COALESCE(sum(size), 0) FROM ovserve_responses"
            row = await (await db.execute(query)).fetchone()
            assert row is not None
            return int(str(row[0])), int(str(row[1]))

        return await self._guarded(HOUSEKEEPING, work)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
