"""Shared fixtures: the offline demo models (built once per session) and real ovserve servers.

Servers run as real subprocesses (``python -m ovserve serve``) on loopback, so every test goes
through real HTTP, the real engine process and the real pipeline.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import file_order
from tests.postgres import PostgresServer, postgres_server

if TYPE_CHECKING:
    import openai

# A test run writes its bytecode caches, whatever PYTHONDONTWRITEBYTECODE says (the Docker image
# sets it, and so may the shell): without them each process of a run compiles ovserve from source
# and pytest rewrites the asserts of every test module again, ~200 modules and ~4 s of CPU per
# xdist worker before its first test. The caches are read even where they are not written (the
# servers the e2e tests start, the CLI's subprocesses), and git ignores them.
sys.dont_write_bytecode = False


ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = Path(os.environ.get("OVSERVE_TEST_MODELS", str(ROOT / "models")))
# A busy machine (a CI neighbour, two CPU-bound processes) can take minutes to load a model.
STARTUP_TIMEOUT_S = 300.0


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(file_order, "ovserve-file-order")  # the slowest test files first


def pytest_collection_finish(session: pytest.Session) -> None:
    # What the collection imported and built (~400k objects in an xdist worker) lives as long as
    # the run: out of the cyclic collector's sight, each of its full collections walks only what
    # the tests made since (8 of them per worker took ~2 s of a run; now a fraction of it).
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # The interpreter's last collection, on its way out, would walk the whole heap of the run
    # again: seconds per worker, and xdist's controller waits for every worker to exit.
    gc.freeze()


def contention_factor(sample_s: float = 0.2) -> float:
    """How many times slower than its CPU time work runs on this machine right now: 1.0 when a
    core is free, about 2-3 beside two CPU-bound neighbours. Tests that bound a duration (a
    refusal that must not wait for a decode, a timeout that must fire) scale the bound by it, so
    they assert "fast for this machine now", not a figure tuned to an idle box."""
    wall_start, cpu_start = time.perf_counter(), time.thread_time()
    while time.thread_time() - cpu_start < sample_s:
        pass
    return max(1.0, (time.perf_counter() - wall_start) / (time.thread_time() - cpu_start))


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A running ``ovserve serve`` subprocess."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    model_name: str = "tiny-llm"
    args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kwargs: object) -> openai.OpenAI:
        # Imported here: the SDK takes about a second to import, and every process of a run loads
        # this file, the fast and unit layers' too, which never talk to a server.
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v3", api_key="unused", max_retries=0, **kwargs)  # type: ignore[arg-type]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ovserve exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"ovserve not ready after {timeout} s:\n{self.log()}")

    def engine_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        pids = []
        for pid in children:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"multiprocessing" in cmdline and b"resource_tracker" not in cmdline:
                pids.append(int(pid))
        return pids

    def metric(self, name: str, model: str | None = None) -> float | None:
        """A sample of ``name`` for ``model`` (default: the server's model) from /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith(f'{name}{{model="{model or self.model_name}"}}'):
                return float(line.rsplit(" ", 1)[1])
        return None

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics, by (name, sorted labels)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _die_with_the_test_process() -> None:
    """In the server's child, before exec: SIGTERM when the test process dies, however it dies (a
    test timing out, a killed run), so no server outlives the suite. Its engines follow it: their
    pipe to the server closes."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


_PR_SET_PDEATHSIG = 1


def launch_server(
    tmp_path: Path,
    serve_args: list[str],
    *,
    model_name: str = "tiny-llm",
    env: dict[str, str] | None = None,
    wait: bool = True,
) -> Server:
    """``python -m ovserve serve <serve_args>`` on a free loopback port, logging to tmp_path."""
    port = free_port()
    log_path = tmp_path / f"ovserve-{port}.log"
    args = [sys.executable, "-m", "ovserve", "serve", *serve_args, "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            args,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=ROOT,
            preexec_fn=_die_with_the_test_process,
        )
    server = Server(process=process, port=port, log_path=log_path, model_name=model_name, args=args)
    if wait:
        try:
            server.wait_ready()
        except Exception:
            server.stop()
            raise
    return server


def start_server(
    tmp_path: Path,
    model_path: Path,
    *extra_args: str,
    model_name: str = "tiny-llm",
    env: dict[str, str] | None = None,
    wait: bool = True,
) -> Server:
    """One model from --model_path / --model_name."""
    serve_args = ["--model_path", str(model_path), "--model_name", model_name, *extra_args]
    return launch_server(tmp_path, serve_args, model_name=model_name, env=env, wait=wait)


def graph_config(tmp_path: Path, models: dict[str, Path]) -> Path:
    """An OVMS config.json serving each ``name: model directory`` through a minimal graph.pbtxt."""
    for name, model_path in models.items():
        graph_dir = tmp_path / name
        graph_dir.mkdir()
        options = f'[type.googleapis.com / mediapipe.LLMCalculatorOptions]: {{ models_path: "{model_path}" }}'
        graph_dir.joinpath("graph.pbtxt").write_text(
            f'node: {{ calculator: "HttpLLMCalculator"\nnode_options: {{ {options} }} }}\n'
        )
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"mediapipe_config_list": [{"name": name, "base_path": name} for name in models]}))
    return config


def start_config_server(tmp_path: Path, config: Path, *extra_args: str, model_name: str = "tiny-llm") -> Server:
    """The models of an OVMS config.json (--config_path)."""
    return launch_server(tmp_path, ["--config_path", str(config), *extra_args], model_name=model_name)


@contextlib.contextmanager
def _building_models() -> Iterator[None]:
    """One builder of MODELS_DIR at a time: with the suite on several workers (scripts/test.sh,
    pytest-xdist), the first to ask builds each model and the others wait, then find it complete
    (its marker, scripts/make_demo_models.py) instead of building it again."""
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    with (MODELS_DIR / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def demo_models() -> dict[str, Path]:
    from scripts.make_demo_models import build_demo_models

    with _building_models():
        return build_demo_models(MODELS_DIR)


@pytest.fixture(scope="session")
def retrieval_models() -> dict[str, Path]:
    """tiny-embed and tiny-rerank (built on first use, as the demo models are)."""
    from scripts.make_demo_models import build_retrieval_models

    with _building_models():
        return build_retrieval_models(MODELS_DIR)


@pytest.fixture(scope="session")
def tiny_llm(demo_models: dict[str, Path]) -> Path:
    return demo_models["tiny-llm"]


@pytest.fixture(scope="session")
def server(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The shared server on tiny-llm; tests must leave it healthy."""
    running = start_server(tmp_path_factory.mktemp("server"), tiny_llm)
    yield running
    running.stop()


@pytest.fixture()
def client(server: Server) -> openai.OpenAI:
    return server.client()


@pytest.fixture(scope="session")
def tiny_llm_without_defaults(tiny_llm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-llm minus generation_config.json: only ovserve's built-in defaults apply."""
    copy = tmp_path_factory.mktemp("no-defaults") / "tiny-llm"
    shutil.copytree(tiny_llm, copy)
    (copy / "generation_config.json").unlink()
    return copy


@pytest.fixture(scope="session")
def speech_models() -> dict[str, Path]:
    """tiny-whisper (built on first use, as the demo models are)."""
    from scripts.make_demo_models import build_speech_models

    with _building_models():
        return build_speech_models(MODELS_DIR)


@pytest.fixture(scope="module")
def tts_server(speech_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """tiny-speecht5 served for text to speech, one server per test module."""
    running = start_server(
        tmp_path_factory.mktemp("tts-server"), speech_models["tiny-speecht5"], "--task", "text_to_speech",
        model_name="tiny-speecht5",
    )  # fmt: skip
    yield running
    running.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session, started on first use (about 4 s) in a temporary
    directory (``tests/postgres.py``); each test takes a database of its own (``new_database``)."""
    with postgres_server() as server:
        yield server
