"""Batches beside the files they read and write, owned per API key, leased to the runner that runs them.

The batches' rows live with the files' metadata (:mod:`~ovserve.dialects.openai.files.records`:
SQLite in the files directory, or the PostgreSQL database replicas share), one row per batch
holding its Batch object as JSON, its owner and its lease. A running batch's results are written
to its work directory, ``<files directory>/batches/<batch id>/``, one line per finished request,
appended (and flushed to the operating system) as each request finishes, in files of the runner's
own (:mod:`~ovserve.dialects.openai.batches.progress`). That is the batch's progress: a runner
that resumes it (the same server after a crash or a SIGKILL, or another replica once the lease ran
out) reads back which ``custom_id`` are done and runs only the rest. At the end they are merged
into the batch's output and error files (``purpose: batch_output``). Replicas that share the
database therefore share ``--files_dir`` too.

Ownership: as the files': another key's batch reads, lists and cancels as an unknown one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ovserve.dialects.openai.batches.objects import Batch, ListQuery
from ovserve.dialects.openai.files.store import FileStore
from ovserve.errors import NotFoundError


def batch_not_found(batch_id: str) -> NotFoundError:
    return NotFoundError(f"No such Batch object: {batch_id}", param="batch_id", code="batch_not_found")


class BatchStore:
    """Batch objects of every owner, in ``files``' metadata (the calls are
    :class:`~ovserve.dialects.openai.files.records.Records`' batch calls; a 404 for an unknown id)."""

    def __init__(self, files: FileStore) -> None:
        self.files = files

    def work_dir(self, batch_id: str) -> Path:
        return self.files.directory / "batches" / batch_id

    async def add(self, batch: Batch, *, owner: str, runner: str, until: float) -> None:
        await self.files.records.add_batch(batch, owner=owner, runner=runner, until=until)

    async def put(self, batch: Batch, *, runner: str, until: float) -> bool:
        """Write ``batch`` if ``runner`` still holds its lease (extended to ``until``); False if not."""
        return await self.files.records.put_batch(batch, runner=runner, until=until)

    async def get(self, batch_id: str, *, owner: str) -> Batch:
        """``owner``'s batch, or a 404 (unknown or another owner's)."""
        found = await self.files.records.batch(batch_id, owner=owner)
        if found is None:
            raise batch_not_found(batch_id)
        return found

    async def page(self, query: ListQuery, *, owner: str) -> tuple[list[Batch], bool]:
        """``owner``'s batches, newest first, a page after ``query.after``; whether more follow."""
        return await self.files.records.batches(query, owner=owner)

    async def claim(self, *, runner: str, now: float, until: float, mine: bool) -> list[tuple[str, Batch]]:
        return await self.files.records.claim(runner=runner, now=now, until=until, mine=mine)

    async def renew(self, batch_ids: Sequence[str], *, runner: str, until: float) -> dict[str, int | None]:
        return await self.files.records.renew(batch_ids, runner=runner, until=until)

    async def release(self, batch_ids: Sequence[str], *, runner: str) -> None:
        await self.files.records.release(batch_ids, runner=runner)

    async def request_cancel(self, batch_id: str, *, owner: str, at: int) -> Batch:
        found = await self.files.records.request_cancel(batch_id, owner=owner, at=at)
        if found is None:
            raise batch_not_found(batch_id)
        return found
