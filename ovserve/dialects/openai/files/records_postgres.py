"""The files' and batches' metadata on PostgreSQL: the database ``--responses_store`` names, shared
by the replicas that share ``--files_dir`` (:mod:`~ovserve.dialects.openai.files.records` is the
contract; this module only says where PostgreSQL differs from SQLite).

Connections, the password, the bounded waits and schema migration are the Responses store's
(:mod:`~ovserve.dialects.openai.postgres`), with a pool of this store's own (a handful of
connections, made on demand). The tables are ``ovserve_files`` and ``ovserve_batches``, versioned
in ``ovserve_files_schema_version`` (separate from the Responses store's, so either can move on
alone).

Claims: two replicas that claim at once never take the same batch: the claim locks the rows it
takes (``FOR UPDATE SKIP LOCKED``: a row another claim holds is skipped, not waited for) and reads
the lease again once locked. A fenced write (``put_batch``) and a renewal match ``runner`` in the
statement that writes, so a runner whose lease was taken learns it from the write itself.

Faults: the database down, unreachable, read-only, or a bounded wait run out
(:func:`~ovserve.dialects.openai.postgres.is_fault`) are a 503 ``files_store_unavailable``, logged;
a schema set-up that failed is retried by the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ovserve.dialects.openai import postgres
from ovserve.dialects.openai.batches.objects import UNFINISHED, Batch
from ovserve.dialects.openai.batches.objects import ListQuery as BatchQuery
from ovserve.dialects.openai.files.objects import FileObject, ListQuery
from ovserve.dialects.openai.files.records import CANCELLABLE, StoreFaults, file_object, overlay
from ovserve.errors import ServiceUnavailableError

log = logging.getLogger(__name__)
T = TypeVar("T")

_MIGRATION_LOCK = 0x6F76_7365_0003  # beside the Responses store's (…0001, …0002)
POOL_NAME = "ovserve-files"
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE ovserve_files (
            seq bigserial PRIMARY KEY,  -- the list's order (created_at has whole seconds)
            id text UNIQUE NOT NULL,
            owner text NOT NULL,        -- the API key's digest ('' without keys)
            bytes bigint NOT NULL,
            created_at bigint NOT NULL,
            filename text NOT NULL,
            purpose text NOT NULL,
            expires_at bigint
        )""",
        "CREATE INDEX ovserve_files_owner ON ovserve_files (owner, seq)",
        """CREATE TABLE ovserve_batches (
            seq bigserial PRIMARY KEY,
            id text UNIQUE NOT NULL,
            owner text NOT NULL,
            status text NOT NULL,
            batch text NOT NULL,         -- the Batch object, as GET returns it
            runner text,                 -- who runs it (a replica's name) while lease_until lasts
            lease_until double precision, -- Unix time, on the runner's clock
            cancel_at bigint             -- a cancel asked of a replica that does not run it
        )""",
        "CREATE INDEX ovserve_batches_owner ON ovserve_batches (owner, seq)",
        "CREATE INDEX ovserve_batches_status ON ovserve_batches (status)",
    ),
    # expires_after on uploads: expired rows are found by this index at each new file.
    2: ("CREATE INDEX ovserve_files_expires ON ovserve_files (expires_at) WHERE expires_at IS NOT NULL",),
}
SCHEMA_VERSION = max(MIGRATIONS)
_FILE_COLUMNS = "id, bytes, created_at, filename, purpose, expires_at"
_LIVE = "(expires_at IS NULL OR expires_at > %s)"  # not expired at the time given
_CLAIM = """
UPDATE ovserve_batches SET runner = %(runner)s, lease_until = %(until)s
WHERE id IN (
    SELECT id FROM ovserve_batches
    WHERE status = ANY(%(unfinished)s) AND (runner IS NULL OR lease_until < %(now)s {mine})
    FOR UPDATE SKIP LOCKED
)
RETURNING seq, owner, batch, cancel_at"""


