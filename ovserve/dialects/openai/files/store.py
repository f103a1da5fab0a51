"""Uploaded files on disk and their metadata in SQLite, owned per API key.

Layout: ``<directory>/files.sqlite3`` holds one row per file (its File object's fields and its
owner); ``<directory>/data/<id>`` holds its bytes. An upload is written to ``data/<id>.part`` chunk
by chunk as it arrives (:class:`Upload`), its size and line count checked after each chunk, and
renamed into place and recorded only once complete: a refused or broken upload leaves nothing.
A file is never held whole in memory, on the way in or out (``GET .../content`` streams it).

Ownership: as the Responses store's (``ovserve.dialects.openai.responses.store``): each row has an
``owner``, the digest of the API key that uploaded it (``OPEN_OWNER`` without keys); another
owner's file reads, lists and deletes as an unknown one.

Faults: a disk or database fault (full, read-only, a removed file or directory) is a 503 with
``Retry-After`` (:meth:`FileStore.run`), logged; what was not written is not recorded.

Threading: every statement and every disk write runs on one dedicated thread, so the event loop
never waits on the disk. The database is opened in WAL mode with ``synchronous=NORMAL``: durable
across a process crash, which is what a restarted server needs to find its batches' files.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

from ovserve.dialects.openai.files.objects import FileObject, ListQuery, Purpose
from ovserve.errors import BadRequestError, NotFoundError, PayloadTooLargeError, ServiceUnavailableError
from ovserve.models.threads import started_thread

T = TypeVar("T")
log = logging.getLogger(__name__)

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
"""
_COLUMNS = "id, bytes, created_at, filename, purpose"


def files_directory(files_dir: Path | None, responses_store: str) -> Path | None:
    """``--files_dir``; else ``ovserve-files`` beside a Responses store file (the server's state
    lives there already); else None: a temporary directory (``memory``, ``none``, PostgreSQL)."""
    if files_dir is not None:
        return files_dir
    if responses_store in ("memory", "none") or "://" in responses_store:
        return None
    return Path(responses_store).parent / "ovserve-files"


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex[:24]}"


def file_not_found(file_id: str) -> NotFoundError:
    """Unknown and another key's file answer alike: ids do not leak across keys."""
    return NotFoundError(f"No such File object: {file_id}", param="file_id", code="file_not_found")


def _file_object(row: tuple[Any, ...]) -> FileObject:
    file_id, size, created_at, filename, purpose = row
    return FileObject(id=file_id, object="file", bytes=size, created_at=created_at, filename=filename, purpose=purpose)


class Upload:
    """One file being received: :meth:`write` each chunk, then :meth:`finish` (or :meth:`abort`).
    ``write`` raises a 413 past ``max_bytes`` and a 400 past ``max_lines``, and the partial file
    is removed then."""

    def __init__(self, store: FileStore, owner: str, filename: str, max_bytes: int, max_lines: int) -> None:
        self._store = store
        self.owner = owner
        self.filename = filename
        self.id = new_file_id()
        self.bytes = 0
        self.lines = 0
        self._max_bytes = max_bytes
        self._max_lines = max_lines
        self._last = b"\n"  # the last byte received: a last line without its newline still counts
        self._part = store.data / f"{self.id}.part"
        self._out: IO[bytes] | None = None

    async def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.bytes += len(chunk)
        if self.bytes > self._max_bytes:
            await self.abort()
            raise PayloadTooLargeError(
                f"the file is larger than --max_file_mb ({self._max_bytes / 1024 / 1024:g} MB)", param="file"
            )
        self.lines += chunk.count(b"\n")
        self._last = chunk[-1:]
        if self.lines + (self._last != b"\n") > self._max_lines:
            await self.abort()
            raise BadRequestError(
                f"the file has more than --max_file_lines ({self._max_lines}) lines",
                param="file",
                code="too_many_lines",
            )
        await self._store.run(self._append, chunk)

    def _append(self, chunk: bytes) -> None:
        if self._out is None:
            self._out = self._part.open("wb")
        self._out.write(chunk)

    async def finish(self, purpose: Purpose) -> FileObject:
        """Record the complete file for its owner (an empty upload is a 400)."""
        if self.bytes == 0:
            await self.abort()
            raise BadRequestError("the file is empty", param="file", code="empty_file")
        return await self._store.run(self._finish, purpose)

    def _finish(self, purpose: Purpose) -> FileObject:
        self._close()
        self._part.rename(self._store.data / self.id)
        return self._store.record(self.id, self.owner, self.bytes, self.filename, purpose)

    async def abort(self) -> None:
        await self._store.run(self._abort)

    def _abort(self) -> None:
        self._close()
        self._part.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._out is not None:
            self._out.flush()
            os.fsync(self._out.fileno())
            self._out.close()
            self._out = None


