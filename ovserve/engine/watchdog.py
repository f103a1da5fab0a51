"""The stall watchdog's judgement: is an engine that says nothing inside a long step, or hung?

Why it cannot ask the engine: ``ContinuousBatchingPipeline.step()`` holds the GIL for the whole
step (its binding releases it only in ``generate()``), so no thread of the engine process can report
while a step runs, and a prefill of thousands of tokens on a loaded CPU can take minutes. An engine
only reports between steps (``ovserve.engine.loop``), so silence alone cannot tell a long step from
a hung one (a deadlock inside ``step()``, OVMS #4503) or a stopped process (SIGSTOP, a frozen
cgroup). Its CPU time can: a step at work burns CPU, a deadlocked or stopped process does not.

Contract of :class:`StallWatch` (pure: the caller brings the clock and the samples):

- the engine shows life by reporting (:meth:`StallWatch.heard`; it reports at least once a second
  between steps) or by working: its CPU time grew by at least :data:`BUSY_CPU_FRACTION` of a core
  between two samples while it was not stopped;
- it is *stalled* once it has shown neither for ``stall_timeout`` seconds, or once it has been
  silent for ``step_timeout`` seconds however busy (a step that spins forever); ``step_timeout`` 0
  turns that bound off, and it is never shorter than ``stall_timeout``;
- without samples (no ``/proc``: not Linux), silence alone decides, as before CPU time was read;
- samples are wanted (:meth:`StallWatch.wants_sample`) only once the engine has been silent for a
  quarter of ``stall_timeout``, and compared only within one silence.

:func:`read_process_sample` reads a process's (or a thread's) state and CPU time from ``/proc``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# A sample in which the engine used at least this fraction of one core counts as work. A step at
# work uses one or more cores, or its share of them on a crowded machine (a 2-core box under ten
# busy processes still gives it ~20%); a deadlocked or stopped process uses none.
BUSY_CPU_FRACTION = 0.05
# /proc process states in which a process does no work whatever its CPU counters say.
_HALTED_STATES = {"T": "stopped", "t": "stopped by a debugger", "Z": "exited (zombie)", "X": "dead"}
_STATE_NAMES = {"R": "running", "S": "sleeping", "D": "waiting for I/O", **_HALTED_STATES}
# utime and stime: fields 14 and 15 of /proc/<pid>/stat, i.e. 11 and 12 after the state (field 3).
_UTIME_AFTER_STATE = 11
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """A process's (or thread's) run state and the CPU time it has used so far."""

    state: str  # the /proc state letter: R running, S sleeping, D disk wait, T stopped, Z zombie...
    cpu_seconds: float  # user + system time of all its threads (of the thread alone for a task)

    @property
    def halted(self) -> bool:
        return self.state in _HALTED_STATES

    def describe(self) -> str:
        return f"{self.state} ({_STATE_NAMES.get(self.state, 'unknown')})"


def read_process_sample(stat_path: Path) -> ProcessSample | None:
    """The sample in a ``/proc/<pid>/stat`` (or ``/proc/<pid>/task/<tid>/stat``) file; None when
    there is none to read (the process is gone, or there is no ``/proc``)."""
    try:
        text = stat_path.read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        ticks = int(fields[_UTIME_AFTER_STATE]) + int(fields[_UTIME_AFTER_STATE + 1])
        return ProcessSample(state=fields[0].decode(), cpu_seconds=ticks / _CLOCK_TICKS)
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Finding:
    """What the watchdog concluded about a silent engine: a stall (kill and restart it), or a long
    step at work that is worth a log line but left alone."""

    stalled: bool
    silent_for: float
    why: str  # the reason, as a log line's clause


class StallWatch:
    """Tells a hung engine from one in a long step; see the module docstring for the rules."""

    def __init__(self, stall_timeout: float, step_timeout: float, now: float) -> None:
        self.stall_timeout = stall_timeout
        # 0: no bound on a busy step; below the stall timeout, the stall timeout is the bound.
        self.step_timeout = max(step_timeout, stall_timeout) if step_timeout > 0 else 0.0
        self._last_heard = now
        self._last_busy = now
        self._last_sample: ProcessSample | None = None
        self._last_sample_at = now
        self._long_step_noted = False

    def restart(self, now: float) -> None:
        """A new engine process became ready: forget the old one's samples."""
        self._last_heard = self._last_busy = self._last_sample_at = now
        self._last_sample = None
        self._long_step_noted = False

    def heard(self, now: float) -> None:
        """The engine sent something: it is alive and between steps."""
        self._last_heard = now
        self._long_step_noted = False
        # CPU time is compared within one silence: a sample from before it would count the work
        # the engine reported as work done while silent.
        self._last_sample = None

    def wants_sample(self, now: float) -> bool:
        """Whether the engine has been silent long enough (a quarter of the stall timeout) for
        its CPU time to matter. Until then its reports speak for it: /proc is not read."""
        return now - self._last_heard >= self.stall_timeout / 4

    def check(self, now: float, sample: ProcessSample | None) -> Finding | None:
        """Take a sample of the engine's process (None when it cannot be read) and judge it: a
        :class:`Finding` when it stalled, or when a long step first outlasts the stall timeout;
        None while it reports or works as it should."""
        if sample is not None:
            previous, elapsed = self._last_sample, now - self._last_sample_at
            used = 0.0 if previous is None or sample.halted else sample.cpu_seconds - previous.cpu_seconds
            if elapsed > 0 and used >= BUSY_CPU_FRACTION * elapsed:
                self._last_busy = now
            self._last_sample, self._last_sample_at = sample, now
        silent_for = now - self._last_heard
        idle_for = now - max(self._last_heard, self._last_busy)
        if idle_for > self.stall_timeout:
            why = f"gave no sign of life for {idle_for:.1f} s (--engine_stall_timeout {self.stall_timeout:g} s)"
            if sample is not None:
                why += f": no report and no CPU used, process state {sample.describe()}"
            return Finding(stalled=True, silent_for=silent_for, why=why)
        step_bound = f"--engine_step_timeout {self.step_timeout:g} s" if self.step_timeout else "no step bound"
        if self.step_timeout and silent_for > self.step_timeout:
            why = f"has been busy in one step for {silent_for:.1f} s ({step_bound}): using CPU but not a word, a spin"
            return Finding(stalled=True, silent_for=silent_for, why=why)
        if silent_for > self.stall_timeout and not self._long_step_noted:
            self._long_step_noted = True
            why = (
                f"has been silent for {silent_for:.1f} s (--engine_stall_timeout {self.stall_timeout:g} s) but uses "
                f"CPU: a long step, not a stall ({step_bound})"
            )
            return Finding(stalled=False, silent_for=silent_for, why=why)
        return None
