"""The Responses conversation store: bounds (and a file store's disk footprint), least-recently-used
eviction, expiry by age, persistence, owners. The tests of semantics run on both backends (``location``: SQLite in
memory, and a new database on a real PostgreSQL server); the SQLite file's own tests on it alone.
Faults: ``test_response_store_faults.py``; PostgreSQL's own: ``test_response_store_postgres.py``."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from ovserve.clock import SYSTEM_CLOCK, Clock, ManualClock
from ovserve.dialects.openai.responses.backends import Store
from ovserve.dialects.openai.responses.backends import open_store as open_backend
from ovserve.dialects.openai.responses.store import DISABLED, FOOTPRINT_MARGIN, MEMORY, OPEN_OWNER, ResponseStore
from tests.postgres import PostgresServer
from tests.unit.conftest import stored_response

ME = "a" * 64  # owners are key digests (SHA-256 hex) or OPEN_OWNER
OTHER = "b" * 64


def open_store(stores: list[Store], location: str = MEMORY, **bounds: int) -> ResponseStore:
    store = ResponseStore(location, max_count=bounds.get("max_count", 100), max_bytes=bounds.get("max_bytes", 10**6))
    stores.append(store)
    return store


def open_any(
    stores: list[Store], location: str, *, max_age: float | None = None, clock: Clock = SYSTEM_CLOCK, **bounds: int
) -> Store:
    """A store of either backend (``location`` names it)."""
    store = open_backend(
        location,
        max_count=bounds.get("max_count", 100),
        max_bytes=bounds.get("max_bytes", 10**6),
        max_age=max_age,
        clock=clock,
    )
    stores.append(store)
    return store


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest) -> str:
    """Where a backend-agnostic test's store is: SQLite in memory, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return MEMORY
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.new_database()


@pytest.fixture(params=["sqlite file", "postgresql"])
def lasting_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store that outlives its process is: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite file":
        return str(tmp_path / "responses.db")
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.new_database()


async def test_a_stored_response_comes_back_with_its_conversation(stores, location: str) -> None:
    store = open_any(stores, location)
    conversation = [{"role": "user", "content": "hi"}, {"type": "message", "role": "assistant", "content": []}]
    await store.put(stored_response("resp_1"), conversation, owner=ME)
    stored = await store.get("resp_1", owner=ME)
    assert stored is not None and stored.response == stored_response("resp_1") and stored.conversation == conversation
    assert await store.get("resp_unknown", owner=ME) is None


async def test_count_bound_evicts_the_least_recently_used(stores, location: str) -> None:
    store = open_any(stores, location, max_count=3)
    for name in ("a", "b", "c"):
        await store.put(stored_response(name), [], owner=ME)
    assert await store.get("a", owner=ME) is not None  # a is now more recent than b
    await store.put(stored_response("d"), [], owner=ME)
    assert await store.get("b", owner=ME) is None
    assert [await store.get(name, owner=ME) is not None for name in ("a", "c", "d")] == [True, True, True]
    assert (await store.stats())[0] == 3


async def test_byte_bound_evicts_until_the_total_fits(stores, location: str) -> None:
    store = open_any(stores, location, max_bytes=3_000)
    for index in range(5):
        await store.put(stored_response(f"r{index}", "x" * 900), [], owner=ME)
    count, size = await store.stats()
    assert size <= 3_000 and count == 3
    assert await store.get("r0", owner=ME) is None and await store.get("r4", owner=ME) is not None


async def test_delete_removes_only_that_response(stores, location: str) -> None:
    store = open_any(stores, location)
    await store.put(stored_response("a"), [], owner=ME)
    await store.put(stored_response("b"), [], owner=ME)
    assert await store.delete("a", owner=ME) is True
    assert await store.delete("a", owner=ME) is False
    assert await store.get("a", owner=ME) is None and await store.get("b", owner=ME) is not None


async def test_a_file_store_survives_a_reopen_and_applies_new_bounds(stores, tmp_path: Path) -> None:
    path = str(tmp_path / "sub" / "responses.db")
    first = open_store(stores, path)
    for name in ("a", "b", "c"):
        await first.put(stored_response(name), [{"n": name}], owner=ME)
    await first.get("a", owner=ME)
    first.close()
    reopened = open_store(stores, path, max_count=2)  # smaller bounds: the LRU row goes at once
    assert (await reopened.stats())[0] == 2
    assert await reopened.get("b", owner=ME) is None
    stored = await reopened.get("a", owner=ME)
    assert stored is not None and stored.conversation == [{"n": "a"}]
    # The LRU clock continues where it stopped: c, not a (just read), is the next to go.
    await reopened.put(stored_response("d"), [], owner=ME)
    assert await reopened.get("c", owner=ME) is None and await reopened.get("a", owner=ME) is not None


