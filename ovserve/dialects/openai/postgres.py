"""PostgreSQL for the stores replicas share: the Responses store
(:mod:`~ovserve.dialects.openai.responses.store_postgres`) and the files' and batches' metadata
(:mod:`~ovserve.dialects.openai.files.records_postgres`), both on ``--responses_store
postgresql://...``. What they have in common lives here, once: reading the URL, the password kept
out of logs (``--responses_store_password_file``), the bounded waits, what counts as a fault, the
connection pool, and versioned schema migrations under an advisory lock.

Driver: psycopg 3 and its async pool (psycopg-pool). Chosen over asyncpg because it is the
reference driver (libpq): the URL, ``PGPASSWORD``, ``PGPASSFILE`` (a password file), ``PGSSLMODE``
and the service file all work as in ``psql``, and the pool has the bounded waits below built in.
Imported only for a PostgreSQL URL (the ``ovserve[postgres]`` extra).

Secrets: a password may be in the URL, but the password file (a file holding just the password, as
a Kubernetes secret is mounted; read for each new connection, so a rotated secret needs no
restart), ``PGPASSWORD`` or a ``PGPASSFILE`` keep it out of the command line; the file wins over the
URL, the URL over libpq's environment. :func:`redacted` is what logs and errors show; a URL libpq
cannot parse is refused with a message that quotes none of it (libpq's own may quote the password).

Timeouts: a database that is down or unreachable must not hang a request. A call waits at most
:data:`POOL_TIMEOUT_S` for a connection (libpq's ``connect_timeout`` bounds each attempt), each
statement at most ``statement_timeout`` (both defaults unless the URL sets them), and the whole
call :data:`CALL_TIMEOUT_S` (each store applies it); past any of them the call is a fault
(:func:`is_fault`). The pool checks a connection before lending it and replaces broken ones, so a
store heals when the database is back, with no fault for a restart it missed.

Schema: :func:`migrate` brings one store's tables to its newest version, recorded in that store's
own version table, under an advisory lock (replicas starting together migrate once); a database of
a newer version than this server knows is :class:`SchemaTooNew`, a fault: an older replica must not
write rows it does not understand.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from ovserve.dialects.openai.responses.store_common import StoreSettingError

log = logging.getLogger(__name__)

POOL_TIMEOUT_S = 5.0  # longest wait for a pooled connection
CONNECT_TIMEOUT_S = 3  # libpq's connect_timeout, per attempt (whole seconds)
STATEMENT_TIMEOUT_MS = 5_000
CALL_TIMEOUT_S = 15.0  # the whole call, whatever hangs (a network that drops packets)
POOL_MAX = 8

Connection = psycopg.AsyncConnection[tuple[object, ...]]
Pool = AsyncConnectionPool[Connection]
# A store's schema: for each version, the statements that take a database from the one before to it.
Migrations = Mapping[int, tuple[str, ...]]


class SchemaTooNew(Exception):
    """The database was migrated by a newer ovserve than this one."""


def is_fault(exc: BaseException) -> bool:
    """The database or the way to it failed, as opposed to a mistake in a statement."""
    faults = (psycopg.OperationalError, psycopg.InterfaceError, psycopg.errors.ReadOnlySqlTransaction)
    return isinstance(exc, (*faults, OSError, TimeoutError, SchemaTooNew))


def redacted(url: str) -> str:
    """``url`` without its password, for logs and a store's ``location``."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(an invalid URL)"
    params.pop("password", None)
    host, port, dbname = params.get("host", ""), params.get("port", ""), params.get("dbname", "")
    user = f"{params['user']}@" if params.get("user") else ""
    return f"postgresql://{user}{host}{':' + str(port) if port else ''}/{dbname}"


def conninfo(url: str) -> str:
    """``url`` with the timeouts a store needs, unless the URL sets its own; StoreSettingError if
    libpq cannot parse it (its message is not repeated: it may quote the password)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise StoreSettingError(
            "--responses_store: not a PostgreSQL URL libpq can read (postgresql://user@host:port/dbname?option=value; "
            "percent-encode ':', '@', '/', '%' and spaces in the user name and password)"
        ) from None
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    options = str(params.get("options", ""))
    if "statement_timeout" not in options:
        params["options"] = f"{options} -c statement_timeout={STATEMENT_TIMEOUT_MS}".strip()
    params.setdefault("application_name", "ovserve")
    return make_conninfo("", **params)


def check_url(url: str) -> None:
    """StoreSettingError if libpq cannot read ``url``."""
    conninfo(url)


class PasswordFile:
    """``--responses_store_password_file``: the password is the file's content, less its line end.

    Read once when the store is made (a file that cannot be read, or is empty, is a
    :class:`StoreSettingError`: the server does not start), then for each new connection, so a
    rotated Kubernetes secret is used without a restart; a read that fails then is logged (never
    the content) and the last password read is used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._password = self._read()
        except (OSError, UnicodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise StoreSettingError(f"--responses_store_password_file: cannot read {path}: {reason}") from None
        if not self._password:
            raise StoreSettingError(f"--responses_store_password_file: {path} is empty")

    def _read(self) -> str:
        return self.path.read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")

    def password(self) -> str:
        try:
            password = self._read()
        except (OSError, UnicodeError) as exc:
            log.warning("PostgreSQL store: cannot read %s (%s); using the password read before", self.path, exc)
            return self._password
        self._password = password or self._password
        return self._password


async def open_pool(url: str, *, name: str, timeout: float, password_file: PasswordFile | None) -> Pool:
    """A pool of autocommit connections to ``url`` (see the module doc), opened without waiting.

    min_size 0: connections are made on demand (each wait bounded), so a database that is down at
    start costs nothing until a call needs it, and nothing retries in a loop."""

    def connect_kwargs() -> dict[str, Any]:
        """A new connection's parameters beyond the URL (the pool asks for each one)."""
        kwargs: dict[str, Any] = {"autocommit": True}
        if password_file is not None:
            kwargs["password"] = password_file.password()
        return kwargs

    pool: Pool = AsyncConnectionPool(
        conninfo(url),
        min_size=0,
        max_size=POOL_MAX,
        timeout=timeout,
        kwargs=connect_kwargs,
        # A pooled connection is checked (one round trip) before each call: after the database
        # restarts, the first call gets a new connection instead of a fault.
        check=AsyncConnectionPool.check_connection,
        name=name,
        open=False,
    )
    await pool.open(wait=False)
    return pool


async def migrate(
    db: Connection, *, version_table: str, migrations: Migrations, lock: int, params: dict[str, Any] | None = None
) -> list[int]:
    """Bring one store's schema to ``max(migrations)`` in the caller's transaction, under the
    advisory lock ``lock``; the versions reached (``version_table`` records each). ``params`` fill
    the statements' named placeholders. SchemaTooNew for a database newer than ``migrations``."""
    newest = max(migrations)
    await db.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
    await db.execute(f"CREATE TABLE IF NOT EXISTS {version_table} (version integer NOT NULL)")  # our own name
    row = await (await db.execute(f"SELECT max(version) FROM {version_table}")).fetchone()
    version = int(str(row[0])) if row is not None and row[0] is not None else 0
    if version > newest:
        raise SchemaTooNew(f"the database is at schema {version} ({version_table}); this server knows {newest}")
    reached = []
    for step in range(version + 1, newest + 1):
        for statement in migrations[step]:
            await db.execute(statement, params if params and "%(" in statement else None)
        await db.execute(f"INSERT INTO {version_table} (version) VALUES (%s)", (step,))
        reached.append(step)
    return reached
