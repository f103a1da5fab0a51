"""Memory in /metrics: each engine process's resident memory, read from /proc at scrape time, and
the server process's own (prometheus-client's process collector): what the memory alerts watch."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ovserve.loop_lag import LoopLagMonitor
from ovserve.metrics import ServerMetrics, resident_memory_bytes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@dataclass
class _Engine:
    running_pid: int | None
    ready: bool = True
    inflight: int = 0
    restarts: int = 0
    start_failures: int = 0
    stalls: int = 0
    last_report: None = None
    last_report_at: None = None


@dataclass
class _Model:
    name: str
    engine: _Engine
    admission: SimpleNamespace = field(
        default_factory=lambda: SimpleNamespace(waiting=0, running=0, prompt_tokens=0, rejected=0, batch=0)
    )
    drafting: SimpleNamespace = field(
        default_factory=lambda: SimpleNamespace(requests=0, accepted_tokens=0, drafted_tokens=0, verify_steps=0)
    )


def _samples(*models: _Model) -> dict[tuple[str, str], float]:
    metrics = ServerMetrics()
    metrics.scrape.watch(models, LoopLagMonitor())
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, sample.labels.get("model", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A child whose memory stands still while it is read twice."""
    process = subprocess.Popen(["sleep", "60"])
    # Until it sleeps, a freshly started process is still mapping its pages in.
    while "(sleeping)" not in Path(f"/proc/{process.pid}/status").read_text():
        time.sleep(0.01)
    yield process
    process.kill()
    process.wait()


def test_engine_memory_is_its_process_resident_set(sleeper: subprocess.Popen[bytes]) -> None:
    expected = resident_memory_bytes(sleeper.pid)
    assert expected is not None and expected > 0
    samples = _samples(_Model("qwen", _Engine(running_pid=sleeper.pid)))
    assert samples[("ovserve_engine_resident_memory_bytes", "qwen")] == expected


def test_engine_memory_is_absent_while_no_engine_process_runs(sleeper: subprocess.Popen[bytes]) -> None:
    # Between a death and the next Ready the client has no pid; a reaped pid has nothing to read.
    sleeper.kill()
    sleeper.wait()
    assert resident_memory_bytes(sleeper.pid) is None
    samples = _samples(_Model("loading", _Engine(running_pid=None)), _Model("dead", _Engine(running_pid=sleeper.pid)))
    assert not any(name == "ovserve_engine_resident_memory_bytes" for name, _ in samples)
    assert samples[("ovserve_engine_ready", "dead")] == 1.0  # the other families are unaffected


def test_server_exports_its_own_resident_memory() -> None:
    samples = _samples()
    assert samples[("process_resident_memory_bytes", "")] > 0
