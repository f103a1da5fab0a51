"""The files' and batches' metadata: what :class:`Records` keeps, its two backends, and which one
the settings name (:func:`shared_database`).

:class:`Records` holds one row per file (its File object's fields and its owner) and one per batch
(its Batch object as JSON, its owner, and who runs it). File *contents* are not here: they stay on
disk under ``--files_dir`` (``ovserve.dialects.openai.files.store``). Two backends, same semantics:
:class:`SqliteRecords`, ``files.sqlite3`` in the files directory (the embedded default), and
:class:`~ovserve.dialects.openai.files.records_postgres.PostgresRecords`, the tables
``ovserve_files`` and ``ovserve_batches`` of the PostgreSQL database ``--responses_store`` names,
shared by replicas -- chosen only together with ``--files_dir``: the rows must name contents every
replica can read (a shared volume), and without ``--files_dir`` the contents live in a temporary
directory of this process alone, so its rows do too.

Ownership: every read, list, delete and cancel matches the owner (the API key's digest): another
owner's file or batch reads as an unknown one (None / False).

Expiry: a file uploaded with ``expires_after`` has an ``expires_at`` (Unix time); from then on it
reads, lists and deletes as an unknown one (the reads take ``now``), and :meth:`Records.expire_files`
deletes its row (the files store calls it at start and with every new file, and removes the bytes).

Who runs a batch: a batch with work left is run by one runner at a time, the one holding its
lease (``runner``, ``lease_until``: Unix time on the runner's clock). :meth:`Records.claim` takes
the batches whose lease is free or ran out (one runner wins each, even when replicas claim at
once); the holder :meth:`Records.renew` s it and every :meth:`Records.put_batch` is fenced by it
(False: another runner holds it now, and this one must stop without writing). A cancel asked of a
replica that does not run the batch is :meth:`Records.request_cancel`: a ``cancel_at`` the holder
reads at its next renewal; until then every read shows the batch ``cancelling`` (:func:`overlay`).

Faults: a disk or database fault is a 503 ``files_store_unavailable`` (with ``Retry-After``),
logged, never a 500; what was not written is not recorded.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ovserve.dialects.openai.batches.objects import UNFINISHED, Batch
from ovserve.dialects.openai.batches.objects import ListQuery as BatchQuery
from ovserve.dialects.openai.files.objects import FileObject, ListQuery, Purpose
from ovserve.errors import ServiceUnavailableError

log = logging.getLogger("ovserve.dialects.openai.files.store")
T = TypeVar("T")
# Runs blocking work on the files store's own thread (FileStore.run): faults become 503s there.
Runner = Callable[..., Awaitable[Any]]

# A batch in one of these may still be cancelled (a cancel of one already cancelling changes nothing).
CANCELLABLE = ("validating", "in_progress", "finalizing")


def unavailable() -> ServiceUnavailableError:
    return ServiceUnavailableError(
        "the files store cannot be used now (a disk or database fault, logged on the server)",
        code="files_store_unavailable",
    )


class StoreFaults:
    """The files store's faults (a full or read-only disk, a database down): counted for
    ``ovserve_files_store_failures_total``, and logged at most once a minute with the number of
    faults the line stands for, so a full disk under a running batch is a line a minute, not one
    per line of the batch. Nothing needs repairing after one: the SQLite connection and the
    PostgreSQL pool are used again as they are (the pool reconnects), so the store works again as
    soon as its disk or database does."""

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.count = 0
        self._interval = interval
        self._clock = clock
        self._quiet_until = float("-inf")
        self._untold = 0

    def fault(self, location: str, exc: BaseException) -> ServiceUnavailableError:
        """Count and (rate-limited) log ``exc``; the 503 to raise from it."""
        self.count += 1
        now = self._clock()
        if now < self._quiet_until:
            self._untold += 1
        else:
            more = f" ({self._untold} more since the last warning)" if self._untold else ""
            log.warning("files store (%s): %s: %s%s", location, type(exc).__name__, exc, more)
            self._quiet_until, self._untold = now + self._interval, 0
        return unavailable()


def shared_database(files_dir: Path | None, responses_store: str) -> str | None:
    """The PostgreSQL URL the files' and batches' metadata go to, or None for SQLite in the files
    directory: PostgreSQL when ``--responses_store`` is a PostgreSQL URL *and* ``--files_dir`` is
    set (see the module doc)."""
    if files_dir is not None and responses_store.startswith(("postgresql://", "postgres://")):
        return responses_store
    return None


def file_object(row: Sequence[Any]) -> FileObject:
    file_id, size, created_at, filename, purpose, expires_at = row
    return new_file_object(file_id, size, created_at, filename, purpose, expires_at)


def new_file_object(
    file_id: str, size: int, created_at: int, filename: str, purpose: Purpose, expires_at: int | None = None
) -> FileObject:
    """The File object as every route answers it: ``status`` always (OpenAI's schema requires it),
    ``expires_at`` only for a file that expires."""
    fields: dict[str, Any] = {"expires_at": expires_at} if expires_at is not None else {}
    return FileObject(
        id=file_id,
        object="file",
        bytes=size,
        created_at=created_at,
        filename=filename,
        purpose=purpose,
        status="processed",
        **fields,
    )


def overlay(text: str, cancel_at: int | None) -> Batch:
    """The stored Batch object, shown ``cancelling`` once a cancel was asked of a replica that does
    not run it, until the runner that does writes the cancel itself."""
    batch = Batch.model_validate_json(text)
    if cancel_at is not None and batch.status in CANCELLABLE:
        return batch.model_copy(update={"status": "cancelling", "cancelling_at": cancel_at})
    return batch


class Records(Protocol):
    """The metadata of files and batches (see the module doc); every call may raise a 503."""

    location: str
    # Whether other servers use these records too (PostgreSQL). Not shared (SQLite), every batch
    # in them is this server's: at start it takes them all back, whoever held their leases.
    shared: bool

    async def start(self) -> None: ...
    async def aclose(self) -> None: ...

    async def add_file(self, file: FileObject, *, owner: str) -> None: ...
    async def file(self, file_id: str, *, owner: str, now: int) -> FileObject | None: ...
    async def files(self, query: ListQuery, *, owner: str, now: int) -> tuple[list[FileObject], bool]: ...
    async def delete_file(self, file_id: str, *, owner: str, now: int) -> bool: ...

    async def expire_files(self, now: int) -> list[str]:
        """Delete the rows of every file expired at ``now``; their ids (their bytes are the caller's)."""

    async def add_batch(self, batch: Batch, *, owner: str, runner: str, until: float) -> None:
        """A new batch, leased to ``runner`` until ``until``."""

    async def put_batch(self, batch: Batch, *, runner: str, until: float) -> bool:
        """Write ``batch`` and extend its lease, if ``runner`` still holds it; False if another does."""

    async def batch(self, batch_id: str, *, owner: str) -> Batch | None: ...
    async def batches(self, query: BatchQuery, *, owner: str) -> tuple[list[Batch], bool]: ...

    async def claim(self, *, runner: str, now: float, until: float, mine: bool) -> list[tuple[str, Batch]]:
        """(owner, batch) of every batch with work left that ``runner`` took, oldest first: those
        whose lease is free or ran out before ``now`` (and those ``runner`` held, if ``mine``)."""

    async def renew(self, batch_ids: Sequence[str], *, runner: str, until: float) -> dict[str, int | None]:
        """Extend ``runner``'s leases; for each batch it still holds, the time a cancel was asked (or None)."""

    async def release(self, batch_ids: Sequence[str], *, runner: str) -> None:
        """Give up ``runner``'s leases (a stop): another runner may take the batches at once."""

    async def request_cancel(self, batch_id: str, *, owner: str, at: int) -> Batch | None:
        """Ask whoever runs ``owner``'s batch to cancel it; the batch as it reads now, or None."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- the list's order (created_at has whole seconds)
    id TEXT UNIQUE NOT NULL,
    owner TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    filename TEXT NOT NULL,
    purpose TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS files_owner ON files (owner, seq);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    owner TEXT NOT NULL,
    status TEXT NOT NULL,
    batch TEXT NOT NULL  -- the Batch object, as GET returns it
);
CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner, seq);
"""
# Columns a database written before them gets on open (ALTER TABLE ... ADD COLUMN).
_ADDED = {
    "files": {"expires_at": "INTEGER"},
    "batches": {"runner": "TEXT", "lease_until": "REAL", "cancel_at": "INTEGER"},
}
_FILE_COLUMNS = "id, bytes, created_at, filename, purpose, expires_at"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"  # not expired at the time given
_MARKS = ", ".join("?" for _ in UNFINISHED)


class SqliteRecords:
    """The metadata in ``path`` (SQLite, WAL, ``synchronous=NORMAL``: durable across a process
    crash), every statement run by ``run`` on the files store's thread."""

    def __init__(self, path: Path, run: Runner) -> None:
        self.location = str(path)
        self.shared = False
        self._path = path
        self._run = run
        self._db: sqlite3.Connection | None = None

    async def _call(self, work: Callable[..., T], *args: Any) -> T:
        result: T = await self._run(work, *args)
        return result

    @property
    def db(self) -> sqlite3.Connection:
        assert self._db is not None, "the files store is closed"
        return self._db

    async def start(self) -> None:
        await self._call(self._open)

    def _open(self) -> None:
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        for table, columns in _ADDED.items():
            present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            for name, kind in columns.items():
                if name not in present:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        db.execute("CREATE INDEX IF NOT EXISTS files_expires ON files (expires_at) WHERE expires_at IS NOT NULL")
        self._db = db

    async def aclose(self) -> None:
        await self._call(self._close)

    def _close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    # -- files ------------------------------------------------------------------------------

    async def add_file(self, file: FileObject, *, owner: str) -> None:
        sql = (
            "INSERT INTO files (id, owner, bytes, created_at, filename, purpose, expires_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        args = (file.id, owner, file.bytes, file.created_at, file.filename, file.purpose, file.expires_at)
        await self._call(self.db.execute, sql, args)

    async def file(self, file_id: str, *, owner: str, now: int) -> FileObject | None:
        def get() -> FileObject | None:
            sql = f"SELECT {_FILE_COLUMNS} FROM files WHERE id = ? AND owner = ? AND {_LIVE}"
            row = self.db.execute(sql, (file_id, owner, now)).fetchone()
            return file_object(row) if row is not None else None

        return await self._call(get)

    async def files(self, query: ListQuery, *, owner: str, now: int) -> tuple[list[FileObject], bool]:
        def rows() -> list[Any]:
            where, args = ["owner = ?", _LIVE], [owner, now]
            if query.purpose is not None:
                where.append("purpose = ?")
                args.append(query.purpose)
            comparison = ">" if query.order == "asc" else "<"
            if query.after is not None:
                where.append(f"seq {comparison} COALESCE((SELECT seq FROM files WHERE id = ? AND owner = ?), -1)")
                args += [query.after, owner]
            sql = (
                f"SELECT {_FILE_COLUMNS} FROM files WHERE {' AND '.join(where)}"
                f" ORDER BY seq {query.order.upper()} LIMIT {query.limit + 1}"
            )
            return self.db.execute(sql, args).fetchall()

        found = await self._call(rows)
        return [file_object(row) for row in found[: query.limit]], len(found) > query.limit

    async def delete_file(self, file_id: str, *, owner: str, now: int) -> bool:
        def delete() -> bool:
            sql = f"DELETE FROM files WHERE id = ? AND owner = ? AND {_LIVE}"
            return self.db.execute(sql, (file_id, owner, now)).rowcount > 0

        return await self._call(delete)

    async def expire_files(self, now: int) -> list[str]:
        def expire() -> list[str]:
            sql = "DELETE FROM files WHERE expires_at <= ? RETURNING id"
            return [str(row[0]) for row in self.db.execute(sql, (now,)).fetchall()]

        return await self._call(expire)

    # -- batches ----------------------------------------------------------------------------

    async def add_batch(self, batch: Batch, *, owner: str, runner: str, until: float) -> None:
        sql = "INSERT INTO batches (id, owner, status, batch, runner, lease_until) VALUES (?, ?, ?, ?, ?, ?)"
        await self._call(self.db.execute, sql, (batch.id, owner, batch.status, batch.stored(), runner, until))

    async def put_batch(self, batch: Batch, *, runner: str, until: float) -> bool:
        def put() -> bool:
            sql = "UPDATE batches SET status = ?, batch = ?, lease_until = ? WHERE id = ? AND runner = ?"
            return self.db.execute(sql, (batch.status, batch.stored(), until, batch.id, runner)).rowcount > 0

        return await self._call(put)

    async def batch(self, batch_id: str, *, owner: str) -> Batch | None:
        def get() -> tuple[str, int | None] | None:
            sql = "SELECT batch, cancel_at FROM batches WHERE id = ? AND owner = ?"
            row = self.db.execute(sql, (batch_id, owner)).fetchone()
            return None if row is None else (str(row[0]), row[1])

        found = await self._call(get)
        return None if found is None else overlay(*found)

    async def batches(self, query: BatchQuery, *, owner: str) -> tuple[list[Batch], bool]:
        def rows() -> list[tuple[str, int | None]]:
            where, args = "owner = ?", [owner]
            if query.after is not None:
                where += " AND seq < COALESCE((SELECT seq FROM batches WHERE id = ? AND owner = ?), -1)"
                args += [query.after, owner]
            sql = f"SELECT batch, cancel_at FROM batches WHERE {where} ORDER BY seq DESC LIMIT {query.limit + 1}"
            return [(str(text), cancel_at) for text, cancel_at in self.db.execute(sql, args)]

        found = await self._call(rows)
        return [overlay(*row) for row in found[: query.limit]], len(found) > query.limit

    async def claim(self, *, runner: str, now: float, until: float, mine: bool) -> list[tuple[str, Batch]]:
        def claim() -> list[tuple[str, Batch]]:
            # One statement: SQLite runs one writer at a time, so no two runners take a batch.
            free = "runner IS NULL OR lease_until < ?" + (" OR runner = ?" if mine else "")
            args: list[Any] = [runner, until, *UNFINISHED, now] + ([runner] if mine else [])
            sql = (
                f"UPDATE batches SET runner = ?, lease_until = ? WHERE status IN ({_MARKS}) AND ({free})"
                " RETURNING seq, owner, batch, cancel_at"
            )
            taken = sorted(self.db.execute(sql, args).fetchall())
            return [(str(owner), overlay(str(text), cancel_at)) for _, owner, text, cancel_at in taken]

        return await self._call(claim)

    async def renew(self, batch_ids: Sequence[str], *, runner: str, until: float) -> dict[str, int | None]:
        def renew() -> dict[str, int | None]:
            held: dict[str, int | None] = {}
            for batch_id in batch_ids:
                sql = "UPDATE batches SET lease_until = ? WHERE id = ? AND runner = ? RETURNING cancel_at"
                row = self.db.execute(sql, (until, batch_id, runner)).fetchone()
                if row is not None:
                    held[batch_id] = row[0]
            return held

        return await self._call(renew)

    async def release(self, batch_ids: Sequence[str], *, runner: str) -> None:
        def release() -> None:
            sql = "UPDATE batches SET runner = NULL, lease_until = NULL WHERE id = ? AND runner = ?"
            self.db.executemany(sql, [(batch_id, runner) for batch_id in batch_ids])

        await self._call(release)

    async def request_cancel(self, batch_id: str, *, owner: str, at: int) -> Batch | None:
        def cancel() -> None:
            marks = ", ".join("?" for _ in CANCELLABLE)
            sql = (
                "UPDATE batches SET cancel_at = COALESCE(cancel_at, ?)"
                f" WHERE id = ? AND owner = ? AND status IN ({marks})"
            )
            self.db.execute(sql, (at, batch_id, owner, *CANCELLABLE))

        await self._call(cancel)
        return await self.batch(batch_id, owner=owner)
