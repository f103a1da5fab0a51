"""The Responses store under disk and file faults: full, read-only, I/O errors, a deleted file.

Real faults where the file system or SQLite makes them without root (a full database, a file
where the store's directory should be, a deleted file or directory); injected ones otherwise
(``tests/store_faults.py``).
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

from ovserve.dialects.openai.responses.store import DELETE, GET, HOUSEKEEPING, PUT, ResponseStore, StoreFault
from tests.store_faults import disk_io_error, fill_disk, free_disk, inject, read_only, sqlite_error
from tests.unit.conftest import stored_response

OWNER = "a" * 64
BIG = "x" * 6_000  # more than a page: storing it needs new pages


def open_store(stores: list[ResponseStore], path: Path) -> ResponseStore:
    store = ResponseStore(str(path), max_count=1_000, max_bytes=10 * 1024 * 1024)
    stores.append(store)
    return store


async def test_a_full_disk_fails_the_write_whole_reads_go_on_and_writes_resume_once_there_is_room(
    stores, tmp_path: Path
) -> None:
    store = open_store(stores, tmp_path / "responses.db")
    assert await store.put(stored_response("before"), [], owner=OWNER) is True
    fill_disk(store)
    with pytest.raises(StoreFault) as raised:
        await store.put(stored_response("lost", BIG), [], owner=OWNER)
    assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
    assert raised.value.__cause__.sqlite_errorname == "SQLITE_FULL"  # SQLite's own, not a stand-in
    assert store.failures[PUT] == 1
    assert await store.get("lost", owner=OWNER) is None  # nothing half-written
    assert await store.get("before", owner=OWNER) is not None  # the connection still reads
    free_disk(store)  # the disk has room again: the same connection writes
    assert await store.put(stored_response("after", BIG), [], owner=OWNER) is True
    assert (await store.get("after", owner=OWNER)) is not None
    assert store.failures == {PUT: 1, GET: 0, DELETE: 0, HOUSEKEEPING: 0}


async def test_a_read_only_disk_fails_writes_but_still_serves_reads(stores, tmp_path: Path) -> None:
    store = open_store(stores, tmp_path / "responses.db")
    await store.put(stored_response("kept", "hello"), [{"role": "user", "content": "hi"}], owner=OWNER)
    faulty = inject(store, read_only(), "INSERT", "UPDATE", "DELETE")
    with pytest.raises(StoreFault):
        await store.put(stored_response("new"), [], owner=OWNER)
    # A read marks the row as used, a write that fails here: the read still answers.
    stored = await store.get("kept", owner=OWNER)
    assert stored is not None and stored.conversation == [{"role": "user", "content": "hi"}]
    with pytest.raises(StoreFault):
        await store.delete("kept", owner=OWNER)
    assert store.failures == {PUT: 1, GET: 0, DELETE: 1, HOUSEKEEPING: 1}
    assert store._db is faulty  # kept: a read-only connection still reads
    faulty.failing = False
    assert await store.put(stored_response("new"), [], owner=OWNER) is True
    assert await store.delete("kept", owner=OWNER) is True


async def test_an_io_error_closes_the_connection_and_the_next_call_opens_a_new_one(stores, tmp_path: Path) -> None:
    store = open_store(stores, tmp_path / "responses.db")
    await store.put(stored_response("before"), [], owner=OWNER)
    faulty = inject(store, disk_io_error(), "INSERT")
    with pytest.raises(StoreFault):
        await store.put(stored_response("lost"), [], owner=OWNER)
    assert store._db is None  # a connection that saw an I/O error is not trusted again
    assert await store.put(stored_response("after"), [], owner=OWNER) is True
    assert store._db is not None and store._db is not faulty
    assert [await store.get(name, owner=OWNER) is not None for name in ("before", "lost", "after")] == [
        True,
        False,
        True,
    ]
    assert store.failures[PUT] == 1


async def test_a_deleted_database_file_is_recreated_and_its_responses_are_gone(
    stores, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "responses.db"
    store = open_store(stores, path)
    await store.put(stored_response("old"), [], owner=OWNER)
    path.unlink()  # only the database: its -wal and -shm are left behind, as after `rm responses.db`
    assert await store.put(stored_response("new"), [], owner=OWNER) is True
    assert path.exists()
    # The old WAL was not replayed into the new database: the deleted responses stay deleted.
    assert await store.get("old", owner=OWNER) is None
    assert await store.get("new", owner=OWNER) is not None
    assert store.failures[HOUSEKEEPING] == 1  # the loss is counted, and told
    assert f"responses store: {path} was deleted or replaced; starting a new, empty database" in caplog.messages
    assert (await store.stats())[0] == 1


async def test_a_deleted_directory_is_recreated_by_the_next_call(stores, tmp_path: Path) -> None:
    path = tmp_path / "store" / "responses.db"
    store = open_store(stores, path)
    await store.put(stored_response("old"), [], owner=OWNER)
    shutil.rmtree(path.parent)
    assert await store.get("old", owner=OWNER) is None  # a read already sees the new, empty store
    assert await store.put(stored_response("new"), [], owner=OWNER) is True
    assert path.exists() and await store.get("new", owner=OWNER) is not None


async def test_a_directory_that_cannot_be_made_is_a_fault_until_it_can(stores, tmp_path: Path) -> None:
    directory = tmp_path / "store"
    store = open_store(stores, directory / "responses.db")
    await store.put(stored_response("old"), [], owner=OWNER)
    shutil.rmtree(directory)
    directory.write_text("a file where the store's directory was")  # stat and mkdir: real OSErrors
    with pytest.raises(StoreFault) as raised:
        await store.put(stored_response("lost"), [], owner=OWNER)
    assert isinstance(raised.value.__cause__, OSError)
    with pytest.raises(StoreFault):
        await store.get("old", owner=OWNER)
    with pytest.raises(StoreFault):
        await store.delete("old", owner=OWNER)
    directory.unlink()
    assert await store.put(stored_response("new"), [], owner=OWNER) is True
    assert store.failures[PUT] == 1 and store.failures[GET] == 1 and store.failures[DELETE] == 1


async def test_a_store_that_cannot_open_at_start_up_does_not_stop_the_server(stores, tmp_path: Path) -> None:
    blocker = tmp_path / "store"
    blocker.write_text("not a directory")
    store = open_store(stores, blocker / "responses.db")  # no exception: the server starts
    assert store.failures[HOUSEKEEPING] == 1
    with pytest.raises(StoreFault):
        await store.put(stored_response("lost"), [], owner=OWNER)
    blocker.unlink()
    assert await store.put(stored_response("kept"), [], owner=OWNER) is True
    assert await store.get("kept", owner=OWNER) is not None


async def test_a_file_that_is_not_a_database_is_a_fault_until_it_is_removed(stores, tmp_path: Path) -> None:
    path = tmp_path / "responses.db"
    store = open_store(stores, path)
    await store.put(stored_response("old"), [], owner=OWNER)
    path.unlink()
    path.write_bytes(b"this is not an SQLite database, but something else at its path" * 100)
    with pytest.raises(StoreFault) as raised:
        await store.get("old", owner=OWNER)
    assert type(raised.value.__cause__) is sqlite3.DatabaseError  # file is not a database
    assert path.read_bytes().startswith(b"this is not")  # someone else's file: left alone
    path.unlink()
    assert await store.put(stored_response("new"), [], owner=OWNER) is True


async def test_faults_are_logged_once_a_minute_without_content_and_recovery_once(
    stores, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ovserve.dialects.openai.responses.store")
    store = open_store(stores, tmp_path / "responses.db")
    faulty = inject(store, read_only(), "INSERT")
    for index in range(20):
        with pytest.raises(StoreFault):
            await store.put(
                stored_response(f"r{index}", "the user's secret"), [{"content": "a secret too"}], owner=OWNER
            )
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "put failed" in warnings[0].getMessage()
    assert "attempt to write a readonly database" in warnings[0].getMessage()
    assert store.failures[PUT] == 20
    faulty.failing = False
    await store.put(stored_response("ok"), [], owner=OWNER)
    await store.put(stored_response("ok2"), [], owner=OWNER)
    recovered = [message for message in caplog.messages if message.startswith("responses store: writing again")]
    assert recovered == ["responses store: writing again (19 more store faults since the last warning)"]
    assert not any("secret" in record.getMessage() for record in caplog.records)


async def test_a_mistake_in_a_statement_is_an_error_not_a_disk_fault(stores, tmp_path: Path) -> None:
    store = open_store(stores, tmp_path / "responses.db")
    inject(store, sqlite_error(sqlite3.OperationalError, 1, "SQLITE_ERROR", "no such column: nope"), "INSERT")
    with pytest.raises(sqlite3.OperationalError):  # a bug: a 500 with a traceback, not a quiet 200
        await store.put(stored_response("r"), [], owner=OWNER)
    inject(store, sqlite3.IntegrityError("UNIQUE constraint failed"), "SELECT")
    with pytest.raises(sqlite3.IntegrityError):
        await store.get("r", owner=OWNER)
    assert sum(store.failures.values()) == 0
