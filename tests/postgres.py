"""A real PostgreSQL server for the tests, started in a temporary directory and stopped after.

:func:`postgres_server` runs Debian's binaries (``/usr/lib/postgresql/<version>/bin``, or ``initdb``
on the PATH) as an unprivileged user when the tests run as root (PostgreSQL refuses root): the
``postgres`` account the Debian package makes. The server listens on 127.0.0.1 on a free port, with
password authentication (so a URL's password is exercised), and without fsync (a test server).
:meth:`PostgresServer.new_database` gives each test an empty database of its own.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL is not installed: scripts/setup.sh installs it (apt-get install postgresql)")
    return Path(initdb).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    port: int
    password: str
    user: str = "postgres"
    _databases: int = field(default=0)

    def url(self, database: str = "postgres", *, with_password: bool = True) -> str:
        secret = f":{self.password}" if with_password else ""
        return f"postgresql://{self.user}{secret}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database (password included)."""
        self._databases += 1
        name = f"test_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]  # our own name
        return self.url(name)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server with its data in a new temporary directory, stopped and removed on exit.
    (Not pytest's tmp_path: its parents are private to root, and the server runs as postgres.)"""
    bin_dir = _bin_dir()
    base = Path(tempfile.mkdtemp(prefix="ovserve-postgres-"))
    data = base / "data"
    password = secrets.token_hex(12)
    password_file = base / "password"
    password_file.write_text(password)
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb and postgres refuse root: run them as the package's account
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        shutil.chown(password_file, "postgres")
    port = _free_port()

    def run(*command: str) -> None:
        subprocess.run([*as_user, *command], check=True, capture_output=True, timeout=60)

    run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=scram-sha-256", f"--pwfile={password_file}")
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(base / "log"), "-w", "start")
    try:
        yield PostgresServer(port, password)
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)
