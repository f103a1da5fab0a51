"""A throwaway PostgreSQL for the local scale-out rehearsal (scripts/cluster.py): Debian's binaries,
a cluster in a new temporary directory, stopped and started again at will (the rehearsal's fault),
removed with its directory at the end.

The same approach as the tests' server (tests/postgres.py), plus :meth:`LocalPostgres.stop` and
:meth:`LocalPostgres.start` on the same data directory and port: initdb as the ``postgres``
account when run as root (PostgreSQL refuses root), scram password authentication on 127.0.0.1, no
fsync (the data is thrown away), and SIGKILL for the server if this process dies however it dies
(``PR_SET_PDEATHSIG``), so no database outlives a rehearsal. The password is for the replicas'
environment (``PGPASSWORD``): :meth:`LocalPostgres.url` leaves it out, as ovserve's docs advise.
"""

from __future__ import annotations

import ctypes
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

DATABASE = "ovserve"
_PR_SET_PDEATHSIG = 1


def postgres_bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL is not installed: scripts/setup.sh installs it (apt-get install postgresql)")
    return Path(initdb).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalPostgres:
    """``start()`` once to create the cluster and the ``ovserve`` database; ``stop()``/``start()``
    to take it away and bring it back; ``close()`` to end it and remove its directory."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.password = secrets.token_hex(12)
        self.base = Path(tempfile.mkdtemp(prefix="ovserve-cluster-pg-"))
        self._bin = postgres_bin_dir()
        self._account = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self._process: subprocess.Popen[bytes] | None = None
        self._created = False

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log_path(self) -> Path:
        return self.base / "log"

    def url(self, database: str = DATABASE) -> str:
        """The replicas' URL, without the password (that travels in ``PGPASSWORD``)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def _initdb(self) -> None:
        password_file = self.base / "password"
        password_file.write_text(self.password)
        as_user: list[str] = []
        if self._account is not None:
            as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.base, "postgres")
            shutil.chown(password_file, "postgres")
        initdb = [str(self._bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=scram-sha-256"]
        subprocess.run(
            [*as_user, *initdb, "--no-sync", f"--pwfile={password_file}"], check=True, capture_output=True, timeout=120
        )
        password_file.unlink()

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> None:
        """Starts the server (created on the first call); with ``wait=False`` (only after that
        first call) it returns at once and :meth:`wait_ready` waits. From the thread that owns the
        cluster: the server's death signal follows the thread that started it."""
        if not self._created:
            self._initdb()
        account = self._account

        def become_postgres() -> None:  # in the child, before exec
            if account is not None:
                os.setgid(account.pw_gid)
                os.setuid(account.pw_uid)
            # After the change of user, which clears it: the server dies with this process.
            if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")

        options = ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off"]
        command = [str(self._bin / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.base)]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [*command, *options],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=become_postgres,
                start_new_session=True,  # Ctrl-C in a terminal reaches the cluster, which stops it in turn
            )
        if not wait and self._created:
            return
        self.wait_ready(timeout)
        if not self._created:
            with psycopg.connect(self.url("postgres"), password=self.password, autocommit=True) as admin:
                admin.execute(f"CREATE DATABASE {DATABASE}")
            self._created = True

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.url("postgres"), password=self.password, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self._process is None or self._process.poll() is not None or time.monotonic() > deadline:
                    raise
            time.sleep(0.05)  # polling for the server to accept connections

    def stop(self, timeout: float = 60.0) -> None:
        """A fast shutdown (``pg_ctl stop``'s default): sessions are ended, the data kept."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.url(), password=self.password, autocommit=True)

    def close(self, keep_log: Path | None = None) -> None:
        """Ends the server at once (its data is thrown away) and removes its directory (its log
        copied to ``keep_log`` first)."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGQUIT)  # immediate shutdown: no checkpoint for a directory we delete
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if keep_log is not None and self.log_path.exists():
            keep_log.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.log_path, keep_log)
        shutil.rmtree(self.base, ignore_errors=True)
