"""Uploaded files on disk and their metadata, owned per API key.

Layout: ``<directory>/data/<id>`` holds a file's bytes; its File object's fields and its owner are
:mod:`~ovserve.dialects.openai.files.records` (``<directory>/files.sqlite3`` by default, or the
PostgreSQL database replicas share). An upload is written to ``data/<id>.part`` chunk
by chunk as it arrives (:class:`Upload`), its size and line count checked after each chunk, and
renamed into place and recorded only once complete: a refused or broken upload leaves nothing.
A file is never held whole in memory, on the way in or out (``GET .../content`` streams it).
Replicas that share the metadata must share the directory too (a shared volume): a file recorded
by one is read by another from its own ``--files_dir``; one whose bytes are not there is a 503.

Expiry: an upload may ask to expire (``expires_after``: OpenAI's ``anchor: created_at`` and 1 hour
to 30 days); its File object then has ``expires_at``, and from that time on it is a 404 like an
unknown file. Expired files (rows and bytes) are deleted at start and with every new file; nothing
runs in the background. Batch output files do not expire.

Ownership: as the Responses store's (``ovserve.dialects.openai.responses.store``): each row has an
``owner``, the digest of the API key that uploaded it (``OPEN_OWNER`` without keys); another
owner's file reads, lists and deletes as an unknown one.

Faults: a disk or database fault (full, read-only, a removed file or directory, a database down)
is a 503 with ``Retry-After`` (:meth:`FileStore.run`, the records' own), logged; what was not
written is not recorded.

Threading: every disk write (and every SQLite statement) runs on one dedicated thread, so the
event loop never waits on the disk.
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
from ovserve.dialects.openai.files.records import Records, SqliteRecords, StoreFaults, new_file_object, unavailable
from ovserve.errors import BadRequestError, NotFoundError, PayloadTooLargeError, ServiceUnavailableError
from ovserve.models.threads import started_thread

T = TypeVar("T")
log = logging.getLogger(__name__)


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

    async def finish(self, purpose: Purpose, *, expires_after: int | None = None) -> FileObject:
        """Record the complete file for its owner, expiring ``expires_after`` seconds after it is
        recorded (None: never); an empty upload is a 400."""
        if self.bytes == 0:
            await self.abort()
            raise BadRequestError("the file is empty", param="file", code="empty_file")
        await self._store.run(self._finish)
        try:
            return await self._store.record(self.id, self.owner, self.bytes, self.filename, purpose, expires_after)
        except BaseException:  # not recorded: its bytes go too
            await asyncio.shield(self._store.run((self._store.data / self.id).unlink, True))
            raise

    def _finish(self) -> None:
        self._close()
        self._part.rename(self._store.data / self.id)

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
    server's own (no ``--files_dir`` and no Responses store file), removed at :meth:`aclose`.
    ``database``: a PostgreSQL URL for the metadata (:func:`~ovserve.dialects.openai.files.records.shared_database`),
    None for SQLite in the directory; ``password_file`` as ``--responses_store_password_file``."""

    def __init__(
        self,
        directory: Path | None,
        *,
        max_bytes: int,
        max_lines: int,
        database: str | None = None,
        password_file: Path | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.temporary = directory is None
        self.now = now  # Unix time, for expiry (tests move their own)
        self.directory = directory if directory is not None else Path()
        self.max_bytes = max_bytes
        self.max_lines = max_lines
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._records: Records | None = None
        self.faults = StoreFaults()  # ovserve_files_store_failures_total
        if database is not None:  # the driver is an optional extra: imported for a PostgreSQL URL only
            from ovserve.dialects.openai.files.records_postgres import PostgresRecords

            self._records = PostgresRecords(database, password_file=password_file, faults=self.faults)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def records(self) -> Records:
        assert self._records is not None, "the files store is not started"
        return self._records

    async def start(self) -> None:
        """Make the directory and open the metadata (on the store's own thread)."""
        if self.temporary:
            self.directory = Path(tempfile.mkdtemp(prefix="ovserve-files-"))
        self._thread = started_thread("files-store")
        await self.run(self._open)
        if self._records is None:
            self._records = SqliteRecords(self.directory / "files.sqlite3", self.run)
        await self._records.start()
        with contextlib.suppress(ServiceUnavailableError):  # a database not there yet: the next new file
            await self._expire()
        log.info("files store: contents in %s, metadata in %s", self.directory, self._records.location)

    def _open(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        for stale in self.data.glob("*.part"):  # uploads a crash cut short
            stale.unlink(missing_ok=True)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` on the store's thread. A fault of the disk or the database (full,
        read-only, a file or directory removed) is a 503 with Retry-After, logged, never a 500."""
        assert self._thread is not None, "the files store is not started"
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, work, *args)
        except (OSError, sqlite3.OperationalError) as exc:
            raise self.faults.fault(str(self.directory), exc) from exc

    def _now(self) -> int:
        return int(self.now())

    async def record(
        self, file_id: str, owner: str, size: int, filename: str, purpose: Purpose, expires_after: int | None = None
    ) -> FileObject:
        """Record the file whose bytes are at ``data/<file_id>`` as ``owner``'s (and delete the
        files expired by now)."""
        created_at = self._now()
        expires_at = created_at + expires_after if expires_after is not None else None
        file = new_file_object(file_id, size, created_at, filename, purpose, expires_at)
        await self.records.add_file(file, owner=owner)
        with contextlib.suppress(ServiceUnavailableError):  # logged; the file is recorded all the same
            await self._expire()
        return file

    async def _expire(self) -> None:
        """Delete the rows and the bytes of the files expired by now."""
        for file_id in await self.records.expire_files(self._now()):
            await self.run((self.data / file_id).unlink, True)

    async def adopt(
        self, path: Path, file_id: str, owner: str, filename: str, purpose: Purpose, expires_after: int | None = None
    ) -> None:
        """Make the complete file at ``path`` (on the same file system) ``owner``'s file ``file_id``
        (expiring ``expires_after`` seconds from now, if given). Idempotent: a second call after a
        crash between the move and the row finishes the job."""
        target = self.data / file_id
        size = await self.run(_move, path, target)
        if size is not None and await self.records.file(file_id, owner=owner, now=self._now()) is None:
            await self.record(file_id, owner, size, filename, purpose, expires_after)

    # -- the event loop's side --------------------------------------------------------------

    def upload(self, owner: str, filename: str) -> Upload:
        return Upload(self, owner, filename, self.max_bytes, self.max_lines)

    async def get(self, file_id: str, *, owner: str) -> FileObject:
        """``owner``'s file, or a 404 (unknown, deleted, or another owner's)."""
        found = await self.records.file(file_id, owner=owner, now=self._now())
        if found is None:
            raise file_not_found(file_id)
        return found

    async def path(self, file_id: str, *, owner: str) -> Path:
        """Where ``owner``'s file's bytes are, or a 404; a 503 if they are not in this replica's
        directory (replicas sharing the metadata without sharing ``--files_dir``)."""
        await self.get(file_id, owner=owner)
        path = self.data / file_id
        if not await self.run(path.exists):
            log.warning("files store: %s is recorded but %s does not exist (is --files_dir shared?)", file_id, path)
            raise unavailable()
        return path

    async def list(self, query: ListQuery, *, owner: str) -> tuple[list[FileObject], bool]:
        """``owner``'s files in ``query``'s order and page; whether more follow."""
        return await self.records.files(query, owner=owner, now=self._now())

    async def delete(self, file_id: str, *, owner: str) -> None:
        if not await self.records.delete_file(file_id, owner=owner, now=self._now()):
            raise file_not_found(file_id)
        await self.run((self.data / file_id).unlink, True)

    async def aclose(self) -> None:
        if self._thread is None:
            return
        if self._records is not None:
            with contextlib.suppress(Exception):  # closing: a fault now changes nothing
                await self._records.aclose()
        await self.run(self._close)
        self._thread.shutdown()
        self._thread = None

    def _close(self) -> None:
        if self.temporary:
            shutil.rmtree(self.directory, ignore_errors=True)


def _move(path: Path, target: Path) -> int | None:
    """Move ``path`` to ``target`` if it is still there; ``target``'s size, None if neither exists."""
    if path.exists():
        path.rename(target)
    return target.stat().st_size if target.exists() else None
