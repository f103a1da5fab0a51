#!/usr/bin/env python3
"""N ovserve replicas on one machine behind HAProxy, sharing one Responses store in PostgreSQL:
the local rehearsal of scale-out (docs/scale-out.md). ``scripts/cluster.sh`` runs :func:`main`;
the rehearsal (scripts/rehearse_cluster.py) and the e2e test (tests/e2e/test_scale_out.py) drive
:class:`Replicas` and :class:`Router` themselves, to kill, drain and restart parts.

Contract: every process started here (replicas and their engines, HAProxy, PostgreSQL) ends when
:meth:`Cluster.close` runs or when this process dies however it dies (``PR_SET_PDEATHSIG``: a
replica gets SIGTERM and drains, HAProxy and PostgreSQL SIGKILL), and the temporary directories
go with them. Children are started from the calling thread only: the kernel sends the death
signal when the *thread* that forked the child ends, so a helper thread must not start them.

The router's configuration is the template ``deploy/haproxy/ovserve.cfg`` (leastconn, readiness
checks every second, retries on another replica where a retry is safe, a response header naming
the replica that answered); :class:`Router` reads HAProxy's CSV statistics.

    bash scripts/cluster.sh                       # 3 replicas of models/tiny-llm, router on :8000
    bash scripts/cluster.sh --replicas 2 --port 9000 -- --max_num_seqs 64
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import io
import os
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.local_postgres import LocalPostgres, free_port  # noqa: E402

HAPROXY_TEMPLATE = ROOT / "deploy" / "haproxy" / "ovserve.cfg"
REPLICA_HEADER = "X-Ovserve-Replica"
_PR_SET_PDEATHSIG = 1
# A busy 2-core machine can take a minute or more to start several replicas at once.
START_TIMEOUT_S = 300.0


def _dies_with_parent(sig: signal.Signals) -> Callable[[], None]:
    def preexec() -> None:  # in the child, before exec
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")

    return preexec


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, ... (a snapshot; empty once it has exited)."""
    found: list[int] = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in map(int, children):
        found += [child, *descendants(child)]
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, waiting for its parent to reap it, has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# -- replicas -------------------------------------------------------------------------------------


@dataclass
class Replica:
    name: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False


@dataclass
class Replicas:
    """``count`` ``ovserve serve`` processes on consecutive ports (or free ones), each with the
    same arguments; ``PGPASSWORD`` and the like come through ``env``."""

    workdir: Path
    serve_args: list[str]
    count: int
    first_port: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    members: list[Replica] = field(default_factory=list)

    def __post_init__(self) -> None:
        for index in range(self.count):
            port = self.first_port + index if self.first_port else free_port()
            name = f"replica{index + 1}"
            self.members.append(Replica(name, port, self.workdir / f"{name}.log"))

    def spawn(self, replica: Replica) -> None:
        """Start ``replica`` (again); from the thread that owns the cluster (see the module doc)."""
        command = [sys.executable, "-m", "ovserve", "serve", *self.serve_args]
        command += ["--host", "127.0.0.1", "--port", str(replica.port)]
        with replica.log_path.open("ab") as log:
            replica.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, **self.env},
                preexec_fn=_dies_with_parent(signal.SIGTERM),  # a replica drains, its engines follow
                start_new_session=True,  # Ctrl-C reaches the cluster, which stops the parts in order
            )

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        for replica in self.members:
            self.spawn(replica)
        for replica in self.members:
            self.wait_ready(replica, timeout)

    def wait_ready(self, replica: Replica, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not replica.ready():
            if not replica.running():
                raise RuntimeError(f"{replica.name} exited during startup:\n{replica.log_path.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{replica.name} not ready after {timeout} s")
            time.sleep(0.2)  # polling readiness

    def pids(self) -> list[int]:
        return [
            pid for r in self.members if r.process is not None for pid in (r.process.pid, *descendants(r.process.pid))
        ]

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a drain) to every replica at once, SIGKILL to those still running after ``timeout``."""
        running = [r.process for r in self.members if r.process is not None and r.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# -- the router -----------------------------------------------------------------------------------


def haproxy_config(servers: list[tuple[str, int]], port: int, stats_port: int, host: str = "127.0.0.1") -> str:
    """The template with this cluster's addresses and one ``server`` line per replica."""
    lines = "\n".join(f"    server {name} 127.0.0.1:{server_port}" for name, server_port in servers)
    template = string.Template(HAPROXY_TEMPLATE.read_text())
    return template.substitute(router_bind=f"{host}:{port}", stats_bind=f"127.0.0.1:{stats_port}", servers=lines)


@dataclass
class Router:
    """HAProxy (Debian's ``haproxy``) in the foreground, its log in ``workdir``."""

    workdir: Path
    servers: list[tuple[str, int]]
    port: int = 0
    host: str = "127.0.0.1"
    stats_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self.stats_port = self.stats_port or free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "haproxy.log"

    def start(self, timeout: float = 30.0) -> None:
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not Path(haproxy).exists():
            raise RuntimeError("HAProxy is not installed: scripts/setup.sh installs it (apt-get install haproxy)")
        config = self.workdir / "haproxy.cfg"
        config.write_text(haproxy_config(self.servers, self.port, self.stats_port, self.host))
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [haproxy, "-db", "-f", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_dies_with_parent(signal.SIGKILL),
                start_new_session=True,
            )
        # Up once every replica has passed its checks (HAProxy starts them as up, before checking).
        if not wait_until(lambda: self._all_checked_up(), timeout, interval=0.1):
            raise TimeoutError(f"HAProxy: not every replica up after {timeout} s: {self.status()}\n{self.log()}")

    def _all_checked_up(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"HAProxy exited:\n{self.log()}")
        try:
            rows = self.stats()
        except httpx.TransportError:  # not listening yet
            return False
        return all(rows[name]["status"] == "UP" and rows[name]["check_status"] == "L7OK" for name, _ in self.servers)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stats(self) -> dict[str, dict[str, str]]:
        """HAProxy's statistics of the backend's servers (and ``BACKEND``), by server name."""
        text = httpx.get(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5).text
        rows = csv.DictReader(io.StringIO(text.removeprefix("# ")))
        return {row["svname"]: row for row in rows if row["pxname"] == "replicas"}

    def status(self) -> dict[str, str]:
        """Each server's state as the router sees it (``UP``, ``DOWN``, ``UP 1/2``, ...)."""
        return {name: row["status"] for name, row in self.stats().items() if name != "BACKEND"}

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- all of it ------------------------------------------------------------------------------------


