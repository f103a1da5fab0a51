"""The Responses store's PostgreSQL backend, where it differs from SQLite: replicas sharing one
database, the versioned schema, the password kept out of logs and read from a file, and a database
that is down (a bounded wait, then a counted :class:`StoreFault`, never a hang). Semantics shared
with SQLite are tested on both backends in ``test_response_store.py``."""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path

import psycopg
import pytest

from ovserve.clock import ManualClock
from ovserve.dialects.openai.responses.backends import Store, check_store
from ovserve.dialects.openai.responses.store import GET, HOUSEKEEPING, PUT, StoreFault
from ovserve.dialects.openai.responses.store_common import StoreSettingError
from ovserve.dialects.openai.responses.store_postgres import (
    MIGRATIONS,
    SCHEMA_VERSION,
    PostgresResponseStore,
    redacted,
)
from tests.postgres import PostgresServer, _free_port
from tests.unit.conftest import stored_response

ME = "a" * 64


def open_store(
    stores: list[Store], url: str, *, pool_timeout: float = 5.0, password_file: Path | None = None, **bounds: int
) -> PostgresResponseStore:
    store = PostgresResponseStore(
        url,
        max_count=bounds.get("max_count", 100),
        max_bytes=bounds.get("max_bytes", 10**6),
        pool_timeout=pool_timeout,
        password_file=password_file,
    )
    stores.append(store)
    return store


async def test_two_replicas_on_one_database_continue_each_others_responses(stores, postgres: PostgresServer) -> None:
    url = postgres.new_database()
    first, second = open_store(stores, url), open_store(stores, url)
    await first.start()
    await second.start()
    await first.put(stored_response("resp_1", "hello"), [{"role": "user", "content": "hi"}], owner=ME)
    stored = await second.get("resp_1", owner=ME)
    assert stored is not None and stored.conversation == [{"role": "user", "content": "hi"}]
    assert await second.delete("resp_1", owner=ME) is True
    assert await first.get("resp_1", owner=ME) is None


async def test_the_schema_is_versioned_and_a_restart_with_smaller_bounds_applies_them(
    stores, postgres: PostgresServer
) -> None:
    url = postgres.new_database()
    store = open_store(stores, url)
    for name in ("a", "b", "c", "d"):
        await store.put(stored_response(name), [], owner=ME)
    await store.aclose()
    with psycopg.connect(url) as db:
        versions = db.execute("SELECT version FROM ovserve_schema_version ORDER BY version").fetchall()
        assert versions == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
    smaller = open_store(stores, url, max_count=2)
    await smaller.start()
    assert await smaller.stats() == (2, 2 * len('{"id": "a", "object": "response", "text": ""}') + 2 * len("[]"))
    assert [await smaller.get(name, owner=ME) is not None for name in "abcd"] == [False, False, True, True]
    assert smaller.failures[HOUSEKEEPING] == 0


async def test_a_database_of_a_newer_schema_is_a_fault_not_an_overwrite(stores, postgres: PostgresServer) -> None:
    url = postgres.new_database()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE ovserve_schema_version (version integer NOT NULL)")
        db.execute("INSERT INTO ovserve_schema_version VALUES (%s)", (SCHEMA_VERSION + 1,))
    store = open_store(stores, url)
    with pytest.raises(StoreFault):
        await store.put(stored_response("a"), [], owner=ME)
    assert store.failures[PUT] == 1