async def test_the_totals_its_writes_keep_are_the_rows_it_holds(stores, tmp_path: Path) -> None:
    """A SQLite store counts its rows once per connection and keeps the totals with each write:
    after replacements, evictions by either bound, deletes, and a write of another connection to
    the same file, they are still what a count finds, and the bounds hold."""
    path = tmp_path / "responses.db"
    store = open_store(stores, str(path), max_count=5, max_bytes=10**6)
    smaller = open_store(stores, max_count=5, max_bytes=2_000)
    for n in range(60):
        for one in (store, smaller):
            # Seven ids: some writes replace a row, others add one and evict another.
            await one.put(stored_response(f"r{n % 7}", "x" * (n * 53 % 700)), [], owner=ME)
            if n % 9 == 0:
                await one.delete(f"r{(n + 3) % 7}", owner=ME)
            count, size = await one.stats()
            assert count <= 5 and size <= one.max_bytes
            assert one._totals is None or one._totals[1:] == (count, size)
        if n == 30:  # another connection deletes rows: the store counts again
            with contextlib.closing(sqlite3.connect(path)) as other:
                other.execute("DELETE FROM responses WHERE id IN ('r0', 'r1')")
                other.commit()
    for name in ("big1", "big2", "big3"):  # the byte bound, from the kept totals: two fit
        await smaller.put(stored_response(name, "x" * 900), [], owner=ME)
    assert await smaller.stats() == (2, 2 * len(json.dumps(stored_response("big1", "x" * 900)) + "[]"))


def footprint(path: Path) -> int:
    """What the store takes on disk: the database, its WAL and the WAL's index."""
    files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    return sum(file.stat().st_size for file in files if file.exists())


def varied_text(index: int) -> str:
    # 200 B to 3.2 KB: rows that share a page, rows alone on one, rows that overflow it.
    return "x" * (200 + index * 37 % 3_000)


async def test_a_file_stores_disk_footprint_stays_within_its_cap_wal_included(stores, tmp_path: Path) -> None:
    path = tmp_path / "responses.db"
    cap = 1024 * 1024
    store = open_store(stores, str(path), max_count=100_000, max_bytes=cap)
    largest = 0
    for index in range(1_000):  # ~3.4 MB of rows and conversations: the cap is overrun three times
        text = varied_text(index)
        await store.put(stored_response(f"resp_{index}", text), [{"role": "user", "content": text}], owner=ME)
        largest = max(largest, footprint(path))  # between calls, never only at the end
    assert largest <= cap + FOOTPRINT_MARGIN  # the acceptance line was cap + 1 MB
    count, _ = await store.stats()
    assert 150 < count < 1_000  # the bound evicts what it must, not everything
    assert await store.get("resp_999", owner=ME) is not None
    assert auto_vacuum(path) == "full"  # made so from the start: no rebuild on the next open


def auto_vacuum(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return ("none", "full", "incremental")[db.execute("PRAGMA auto_vacuum").fetchone()[0]]


async def test_a_large_database_from_before_the_footprint_bound_shrinks_to_it_on_open(stores, tmp_path: Path) -> None:
    path = tmp_path / "responses.db"
    with sqlite3.connect(path) as db:  # as earlier versions wrote it: no auto_vacuum, WAL
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_OLD_SCHEMA)
        for index in range(1_500):
            text = json.dumps(stored_response(f"r{index}", varied_text(index)))
            db.execute("INSERT INTO responses VALUES (?, ?, ?, ?, ?)", (f"r{index}", index, len(text), text, "[]"))
    db.close()
    assert footprint(path) > 3 * 1024 * 1024
    cap = 1024 * 1024
    store = open_store(stores, str(path), max_count=100_000, max_bytes=cap)
    assert footprint(path) <= cap + FOOTPRINT_MARGIN
    assert auto_vacuum(path) == "full"
    assert await store.get("r1499", owner=OPEN_OWNER) is not None and await store.get("r0", owner=OPEN_OWNER) is None


def test_none_is_a_disabled_store(stores) -> None:
    assert open_store(stores, DISABLED).enabled is False
    assert open_store(stores).enabled is True


async def test_another_owners_response_is_as_unknown_and_survives_their_delete(stores, location: str) -> None:
    store = open_any(stores, location)
    await store.put(stored_response("mine", "secret"), [{"role": "user", "content": "secret"}], owner=ME)
    assert await store.get("mine", owner=OTHER) is None
    assert await store.get("mine", owner=OTHER, conversation=False) is None
    assert await store.get("mine", owner=OPEN_OWNER) is None  # an open server's caller is no one's key
    assert await store.delete("mine", owner=OTHER) is False
    stored = await store.get("mine", owner=ME)
    assert stored is not None and stored.response == stored_response("mine", "secret")
    assert await store.delete("mine", owner=ME) is True


# The table as ovserve wrote it before responses had owners.
_OLD_SCHEMA = """
CREATE TABLE responses (
    id TEXT PRIMARY KEY,
    used INTEGER NOT NULL,
    size INTEGER NOT NULL,
    response TEXT NOT NULL,
    conversation TEXT NOT NULL
);
CREATE INDEX responses_used ON responses (used);
"""