class PostgresRecords:
    """The metadata in the PostgreSQL database ``url`` names (``password_file``: as the Responses
    store's); ``pool_timeout``: the longest wait for a connection (tests shorten it)."""

    def __init__(
        self,
        url: str,
        *,
        password_file: Path | None = None,
        pool_timeout: float | None = None,
        faults: StoreFaults | None = None,
    ) -> None:
        postgres.check_url(url)
        self.faults = faults if faults is not None else StoreFaults()
        self.location = postgres.redacted(url)
        self.shared = True
        self._url = url
        self._password_file = postgres.PasswordFile(password_file) if password_file is not None else None
        self._timeout = postgres.POOL_TIMEOUT_S if pool_timeout is None else pool_timeout
        self._pool: postgres.Pool | None = None
        self._migrated = False

    async def _call(self, work: Callable[[postgres.Connection], Awaitable[T]]) -> T:
        """``work(connection)`` on a pooled connection of a migrated database; a fault is a 503."""
        try:
            async with asyncio.timeout(postgres.CALL_TIMEOUT_S):
                if self._pool is None:
                    self._pool = await postgres.open_pool(
                        self._url, name=POOL_NAME, timeout=self._timeout, password_file=self._password_file
                    )
                async with self._pool.connection() as db:
                    if not self._migrated:
                        await self._migrate(db)
                    return await work(db)
        except Exception as exc:
            if not postgres.is_fault(exc):
                raise
            raise self.faults.fault(self.location, exc) from exc

    async def _migrate(self, db: postgres.Connection) -> None:
        async with db.transaction():
            reached = await postgres.migrate(
                db, version_table="ovserve_files_schema_version", migrations=MIGRATIONS, lock=_MIGRATION_LOCK
            )
        for step in reached:
            log.info("files store: %s migrated to schema version %d", self.location, step)
        self._migrated = True

    async def _rows(self, sql: str, args: Sequence[Any] | dict[str, Any]) -> list[tuple[Any, ...]]:
        async def rows(db: postgres.Connection) -> list[tuple[Any, ...]]:
            return await (await db.execute(sql, args)).fetchall()

        return await self._call(rows)

    async def _count(self, sql: str, args: Sequence[Any]) -> int:
        async def count(db: postgres.Connection) -> int:
            return (await db.execute(sql, args)).rowcount

        return await self._call(count)

    async def start(self) -> None:
        """Set the schema up now, so the first request does not wait for it; a database that is
        not there yet is logged and retried by the next call (the server starts either way)."""
        with contextlib.suppress(ServiceUnavailableError):  # a fault, already logged
            await self._rows("SELECT 1", ())

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # -- files ------------------------------------------------------------------------------

    async def add_file(self, file: FileObject, *, owner: str) -> None:
        sql = (
            "INSERT INTO ovserve_files (id, owner, bytes, created_at, filename, purpose, expires_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
        )
        await self._count(
            sql, (file.id, owner, file.bytes, file.created_at, file.filename, file.purpose, file.expires_at)
        )

    async def file(self, file_id: str, *, owner: str, now: int) -> FileObject | None:
        sql = f"SELECT {_FILE_COLUMNS} FROM ovserve_files WHERE id = %s AND owner = %s AND {_LIVE}"
        rows = await self._rows(sql, (file_id, owner, now))
        return file_object(rows[0]) if rows else None

    async def files(self, query: ListQuery, *, owner: str, now: int) -> tuple[list[FileObject], bool]:
        where, args = ["owner = %s", _LIVE], [owner, now]
        if query.purpose is not None:
            where.append("purpose = %s")
            args.append(query.purpose)
        comparison = ">" if query.order == "asc" else "<"
        if query.after is not None:
            where.append(f"seq {comparison} COALESCE((SELECT seq FROM ovserve_files WHERE id = %s AND owner = %s), -1)")
            args += [query.after, owner]
        sql = (
            f"SELECT {_FILE_COLUMNS} FROM ovserve_files WHERE {' AND '.join(where)}"
            f" ORDER BY seq {query.order.upper()} LIMIT {query.limit + 1}"
        )
        rows = await self._rows(sql, args)
        return [file_object(row) for row in rows[: query.limit]], len(rows) > query.limit

    async def delete_file(self, file_id: str, *, owner: str, now: int) -> bool:
        sql = f"DELETE FROM ovserve_files WHERE id = %s AND owner = %s AND {_LIVE}"
        return await self._count(sql, (file_id, owner, now)) > 0

    async def expire_files(self, now: int) -> list[str]:
        rows = await self._rows("DELETE FROM ovserve_files WHERE expires_at <= %s RETURNING id", (now,))
        return [str(row[0]) for row in rows]

    # -- batches ----------------------------------------------------------------------------

    async def add_batch(self, batch: Batch, *, owner: str, runner: str, until: float) -> None:
        sql = (
            "INSERT INTO ovserve_batches (id, owner, status, batch, runner, lease_until)"
            " VALUES (%s, %s, %s, %s, %s, %s)"
        )
        await self._count(sql, (batch.id, owner, batch.status, batch.stored(), runner, until))

    async def put_batch(self, batch: Batch, *, runner: str, until: float) -> bool:
        sql = "UPDATE ovserve_batches SET status = %s, batch = %s, lease_until = %s WHERE id = %s AND runner = %s"
        return await self._count(sql, (batch.status, batch.stored(), until, batch.id, runner)) > 0

    async def batch(self, batch_id: str, *, owner: str) -> Batch | None:
        sql = "SELECT batch, cancel_at FROM ovserve_batches WHERE id = %s AND owner = %s"
        rows = await self._rows(sql, (batch_id, owner))
        return overlay(str(rows[0][0]), rows[0][1]) if rows else None

    async def batches(self, query: BatchQuery, *, owner: str) -> tuple[list[Batch], bool]:
        where, args = "owner = %s", [owner]
        if query.after is not None:
            where += " AND seq < COALESCE((SELECT seq FROM ovserve_batches WHERE id = %s AND owner = %s), -1)"
            args += [query.after, owner]
        sql = f"SELECT batch, cancel_at FROM ovserve_batches WHERE {where} ORDER BY seq DESC LIMIT {query.limit + 1}"
        rows = await self._rows(sql, args)
        return [overlay(str(text), cancel_at) for text, cancel_at in rows[: query.limit]], len(rows) > query.limit

    async def claim(self, *, runner: str, now: float, until: float, mine: bool) -> list[tuple[str, Batch]]:
        sql = _CLAIM.format(mine="OR runner = %(runner)s" if mine else "")
        args = {"runner": runner, "until": until, "now": now, "unfinished": list(UNFINISHED)}
        rows = sorted(await self._rows(sql, args))
        return [(str(owner), overlay(str(text), cancel_at)) for _, owner, text, cancel_at in rows]

    async def renew(self, batch_ids: Sequence[str], *, runner: str, until: float) -> dict[str, int | None]:
        if not batch_ids:
            return {}
        sql = "UPDATE ovserve_batches SET lease_until = %s WHERE id = ANY(%s) AND runner = %s RETURNING id, cancel_at"
        rows = await self._rows(sql, (until, list(batch_ids), runner))
        return {str(batch_id): cancel_at for batch_id, cancel_at in rows}

    async def release(self, batch_ids: Sequence[str], *, runner: str) -> None:
        if batch_ids:
            sql = "UPDATE ovserve_batches SET runner = NULL, lease_until = NULL WHERE id = ANY(%s) AND runner = %s"
            await self._count(sql, (list(batch_ids), runner))

    async def request_cancel(self, batch_id: str, *, owner: str, at: int) -> Batch | None:
        sql = (
            "UPDATE ovserve_batches SET cancel_at = COALESCE(cancel_at, %s)"
            " WHERE id = %s AND owner = %s AND status = ANY(%s)"
        )
        await self._count(sql, (at, batch_id, owner, list(CANCELLABLE)))
        return await self.batch(batch_id, owner=owner)
