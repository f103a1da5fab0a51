"""Faults for the Responses store (``ovserve.dialects.openai.responses.store``), real where they can be.

``PRAGMA max_page_count`` makes the database unable to grow, which SQLite reports exactly as a
full disk (its own SQLITE_FULL, from the real database). A read-only disk and an I/O error need
root or a broken device, so they are injected: :class:`FaultyConnection` stands in for the store's
connection and raises what SQLite raises (the same class, result code, name and message).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from ovserve.dialects.openai.responses.store import ResponseStore

T = TypeVar("T")


def on_store_thread(store: ResponseStore, function: Callable[[], T]) -> T:
    """Run ``function`` where the store's connection lives."""
    assert store._thread is not None
    return store._thread.submit(function).result()


def fill_disk(store: ResponseStore) -> None:
    """From now on the database cannot grow by a page: SQLITE_FULL, as on a full disk."""

    def limit() -> None:
        assert store._db is not None
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count={pages}")

    on_store_thread(store, limit)


def free_disk(store: ResponseStore) -> None:
    def unlimit() -> None:
        assert store._db is not None
        store._db.execute("PRAGMA max_page_count=1000000")

    on_store_thread(store, unlimit)


def sqlite_error(cls: type[sqlite3.Error], code: int, name: str, message: str) -> sqlite3.Error:
    """An error as SQLite raises it (Python 3.11 on sets the two attributes)."""
    error = cls(message)
    error.sqlite_errorcode = code  # type: ignore[attr-defined]
    error.sqlite_errorname = name  # type: ignore[attr-defined]
    return error


def disk_io_error() -> sqlite3.Error:
    return sqlite_error(sqlite3.OperationalError, 10, "SQLITE_IOERR", "disk I/O error")


def read_only() -> sqlite3.Error:
    return sqlite_error(sqlite3.OperationalError, 8, "SQLITE_READONLY", "attempt to write a readonly database")


class FaultyConnection:
    """The store's connection, except that statements starting with one of ``verbs`` raise
    ``error`` while ``failing`` is set."""

    def __init__(self, db: sqlite3.Connection, error: sqlite3.Error, *verbs: str) -> None:
        self.db = db
        self.error = error
        self.verbs = tuple(verb.upper() for verb in verbs)
        self.failing = True

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self.failing and sql.lstrip().upper().startswith(self.verbs):
            raise self.error
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def inject(store: ResponseStore, error: sqlite3.Error, *verbs: str) -> FaultyConnection:
    """Put a :class:`FaultyConnection` around the store's connection (between two calls)."""
    assert store._db is not None
    faulty = FaultyConnection(store._db, error, *verbs)
    store._db = faulty  # type: ignore[assignment]
    return faulty