@dataclass
class Cluster:
    postgres: LocalPostgres
    replicas: Replicas
    router: Router
    workdir: Path

    def pids(self) -> list[int]:
        pids = self.replicas.pids()
        for process in (self.router.process, self.postgres._process):
            if process is not None:
                pids += [process.pid, *descendants(process.pid)]
        return pids

    def close(self, keep_logs: Path | None = None) -> list[int]:
        """Stops everything, removes the directories (the logs copied to ``keep_logs`` first);
        returns the pids still running after (none)."""
        pids = self.pids()
        self.router.stop()
        self.replicas.stop()
        self.postgres.close(keep_log=keep_logs / "postgres.log" if keep_logs else None)
        if keep_logs is not None:
            shutil.copytree(self.workdir, keep_logs, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.cfg"))
        shutil.rmtree(self.workdir, ignore_errors=True)
        wait_until(lambda: not any(alive(pid) for pid in pids), 30.0, interval=0.1)
        return [pid for pid in pids if alive(pid)]


@contextlib.contextmanager
def cluster(
    model_path: Path,
    replicas: int = 3,
    *,
    model_name: str = "tiny-llm",
    port: int = 0,
    host: str = "127.0.0.1",
    first_replica_port: int | None = None,
    stats_port: int = 0,
    serve_args: list[str] | None = None,
    keep_logs: Path | None = None,
) -> Iterator[Cluster]:
    """PostgreSQL, ``replicas`` replicas on it and HAProxy in front, all ready; closed on exit."""
    workdir = Path(tempfile.mkdtemp(prefix="ovserve-cluster-"))
    postgres = LocalPostgres()
    args = ["--model_path", str(model_path), "--model_name", model_name, "--responses_store", postgres.url()]
    members = Replicas(
        workdir, [*args, *(serve_args or [])], replicas, first_replica_port, env={"PGPASSWORD": postgres.password}
    )
    router = Router(workdir, [(r.name, r.port) for r in members.members], port, host, stats_port)
    running = Cluster(postgres, members, router, workdir)
    try:
        postgres.start()
        members.start()
        router.start()
        yield running
    finally:
        running.close(keep_logs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--port", type=int, default=8000, help="the router's port")
    parser.add_argument("--host", default="127.0.0.1", help="the router's address (0.0.0.0: every interface)")
    parser.add_argument("--first_replica_port", type=int, default=8001, help="replicas on this port and the next")
    parser.add_argument("--stats_port", type=int, default=8404, help="HAProxy's statistics page")
    parser.add_argument("--model_path", type=Path, default=ROOT / "models" / "tiny-llm")
    parser.add_argument("--model_name", default="tiny-llm")
    parser.add_argument("serve_args", nargs="*", help="after --: more `ovserve serve` flags for every replica")
    options = parser.parse_args()

    def stop(signum: int, frame: object) -> None:
        # Once: a second Ctrl-C must not cut the shutdown short (and leave processes behind).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    with (
        contextlib.suppress(KeyboardInterrupt),
        cluster(
            options.model_path,
            options.replicas,
            model_name=options.model_name,
            port=options.port,
            host=options.host,
            first_replica_port=options.first_replica_port,
            stats_port=options.stats_port,
            serve_args=options.serve_args,
        ) as running,
    ):
        _announce(running, options.model_name)
        _watch(running)
    print("cluster: stopped", flush=True)


def _announce(running: Cluster, model_name: str) -> None:
    replicas = ", ".join(
        f"{r.name} {r.url} (pid {r.process.pid if r.process else '-'})" for r in running.replicas.members
    )
    print(
        f"""
router      {running.router.url}/v3   (HAProxy, leastconn; header {REPLICA_HEADER} names the replica)
stats       http://127.0.0.1:{running.router.stats_port}/stats
replicas    {replicas}
store       {running.postgres.url()}   (PGPASSWORD={running.postgres.password})
logs        {running.workdir}

  curl {running.router.url}/v3/responses -H 'Content-Type: application/json' -i \\
    -d '{{"model": "{model_name}", "input": "hello", "max_output_tokens": 16}}'

Kill a replica (kill -9 <pid>) and watch the stats page; Ctrl-C stops everything.""",
        flush=True,
    )


def _watch(running: Cluster) -> None:
    """Report replicas that exit (a rehearsal's kill, a crash) until HAProxy itself ends."""
    reported: set[str] = set()
    router = running.router.process
    while router is not None and router.poll() is None:
        for replica in running.replicas.members:
            if replica.name not in reported and replica.process is not None and replica.process.poll() is not None:
                print(f"cluster: {replica.name} exited with {replica.process.returncode}", flush=True)
                reported.add(replica.name)
        time.sleep(1)  # a status poll for the operator, not a synchronisation
    print(f"cluster: HAProxy exited:\n{running.router.log()}", file=sys.stderr)


if __name__ == "__main__":
    main()