async def test_a_database_that_is_down_is_a_counted_fault_within_the_bound(
    stores, postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens on this port: every connection attempt is refused.
    url = f"postgresql://postgres:{postgres.password}@127.0.0.1:{_free_port()}/postgres"
    store = open_store(stores, url, pool_timeout=0.5)  # the default (5 s) is the same wait, longer
    with caplog.at_level(logging.INFO):
        await store.start()  # the server starts either way
        began = time.monotonic()
        with pytest.raises(StoreFault):
            await store.put(stored_response("a"), [], owner=ME)
        with pytest.raises(StoreFault):
            await store.get("a", owner=ME)
        waited = time.monotonic() - began
    assert waited < 2 * (store.pool_timeout + 1)  # each call: the pool's wait, not CALL_TIMEOUT_S
    assert (store.failures[HOUSEKEEPING], store.failures[PUT], store.failures[GET]) == (1, 1, 1)
    assert "responses store: housekeeping failed" in caplog.text  # once a minute: the first only
    assert postgres.password not in caplog.text and postgres.password not in store.location


def test_the_location_shown_has_no_password() -> None:
    assert redacted("postgresql://ovserve:s3cret@db.example:5433/chat") == "postgresql://ovserve@db.example:5433/chat"
    assert "s3cret" not in redacted("host=db password=s3cret dbname=chat")


async def test_connections_the_database_ended_are_replaced_without_a_fault(stores, postgres: PostgresServer) -> None:
    url = postgres.new_database()
    store = open_store(stores, url)
    await store.put(stored_response("a"), [], owner=ME)
    # What a restart of the database does to the pool's open connections.
    with psycopg.connect(url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert ended is not None and ended[0] >= 1
    assert await store.get("a", owner=ME) is not None
    assert await store.put(stored_response("b"), [], owner=ME) is True
    assert store.failures == {"put": 0, "get": 0, "delete": 0, "housekeeping": 0}


async def test_a_database_of_schema_1_gets_ages_and_its_rows_count_theirs_from_the_upgrade(
    stores, postgres: PostgresServer
) -> None:
    url = postgres.new_database()
    with psycopg.connect(url, autocommit=True) as db:  # as the first version of this store left it
        db.execute("CREATE TABLE ovserve_schema_version (version integer NOT NULL)")
        for statement in MIGRATIONS[1]:
            db.execute(statement)  # type: ignore[arg-type]  # our own statements
        db.execute("INSERT INTO ovserve_schema_version VALUES (1)")
        db.execute(
            "INSERT INTO ovserve_responses VALUES ('old', %s, nextval('ovserve_responses_clock'), 2, '{}', '[]')", (ME,)
        )
    clock = ManualClock()
    store = PostgresResponseStore(url, max_count=100, max_bytes=10**6, max_age=100, clock=clock)
    stores.append(store)
    assert await store.get("old", owner=ME) is not None
    await clock.advance(101)
    assert await store.get("old", owner=ME) is None
    await store.put(stored_response("new"), [], owner=ME)
    assert (await store.stats())[0] == 1 and store.failures[HOUSEKEEPING] == 0


def login_role(postgres: PostgresServer, url: str, password: str) -> str:
    """A new role that may log in with ``password`` and use the database of ``url``; its name."""
    role = f"ovserve_{secrets.token_hex(4)}"
    with psycopg.connect(postgres.url(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")  # type: ignore[arg-type]  # our own names
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"GRANT ALL ON SCHEMA public TO {role}")  # type: ignore[arg-type]
    return role


async def test_the_password_comes_from_a_file_and_a_rotated_one_serves_new_connections(
    stores, postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.new_database()
    role = login_role(postgres, url, "first-password")
    secret = tmp_path / "password"
    secret.write_text("first-password\n")  # as a Kubernetes secret often ends
    store = open_store(
        stores, f"postgresql://{role}@127.0.0.1:{postgres.port}/{url.rsplit('/', 1)[1]}", password_file=secret
    )
    await store.put(stored_response("a"), [], owner=ME)
    # The secret is rotated: the role's password and the mounted file change; the connections the
    # database ends are replaced by new ones, which read the file again.
    with psycopg.connect(postgres.url(), autocommit=True) as admin:
        admin.execute(f"ALTER ROLE {role} PASSWORD 'second-password'")  # type: ignore[arg-type]
        secret.write_text("second-password\n")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
    assert await store.get("a", owner=ME) is not None
    assert store.failures == {"put": 0, "get": 0, "delete": 0, "housekeeping": 0}


def test_a_password_file_that_cannot_be_read_or_is_empty_stops_the_start(tmp_path: Path) -> None:
    url = "postgresql://ovserve@db.example/chat"
    with pytest.raises(StoreSettingError, match=r"--responses_store_password_file: cannot read .*missing"):
        check_store(url, tmp_path / "missing")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(StoreSettingError, match=r"--responses_store_password_file: .* is empty"):
        check_store(url, tmp_path / "empty")
    (tmp_path / "password").write_text("s3cret")
    with pytest.raises(StoreSettingError, match="is not a postgresql:// URL"):
        check_store("memory", tmp_path / "password")
    check_store(url, tmp_path / "password")  # readable, for a PostgreSQL store: fine


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://ovserve:s3cret-pw@[::1/chat",
        "postgresql://ovserve:s3cret%pw@db/chat",
        "postgresql://o:s3cret-pw@d b/c",
    ],
)
def test_a_url_libpq_cannot_read_stops_the_start_without_quoting_it(url: str) -> None:
    with pytest.raises(StoreSettingError) as refused:
        check_store(url)
    assert "--responses_store" in str(refused.value) and "s3cret" not in str(refused.value)