class FileStore:
    """Files under ``directory``, created at :meth:`start`; None: a temporary directory of the
    server's own (no ``--files_dir`` and no Responses store file), removed at :meth:`aclose`."""

    def __init__(self, directory: Path | None, *, max_bytes: int, max_lines: int) -> None:
        self.temporary = directory is None
        self.directory = directory if directory is not None else Path()
        self.max_bytes = max_bytes
        self.max_lines = max_lines
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None

    @property
    def data(self) -> Path:
        return self.directory / "data"

    async def start(self) -> None:
        """Make the directory and open the database (on the store's own thread)."""
        if self.temporary:
            self.directory = Path(tempfile.mkdtemp(prefix="ovserve-files-"))
        self._thread = started_thread("files-store")
        await self.run(self._open)

    def _open(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        for stale in self.data.glob("*.part"):  # uploads a crash cut short
            stale.unlink(missing_ok=True)
        db = sqlite3.connect(self.directory / "files.sqlite3", isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        self._db = db

    @property
    def db(self) -> sqlite3.Connection:
        assert self._db is not None, "the files store is closed"
        return self._db

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` on the store's thread. A fault of the disk or the database (full,
        read-only, a file or directory removed) is a 503 with Retry-After, logged, never a 500."""
        assert self._thread is not None, "the files store is not started"
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, work, *args)
        except (OSError, sqlite3.OperationalError) as exc:
            log.warning("files store (%s): %s: %s", self.directory, type(exc).__name__, exc)
            raise ServiceUnavailableError(
                "the files store cannot be used now (a disk or database fault, logged on the server)",
                code="files_store_unavailable",
            ) from exc

    # -- on the store's thread --------------------------------------------------------------

    def record(self, file_id: str, owner: str, size: int, filename: str, purpose: Purpose) -> FileObject:
        created_at = int(time.time())
        self.db.execute(
            "INSERT INTO files (id, owner, bytes, created_at, filename, purpose) VALUES (?, ?, ?, ?, ?, ?)",
            (file_id, owner, size, created_at, filename, purpose),
        )
        return _file_object((file_id, size, created_at, filename, purpose))

    def adopt(self, path: Path, file_id: str, owner: str, filename: str, purpose: Purpose) -> None:
        """Make the complete file at ``path`` (on the same file system) ``owner``'s file ``file_id``.
        Idempotent: a second call after a crash between the move and the row finishes the job."""
        target = self.data / file_id
        if path.exists():
            path.rename(target)
        if self._get(file_id, owner) is None and target.exists():
            self.record(file_id, owner, target.stat().st_size, filename, purpose)

    def _get(self, file_id: str, owner: str) -> FileObject | None:
        row = self.db.execute(f"SELECT {_COLUMNS} FROM files WHERE id = ? AND owner = ?", (file_id, owner)).fetchone()
        return _file_object(row) if row is not None else None

    def _list(self, owner: str, query: ListQuery) -> tuple[list[FileObject], bool]:
        where, args = ["owner = ?"], [owner]
        if query.purpose is not None:
            where.append("purpose = ?")
            args.append(query.purpose)
        comparison = ">" if query.order == "asc" else "<"
        if query.after is not None:
            where.append(f"seq {comparison} COALESCE((SELECT seq FROM files WHERE id = ? AND owner = ?), -1)")
            args += [query.after, owner]
        sql = (
            f"SELECT {_COLUMNS} FROM files WHERE {' AND '.join(where)}"
            f" ORDER BY seq {query.order.upper()} LIMIT {query.limit + 1}"
        )
        rows = self.db.execute(sql, args).fetchall()
        return [_file_object(row) for row in rows[: query.limit]], len(rows) > query.limit

    def _delete(self, file_id: str, owner: str) -> bool:
        deleted = self.db.execute("DELETE FROM files WHERE id = ? AND owner = ?", (file_id, owner)).rowcount > 0
        if deleted:
            (self.data / file_id).unlink(missing_ok=True)
        return deleted

    # -- the event loop's side --------------------------------------------------------------

    def upload(self, owner: str, filename: str) -> Upload:
        return Upload(self, owner, filename, self.max_bytes, self.max_lines)

    async def get(self, file_id: str, *, owner: str) -> FileObject:
        """``owner``'s file, or a 404 (unknown, deleted, or another owner's)."""
        found = await self.run(self._get, file_id, owner)
        if found is None:
            raise file_not_found(file_id)
        return found

    async def path(self, file_id: str, *, owner: str) -> Path:
        """Where ``owner``'s file's bytes are, or a 404."""
        await self.get(file_id, owner=owner)
        return self.data / file_id

    async def list(self, query: ListQuery, *, owner: str) -> tuple[list[FileObject], bool]:
        """``owner``'s files in ``query``'s order and page; whether more follow."""
        return await self.run(self._list, owner, query)

    async def delete(self, file_id: str, *, owner: str) -> None:
        if not await self.run(self._delete, file_id, owner):
            raise file_not_found(file_id)

    async def aclose(self) -> None:
        if self._thread is None:
            return
        await self.run(self._close)
        self._thread.shutdown()
        self._thread = None

    def _close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        if self.temporary:
            shutil.rmtree(self.directory, ignore_errors=True)
