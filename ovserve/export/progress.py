"""Per-stage progress of an export: ``[export] [i/N] stage`` and its time, a live line on a terminal.

Contract: a :class:`Progress` is given the names of the export's stages, in order, before the
first one starts (the driver knows which apply to a task). :meth:`Progress.begin` ends the running
stage (done, with its time) and starts the named one; :func:`note` prints a detail line inside
the running stage; leaving the ``with`` block ends the last stage as done, or, when an exception
leaves it (an ``ExportError``, ``KeyboardInterrupt``, a bug), as failed or interrupted. Every
exit finishes the line and stops the ticker thread before the exception goes on, so the terminal is
never left mid-line.

Not a terminal (CI, a pipe, a log file: the stream's ``isatty()`` is false): two plain lines per
stage, ``[export] [2/6] converting to OpenVINO IR ...`` and ``[export] [2/6] done in 12.3 s``,
with the detail lines between them; nothing but printable text and newlines is written.

A terminal: the running stage is one line redrawn in place with ``\\r`` (a bar over the stages, the
stage, a spinner and its elapsed time), every :data:`TICK_S` by a daemon thread, and replaced by
``[export] [2/6] converting to OpenVINO IR: done in 12.3 s`` when it ends; a detail line clears it,
prints, and draws it again. A stage whose library draws its own progress bars (nncf's compression,
a Hugging Face download) gets a plain line and no live line: two bars redrawing one terminal line
would overwrite each other. Plain text only, no escape sequences: a line is cleared with spaces.

:func:`note` goes to the :class:`Progress` of the export running in this context (a context
variable: the export's own thread), or prints a plain line when none runs (a task's planner,
before the export starts).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TextIO

PREFIX = "[export]"
TICK_S = 0.5  # how often the live line's spinner and elapsed time move
BAR_WIDTH = 20
SPINNER = "|/-\\"

_RUNNING: ContextVar[Progress | None] = ContextVar("ovserve_export_progress", default=None)


def note(message: str) -> None:
    """A detail line of the running stage (``[export] message``), or a plain line outside an export."""
    progress = _RUNNING.get()
    if progress is not None:
        progress.note(message)
    else:
        print(f"{PREFIX} {message}", flush=True)


class Progress:
    """The stages of one export and the one that runs now, drawn on ``stream`` (stdout by default).

    ``tty`` overrides the stream's ``isatty()``; ``clock`` is read for the elapsed times; ``tick_s``
    None draws the live line only when something happens (a test calls :meth:`tick` itself).
    """

    def __init__(
        self,
        stages: Sequence[str],
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        tick_s: float | None = TICK_S,
        width: int | None = None,
    ) -> None:
        if not stages or len(set(stages)) != len(stages):
            raise ValueError(f"an export's stages must be distinct and at least one: {list(stages)}")
        self._stages = list(stages)
        self._stream = stream if stream is not None else sys.stdout
        self._tty = self._stream.isatty() if tty is None else tty
        self._clock = clock
        self._tick_s = tick_s
        # The live line must fit one terminal row, or "\r" returns to the start of its last row only.
        self._width = max(20, (width or shutil.get_terminal_size().columns) - 1)
        # The ticker thread draws too: every write, and the state it reads, under this lock.
        self._lock = threading.Lock()
        self._current: int | None = None
        self._started = 0.0
        self._live = False  # the stream's current line is this stage's live line
        self._drawn = 0  # characters of the live line on the screen now
        self._frame = 0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._token: Token[Progress | None] | None = None

    def __enter__(self) -> Progress:
        self._token = _RUNNING.set(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self._end("done in")
            elif issubclass(exc_type, KeyboardInterrupt):
                self._end("interrupted after")
            else:
                self._end("failed after")
        finally:
            if self._token is not None:
                _RUNNING.reset(self._token)

    def begin(self, name: str, *, own_bars: bool = False) -> None:
        """End the running stage (done) and start ``name``, one of the planned stages; ``own_bars``:
        its library draws progress bars of its own (no live line on a terminal)."""
        index = self._stages.index(name)  # ValueError for an unplanned stage: a bug in the driver
        self._end("done in")
        with self._lock:
            self._current, self._started, self._frame = index, self._clock(), 0
            self._live = self._tty and not own_bars
            if self._live:
                self._draw()
            else:
                self._line(f"{self._label()} {name} ...")
        if self._live and self._tick_s is not None:
            self._stop.clear()
            self._ticker = threading.Thread(
                target=self._tick_until_stopped, name="ovserve-export-progress", daemon=True
            )
            self._ticker.start()

    def note(self, message: str) -> None:
        """A detail line inside the running stage; the live line is drawn again below it."""
        with self._lock:
            if self._live:
                self._clear()
            self._line(f"{PREFIX} {message}")
            if self._live:
                self._draw()

    def tick(self) -> None:
        """Move the live line's spinner and elapsed time on (what the ticker thread does)."""
        with self._lock:
            if self._live:
                self._frame += 1
                self._draw()

    # -- drawing (under the lock) -----------------------------------------------------------------

    def _label(self) -> str:
        assert self._current is not None
        return f"{PREFIX} [{self._current + 1}/{len(self._stages)}]"

    def _draw(self) -> None:
        assert self._current is not None
        filled = BAR_WIDTH * self._current // len(self._stages)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        elapsed = self._clock() - self._started
        spinner = SPINNER[self._frame % len(SPINNER)]
        name = self._stages[self._current]
        text = f"{PREFIX} [{bar}] [{self._current + 1}/{len(self._stages)}] {name} {spinner} {elapsed:.0f} s"
        text = text[: self._width]
        # Spaces over what a longer line drew before: plain text, no escape sequence.
        self._stream.write("\r" + text + " " * max(0, self._drawn - len(text)))
        self._stream.flush()
        self._drawn = len(text)

    def _clear(self) -> None:
        self._stream.write("\r" + " " * self._drawn + "\r")
        self._drawn = 0

    def _line(self, text: str) -> None:
        self._stream.write(text + "\n")
        self._stream.flush()

    # -- ending a stage ---------------------------------------------------------------------------

    def _end(self, outcome: str) -> None:
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            self._stop.set()
            ticker.join()
        with self._lock:
            if self._current is None:
                return
            elapsed = f"{self._clock() - self._started:.1f} s"
            if self._live:
                self._clear()
                self._line(f"{self._label()} {self._stages[self._current]}: {outcome} {elapsed}")
            else:
                self._line(f"{self._label()} {outcome} {elapsed}")
            self._current, self._live = None, False

    def _tick_until_stopped(self) -> None:
        assert self._tick_s is not None
        while not self._stop.wait(self._tick_s):
            self.tick()
