"""The Responses store on PostgreSQL (``--responses_store postgresql://user@host/db``): one database
that every replica reads and writes, so any replica continues any conversation.

Same semantics as the SQLite store (:mod:`~ovserve.dialects.openai.responses.store`; its module
doc is the contract): rows of one response object plus its whole conversation, ``get``/``delete``
matched on id *and* owner, ``--responses_store_max_count`` rows and ``--responses_store_max_mb`` of
stored JSON (the bytes of the two text columns), least recently used rows evicted first in the
transaction of the write that went past. The LRU clock is a database sequence, so it is one clock
for all replicas; writes take a transaction-scoped advisory lock, so two replicas' evictions never
race past the bounds.

Driver: psycopg 3 and its async pool (psycopg-pool). Chosen over asyncpg because it is the
reference driver (libpq): the URL, ``PGPASSWORD``, ``PGPASSFILE`` (a password file), ``PGSSLMODE``
and the service file all work as in ``psql``, and the pool has the bounded waits below built in.

Secrets: a password may be in the URL, but ``--responses_store_password_file`` (a file holding just
the password, as a Kubernetes secret is mounted; read for each new connection, so a rotated secret
needs no restart), ``PGPASSWORD`` or a ``PGPASSFILE`` keep it out of the command line; the file wins
over the URL, the URL over libpq's environment. :attr:`PostgresResponseStore.location`, every log
line and every error show the URL without it; a URL libpq cannot parse is refused at start-up with
a message that quotes none of it (libpq's own message may quote the password).

Timeouts: a database that is down or unreachable must not hang a request. A call waits at most
:data:`POOL_TIMEOUT_S` for a connection (libpq's ``connect_timeout`` bounds each attempt), each
statement at most ``statement_timeout`` (both defaults unless the URL sets them), and the whole
call :data:`CALL_TIMEOUT_S`; past any of them the call is a counted :class:`StoreFault`.

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
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from ovserve.clock import SYSTEM_CLOCK, Clock
from ovserve.dialects.openai.responses.store import StoredResponse
from ovserve.dialects.openai.responses.store_common import (
    DELETE,
    GET,
    HOUSEKEEPING,
    OPERATIONS,
    PUT,
    FaultLog,
    StoreFault,
    StoreSettingError,
    expiry_cutoff,
)
from ovserve.json_types import JsonObject

log = logging.getLogger(__name__)

POOL_TIMEOUT_S = 5.0  # longest wait for a pooled connection
CONNECT_TIMEOUT_S = 3  # libpq's connect_timeout, per attempt (whole seconds)
STATEMENT_TIMEOUT_MS = 5_000
CALL_TIMEOUT_S = 15.0  # the whole call, whatever hangs (a network that drops packets)
POOL_MAX = 8
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
Connection = psycopg.AsyncConnection[tuple[object, ...]]


class SchemaTooNew(Exception):
    """The database was migrated by a newer ovserve than this one."""


def _is_fault(exc: BaseException) -> bool:
    """The database or the way to it failed, as opposed to a mistake in a statement."""
    faults = (psycopg.OperationalError, psycopg.InterfaceError, psycopg.errors.ReadOnlySqlTransaction)
    return isinstance(exc, (*faults, OSError, TimeoutError, SchemaTooNew))


def redacted(url: str) -> str:
    """``url`` without its password, for logs and :attr:`PostgresResponseStore.location`."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(an invalid URL)"
    params.pop("password", None)
    host, port, dbname = params.get("host", ""), params.get("port", ""), params.get("dbname", "")
    user = f"{params['user']}@" if params.get("user") else ""
    return f"postgresql://{user}{host}{':' + str(port) if port else ''}/{dbname}"


def _conninfo(url: str) -> str:
    """``url`` with the timeouts this store needs, unless the URL sets its own; StoreSettingError if
    libpq cannot parse it (its message is not repeated: it may quote the password)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise StoreSettingError(
            "--responses_store: not a PostgreSQL URL libpq can read (postgresql://user@host:port/dbname?option=value; "
            "percent-encode ':', '@', '/', '%' and spaces in the user name and password)"
        ) from None
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    options = str(params.get("options", ""))
    if "statement_timeout" not in options:
        params["options"] = f"{options} -c statement_timeout={STATEMENT_TIMEOUT_MS}".strip()
    params.setdefault("application_name", "ovserve")
    return make_conninfo("", **params)


def check_url(url: str) -> None:
    """StoreSettingError if libpq cannot read ``url``."""
    _conninfo(url)


class PasswordFile:
    """``--responses_store_password_file``: the password is the file's content, less its line end.

    Read once when the store is made (a file that cannot be read, or is empty, is a
    :class:`StoreSettingError`: the server does not start), then for each new connection, so a
    rotated Kubernetes secret is used without a restart; a read that fails then is logged (never
    the content) and the last password read is used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._password = self._read()
        except (OSError, UnicodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise StoreSettingError(f"--responses_store_password_file: cannot read {path}: {reason}") from None
        if not self._password:
            raise StoreSettingError(f"--responses_store_password_file: {path} is empty")

    def _read(self) -> str:
        return self.path.read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")

    def password(self) -> str:
        try:
            password = self._read()
        except (OSError, UnicodeError) as exc:
            log.warning("responses store: cannot read %s (%s); using the password read before", self.path, exc)
            return self._password
        self._password = password or self._password
        return self._password


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
        self._conninfo = _conninfo(url)
        self._password_file = PasswordFile(password_file) if password_file is not None else None
        self._wall = clock.wall
        self._pool: AsyncConnectionPool[Connection] | None = None
        self._migrated = False
        self._faults = FaultLog()

    @property
    def enabled(self) -> bool:
        return True

    # -- connections, faults and the schema ------------------------------------------------

    async def _connection_pool(self) -> AsyncConnectionPool[Connection]:
        if self._pool is None:
            # min_size 0: connections are made on demand (each wait bounded), so a database that is
            # down at start costs nothing until a call needs it, and nothing retries in a loop.
            self._pool = AsyncConnectionPool(
                self._conninfo,
                min_size=0,
                max_size=POOL_MAX,
                timeout=self.pool_timeout,
                kwargs=self._connect_kwargs,
                # A pooled connection is checked (one round trip) before each call: after the
                # database restarts, the first call gets a new connection instead of a fault.
                check=AsyncConnectionPool.check_connection,
                name="ovserve-responses",
                open=False,
            )
            await self._pool.open(wait=False)
        return self._pool

    def _connect_kwargs(self) -> dict[str, Any]:
        """A new connection's parameters beyond the URL (the pool asks for each one)."""
        kwargs: dict[str, Any] = {"autocommit": True}
        if self._password_file is not None:
            kwargs["password"] = self._password_file.password()
        return kwargs

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
            if not _is_fault(exc):
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
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await db.execute("CREATE TABLE IF NOT EXISTS ovserve_schema_version (version integer NOT NULL)")
            row = await (await db.execute("SELECT max(version) FROM ovserve_schema_version")).fetchone()
            version = int(str(row[0])) if row is not None and row[0] is not None else 0
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(f"the database is at schema {version}; this server knows {SCHEMA_VERSION}")
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step]:
                    await db.execute(statement, {"now": self._wall()} if "%(now)s" in statement else None)
                await db.execute("INSERT INTO ovserve_schema_version (version) VALUES (%s)", (step,))
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
                if not _is_fault(exc):
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
