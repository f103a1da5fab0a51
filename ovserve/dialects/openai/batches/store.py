"""Batches in SQLite, beside the files they read and write, owned per API key.

The batches live in the files store's database (``ovserve.dialects.openai.files.store``), one row
per batch holding its Batch object as JSON, and run on its thread. A running batch's results are
written to its work directory, ``<files directory>/batches/<batch id>/``: ``output.jsonl`` and
``errors.jsonl``, one line per finished request, appended (and flushed to the operating system)
as each request finishes. That is the batch's progress: a server that restarts (after a crash, a
SIGKILL) reads back which ``custom_id`` are done (``lines.recorded_ids``) and runs only the rest.
At the end the two files become the batch's output and error files (``purpose: batch_output``).

Ownership: as the files': another key's batch reads, lists and cancels as an unknown one.
"""

from __future__ import annotations

import json
from pathlib import Path

from ovserve.dialects.openai.batches.objects import UNFINISHED, Batch, ListQuery
from ovserve.dialects.openai.files.store import FileStore
from ovserve.errors import NotFoundError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    owner TEXT NOT NULL,
    status TEXT NOT NULL,
    batch TEXT NOT NULL  -- the Batch object, as GET returns it
);
CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner, seq);
"""


def batch_not_found(batch_id: str) -> NotFoundError:
    return NotFoundError(f"No such Batch object: {batch_id}", param="batch_id", code="batch_not_found")


class BatchStore:
    """Batch objects of every owner, in ``files``' database."""

    def __init__(self, files: FileStore) -> None:
        self.files = files

    def work_dir(self, batch_id: str) -> Path:
        return self.files.directory / "batches" / batch_id

    async def start(self) -> None:
        await self.files.run(lambda: self.files.db.executescript(_SCHEMA))

    async def put(self, batch: Batch, *, owner: str) -> None:
        """Write ``batch`` (new or changed)."""
        text = batch.encode()

        def put() -> None:
            self.files.db.execute(
                "INSERT INTO batches (id, owner, status, batch) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET status = excluded.status, batch = excluded.batch",
                (batch.id, owner, batch.status, text),
            )

        await self.files.run(put)

    async def get(self, batch_id: str, *, owner: str) -> Batch:
        """``owner``'s batch, or a 404 (unknown or another owner's)."""

        def get() -> str | None:
            row = self.files.db.execute(
                "SELECT batch FROM batches WHERE id = ? AND owner = ?", (batch_id, owner)
            ).fetchone()
            return None if row is None else str(row[0])

        text = await self.files.run(get)
        if text is None:
            raise batch_not_found(batch_id)
        return Batch.model_validate_json(text)

    async def page(self, query: ListQuery, *, owner: str) -> tuple[list[Batch], bool]:
        """``owner``'s batches, newest first, a page after ``query.after``; whether more follow."""

        def rows() -> list[str]:
            where, args = "owner = ?", [owner]
            if query.after is not None:
                where += " AND seq < COALESCE((SELECT seq FROM batches WHERE id = ? AND owner = ?), -1)"
                args += [query.after, owner]
            sql = f"SELECT batch FROM batches WHERE {where} ORDER BY seq DESC LIMIT {query.limit + 1}"
            return [str(row[0]) for row in self.files.db.execute(sql, args)]

        texts = await self.files.run(rows)
        return [Batch.model_validate_json(text) for text in texts[: query.limit]], len(texts) > query.limit

    async def unfinished(self) -> list[tuple[str, Batch]]:
        """(owner, batch) of every batch with work left, oldest first: what a restart resumes."""

        def rows() -> list[tuple[str, str]]:
            marks = ", ".join("?" for _ in UNFINISHED)
            sql = f"SELECT owner, batch FROM batches WHERE status IN ({marks}) ORDER BY seq"
            return [(str(owner), str(text)) for owner, text in self.files.db.execute(sql, UNFINISHED)]

        return [(owner, Batch.model_validate(json.loads(text))) for owner, text in await self.files.run(rows)]