async def test_a_database_from_before_owners_opens_with_old_rows_for_the_open_server_only(
    stores, tmp_path: Path
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(_OLD_SCHEMA)
        row = ("old", 7, 10, json.dumps(stored_response("old")), json.dumps([{"n": "old"}]))
        db.execute("INSERT INTO responses VALUES (?, ?, ?, ?, ?)", row)
    db.close()
    store = open_store(stores, str(path))
    # An open server reads old rows as before; no key's digest owns them, so keyed callers cannot.
    assert await store.get("old", owner=ME) is None
    assert await store.delete("old", owner=ME) is False
    stored = await store.get("old", owner=OPEN_OWNER)
    assert stored is not None and stored.conversation == [{"n": "old"}]
    await store.put(stored_response("new"), [], owner=ME)  # the migrated table takes owned rows
    assert await store.get("new", owner=ME) is not None and await store.get("new", owner=OPEN_OWNER) is None
    store.close()
    reopened = open_store(stores, str(path))  # migrating twice is a no-op
    assert await reopened.get("new", owner=ME) is not None and await reopened.get("old", owner=OPEN_OWNER) is not None
    assert (await reopened.stats())[0] == 2


# -- expiry by age (--responses_store_max_age) ---------------------------------------------------


async def test_a_response_older_than_max_age_is_as_unknown_and_the_next_write_deletes_it(stores, location: str) -> None:
    clock = ManualClock()
    store = open_any(stores, location, max_age=100, clock=clock)
    await store.put(stored_response("old"), [{"role": "user", "content": "hi"}], owner=ME)
    await clock.advance(60)
    await store.put(stored_response("young"), [], owner=ME)
    assert await store.get("old", owner=ME) is not None  # 60 s old; reading it does not make it younger
    await clock.advance(41)  # old: 101 s, young: 41 s
    assert await store.get("old", owner=ME) is None
    assert await store.get("old", owner=ME, conversation=False) is None
    assert await store.delete("old", owner=ME) is False
    assert await store.get("young", owner=ME) is not None
    assert (await store.stats())[0] == 2  # nothing runs in the background: the row is there, unread
    await store.put(stored_response("new"), [], owner=ME)
    assert (await store.stats())[0] == 2  # the write deleted it
    assert await store.get("new", owner=ME) is not None and await store.get("young", owner=ME) is not None


async def test_expired_responses_go_before_a_live_one_is_evicted_for_room(stores, location: str) -> None:
    clock = ManualClock()
    store = open_any(stores, location, max_count=2, max_age=100, clock=clock)
    await store.put(stored_response("a"), [], owner=ME)
    await clock.advance(50)
    await store.put(stored_response("b"), [], owner=ME)
    await clock.advance(49)
    assert await store.get("a", owner=ME) is not None  # a is now the more recently used
    await clock.advance(2)  # a: 101 s old, expired; b: 51 s
    await store.put(stored_response("c"), [], owner=ME)
    # Without expiry first, the count bound would have evicted b (least recently used).
    assert [await store.get(name, owner=ME) is not None for name in "abc"] == [False, True, True]


async def test_without_max_age_a_response_is_kept_whatever_its_age(stores, location: str) -> None:
    clock = ManualClock()
    store = open_any(stores, location, max_age=None, clock=clock)
    await store.put(stored_response("a"), [], owner=ME)
    await clock.advance(10 * 365 * 24 * 3600)
    await store.put(stored_response("b"), [], owner=ME)
    assert await store.get("a", owner=ME) is not None and await store.delete("a", owner=ME) is True


async def test_a_restart_with_a_max_age_deletes_what_is_older_at_once(stores, lasting_location: str) -> None:
    clock = ManualClock()
    first = open_any(stores, lasting_location, max_age=None, clock=clock)
    await first.put(stored_response("a"), [], owner=ME)
    await clock.advance(1_000)
    await first.put(stored_response("b"), [], owner=ME)
    await first.aclose()
    again = open_any(stores, lasting_location, max_age=500, clock=clock)
    await again.start()
    assert (await again.stats())[0] == 1
    assert await again.get("a", owner=ME) is None and await again.get("b", owner=ME) is not None


async def test_a_database_from_before_ages_counts_its_rows_age_from_the_upgrade(stores, tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(_OLD_SCHEMA)
        db.execute(
            "INSERT INTO responses VALUES (?, ?, ?, ?, ?)", ("old", 1, 10, json.dumps(stored_response("old")), "[]")
        )
    db.close()
    clock = ManualClock()
    store = ResponseStore(str(path), max_count=100, max_bytes=10**6, max_age=100, clock=clock)
    stores.append(store)
    assert await store.get("old", owner=OPEN_OWNER) is not None
    await clock.advance(101)
    assert await store.get("old", owner=OPEN_OWNER) is None
    await store.put(stored_response("new"), [], owner=ME)
    assert (await store.stats())[0] == 1
