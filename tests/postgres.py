"""A real PostgreSQL server for the tests, started in a temporary directory and stopped after.

:func:`postgres_server` runs Debian's binaries (``/usr/lib/postgresql/<version>/bin``, or ``initdb``
on the PATH) as an unprivileged user when the tests run as root (PostgreSQL refuses root): the
``postgres`` account the Debian package makes. The server listens on 127.0.0.1 on a free port, with
password authentication (so a URL's password is exercised), and without fsync (a test server).
:meth:`PostgresServer.new_database` gives each test an empty database of its own.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from scripts.local_postgres import free_port as _free_port
from scripts.local_postgres import postgres_bin_dir


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
    bin_dir = postgres_bin_dir()
    base = Path(tempfile.mkdtemp(prefix="ovserve-postgres-"))
    data = base / "data"
    password = secrets.token_hex(12)
    password_file = base / "password"
    password_file.write_text(password)
    as_user: list[str] = []
    account: pwd.struct_passwd | None = None
    if os.geteuid() == 0:  # initdb and postgres refuse root: run them as the package's account
        as_user = ["runuser", "-u", "postgres", "--"]
        account = pwd.getpwnam("postgres")
        shutil.chown(base, "postgres")
        shutil.chown(password_file, "postgres")
    port = _free_port()
    # --no-sync: the cluster lives as long as the run (the server runs with fsync=off too).
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=scram-sha-256", "--no-sync"]
    subprocess.run([*as_user, *initdb, f"--pwfile={password_file}"], check=True, capture_output=True, timeout=60)

    def become_postgres() -> None:
        """In the server's child, before exec: the postgres account, then SIGKILL when the test
        process dies however it dies, so no server outlives the run (pg_ctl's would: it daemonises;
        the signal is set after the change of user, which clears it)."""
        if account is not None:
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")

    options = ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off"]
    with (base / "log").open("wb") as log:
        server = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(base), *options],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=become_postgres,
        )
    try:
        running = PostgresServer(port, password)
        _wait_ready(running, server)
        yield running
    finally:
        # An immediate shutdown: open sessions are ended and no checkpoint is written, the data
        # directory being removed next.
        server.send_signal(signal.SIGQUIT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(base, ignore_errors=True)


_PR_SET_PDEATHSIG = 1


def _wait_ready(server: PostgresServer, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(server.url(), connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise
        time.sleep(0.05)  # polling for the server to accept connections; not a fix for a race
