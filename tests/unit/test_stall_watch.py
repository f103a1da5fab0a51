"""The watchdog's judgement (``ovserve.engine.watchdog``): what it reads of a process in ``/proc``,
and when silence with and without CPU use makes an engine stalled."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ovserve.engine.launcher import SpawnedEngine
from ovserve.engine.watchdog import BUSY_CPU_FRACTION, ProcessSample, StallWatch, read_process_sample

STALL_S = 10.0
STEP_S = 60.0


def running(cpu_seconds: float) -> ProcessSample:
    return ProcessSample(state="R", cpu_seconds=cpu_seconds)


def sleeping(cpu_seconds: float) -> ProcessSample:
    return ProcessSample(state="S", cpu_seconds=cpu_seconds)


def test_an_engine_that_reports_is_never_stalled_whatever_its_cpu() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    for second in range(1, 1000):
        watch.heard(second - 0.5)
        assert watch.check(float(second), sleeping(0.0)) is None


def test_silence_without_cpu_use_is_a_stall_after_the_stall_timeout() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    findings = [watch.check(float(second), sleeping(1.0)) for second in range(1, 12)]
    assert findings[:10] == [None] * 10  # up to and including 10 s of silence
    stall = findings[10]
    assert stall is not None and stall.stalled and stall.silent_for == 11.0
    assert "no CPU used" in stall.why and "S (sleeping)" in stall.why


def test_silence_while_using_cpu_is_a_long_step_until_the_step_timeout() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    # A quarter of a core: a step's share of a crowded machine.
    findings = [(second, watch.check(float(second), running(0.25 * second))) for second in range(1, 62)]
    found = [(second, finding) for second, finding in findings if finding is not None]
    (second, noted), (stalled_at, stall) = found
    assert second == 11 and not noted.stalled and "a long step, not a stall" in noted.why  # said once
    assert stalled_at == 61 and stall.stalled and "busy in one step" in stall.why


def test_a_step_that_stops_using_cpu_is_a_stall_one_stall_timeout_later() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    for second in range(1, 31):  # 30 s of silent work
        finding = watch.check(float(second), running(float(second)))
        assert finding is None or not finding.stalled
    for second in range(31, 41):  # then a deadlock: the counters stand still
        assert watch.check(float(second), sleeping(30.0)) is None
    stall = watch.check(41.0, sleeping(30.0))
    assert stall is not None and stall.stalled and stall.silent_for == 41.0


def test_a_stopped_process_shows_no_work_whatever_its_counters_say() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    for second in range(1, 11):
        assert watch.check(float(second), ProcessSample(state="T", cpu_seconds=float(second))) is None
    stall = watch.check(11.0, ProcessSample(state="T", cpu_seconds=11.0))
    assert stall is not None and stall.stalled and "T (stopped)" in stall.why


def test_less_cpu_than_the_busy_fraction_counts_as_none() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    trickle = BUSY_CPU_FRACTION / 2  # a stray thread's wake-ups in a deadlocked process
    stall = None
    for second in range(1, 12):
        stall = watch.check(float(second), sleeping(trickle * second))
    assert stall is not None and stall.stalled


def test_a_step_timeout_of_zero_leaves_a_busy_step_alone_forever() -> None:
    watch = StallWatch(STALL_S, 0.0, now=0.0)
    findings = [watch.check(float(second), running(float(second))) for second in range(1, 3600)]
    assert all(finding is None or not finding.stalled for finding in findings)


def test_a_step_timeout_below_the_stall_timeout_acts_as_the_stall_timeout() -> None:
    watch = StallWatch(STALL_S, 1.0, now=0.0)
    assert watch.step_timeout == STALL_S
    assert all(watch.check(float(second), running(float(second))) is None for second in range(1, 11))
    stall = watch.check(11.0, running(11.0))
    assert stall is not None and stall.stalled


def test_without_samples_silence_alone_decides() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    assert all(watch.check(float(second), None) is None for second in range(1, 11))
    stall = watch.check(11.0, None)
    assert stall is not None and stall.stalled


def test_a_new_process_starts_with_a_clean_slate() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    assert watch.check(5.0, running(100.0)) is None
    watch.restart(100.0)
    # Silence counts from the new process's Ready; its counters start again near 0.
    assert watch.check(101.0, running(0.5)) is None
    stall = watch.check(111.5, running(0.5))
    assert stall is not None and stall.stalled and stall.silent_for == 11.5


# -- /proc --------------------------------------------------------------------------------


def test_a_stat_line_is_read_after_the_last_parenthesis(tmp_path: Path) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    # A command name may hold spaces and parentheses; utime and stime are fields 14 and 15.
    stat.write_text(f"42 (a (weird) name) R 1 42 42 0 -1 4194560 100 0 0 0 {3 * ticks} {ticks} 0 0 20 0 9 0\n")
    assert read_process_sample(stat) == ProcessSample(state="R", cpu_seconds=4.0)
    assert read_process_sample(tmp_path / "gone") is None
    stat.write_text("42 (truncated) R 1")
    assert read_process_sample(stat) is None


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def _state(pid: int) -> str | None:
    sample = read_process_sample(Path(f"/proc/{pid}/stat"))
    return None if sample is None else sample.state


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stopped_process_reads_as_stopped_and_a_reaped_one_as_nothing(sleeper: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while _state(sleeper.pid) != "S" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(sleeper.pid) == "S"
    os.kill(sleeper.pid, signal.SIGSTOP)
    while _state(sleeper.pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    sample = read_process_sample(Path(f"/proc/{sleeper.pid}/stat"))
    assert sample is not None and sample.halted and sample.describe() == "T (stopped)"
    sleeper.kill()
    sleeper.wait()
    assert read_process_sample(Path(f"/proc/{sleeper.pid}/stat")) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_spawned_engine_counts_the_cpu_of_all_its_threads() -> None:
    # The main thread waits while another works, as an engine's waits on OpenVINO's worker threads.
    context = multiprocessing.get_context("spawn")
    working = context.Event()
    process = context.Process(target=_work_on_a_thread, args=(30.0, working), daemon=True)
    process.start()
    engine = SpawnedEngine(process)
    try:
        # From the moment the main thread waits (its start-up would count as work of its own).
        assert working.wait(60), "the spawned interpreter never started its worker thread"
        first = engine.sample()
        assert first is not None
        started = time.monotonic()
        time.sleep(0.25)  # a window of 25 clock ticks: a thread at work on a crowded core fills several
        second = engine.sample()
        elapsed = time.monotonic() - started
        assert second is not None and not second.halted
        assert second.cpu_seconds - first.cpu_seconds >= BUSY_CPU_FRACTION * elapsed
    finally:
        engine.kill()
        engine.join(30)
    assert engine.sample() is None  # reaped: nothing to read, not another process's numbers


def _work_on_a_thread(seconds: float, working: Any) -> None:
    def work() -> None:
        deadline = time.monotonic() + seconds
        working.set()
        while time.monotonic() < deadline:
            sum(range(1_000))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()


def test_samples_are_wanted_only_after_a_quarter_of_the_stall_timeout_of_silence() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    watch.heard(100.0)
    assert not watch.wants_sample(100.0 + STALL_S / 4 - 0.01)  # its reports speak for it
    assert watch.wants_sample(100.0 + STALL_S / 4)


def test_cpu_used_while_the_engine_reported_does_not_count_as_work_in_the_next_silence() -> None:
    watch = StallWatch(STALL_S, STEP_S, now=0.0)
    assert watch.check(1.0, running(1.0)) is None  # a sample, then a busy stretch it reported through
    watch.heard(30.0)
    # Hung from second 30 on: its 29 s of reported work must not make the first silent sample "busy".
    findings = {second: watch.check(float(second), sleeping(29.0)) for second in range(33, 42)}
    stall = findings[41]
    assert all(finding is None for second, finding in findings.items() if second < 41)
    assert stall is not None and stall.stalled
