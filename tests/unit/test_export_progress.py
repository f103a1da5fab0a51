"""An export's stage progress: plain ``[export] [i/N]`` lines when not on a terminal (CI, pipes),
one live line redrawn in place on a terminal, and a finished line whatever way the export ends."""

from __future__ import annotations

import io
import threading

import pytest

from ovserve.export.progress import Progress, note
from ovserve.export.report import ExportError

STAGES = ["reading the source", "converting to OpenVINO IR", "compressing weights to int8", "writing the repository"]


class Stream(io.StringIO):
    """A stream that says whether it is a terminal, as sys.stdout does."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def progress(stream: Stream, clock: Clock) -> Progress:
    """Drawn only when something happens: the test ticks by hand."""
    return Progress(STAGES, stream, clock=clock, tick_s=None, width=120)


def test_off_a_terminal_each_stage_is_a_start_and_a_done_line_with_its_time() -> None:
    stream, clock = Stream(tty=False), Clock()
    with progress(stream, clock) as export:
        export.begin("reading the source")
        note("source: /models/tiny")
        clock.now += 0.25
        export.begin("converting to OpenVINO IR")
        clock.now += 12.34
        note("model: converting /models/tiny to OpenVINO IR (text-generation-with-past)")
        export.begin("compressing weights to int8", own_bars=True)
        clock.now += 3
        export.begin("writing the repository")
        export.tick()  # nothing to redraw off a terminal
    assert stream.getvalue().splitlines() == [
        "[export] [1/4] reading the source ...",
        "[export] source: /models/tiny",
        "[export] [1/4] done in 0.2 s",
        "[export] [2/4] converting to OpenVINO IR ...",
        "[export] model: converting /models/tiny to OpenVINO IR (text-generation-with-past)",
        "[export] [2/4] done in 12.3 s",
        "[export] [3/4] compressing weights to int8 ...",
        "[export] [3/4] done in 3.0 s",
        "[export] [4/4] writing the repository ...",
        "[export] [4/4] done in 0.0 s",
    ]
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_a_failed_stage_says_so_and_the_error_goes_on() -> None:
    stream, clock = Stream(tty=False), Clock()
    with pytest.raises(ExportError), progress(stream, clock) as export:
        export.begin("reading the source")
        clock.now += 1.5
        raise ExportError("no tokenizer")
    assert stream.getvalue().splitlines()[-1] == "[export] [1/4] failed after 1.5 s"


def test_on_a_terminal_the_stage_is_one_line_redrawn_in_place_with_a_bar_and_a_ticker() -> None:
    stream, clock = Stream(tty=True), Clock()
    with progress(stream, clock) as export:
        export.begin("reading the source")
        clock.now += 0.2
        export.begin("converting to OpenVINO IR")
        first = stream.getvalue()
        clock.now += 7
        export.tick()
        ticked = stream.getvalue()[len(first) :]
        note("model: converting")
        noted = stream.getvalue()[len(first) + len(ticked) :]
        clock.now += 5
    # The finished stage is a line of its own; the running one is drawn after a carriage return.
    assert first.startswith("\r[export] [--------------------] [1/4] reading the source | 0 s")
    assert "\r[export] [1/4] reading the source: done in 0.2 s\n" in first
    assert first.endswith("\r[export] [#####---------------] [2/4] converting to OpenVINO IR | 0 s")
    # A tick moves the spinner and the time, on the same line.
    assert ticked == "\r[export] [#####---------------] [2/4] converting to OpenVINO IR / 7 s"
    # A detail line clears the live line, prints, and the live line comes back below it.
    assert "[export] model: converting\n" in noted
    assert noted.endswith("\r[export] [#####---------------] [2/4] converting to OpenVINO IR / 7 s")
    # Leaving ends the line: the terminal is never left mid-line.
    assert stream.getvalue().endswith("\r[export] [2/4] converting to OpenVINO IR: done in 12.0 s\n")
    assert "\x1b" not in stream.getvalue()


def test_on_a_terminal_a_stage_with_its_own_bars_gets_a_plain_line() -> None:
    stream, clock = Stream(tty=True), Clock()
    with progress(stream, clock) as export:
        export.begin("compressing weights to int8", own_bars=True)
        export.tick()  # nncf draws its bars: nothing of ours on that line
        clock.now += 2
    assert stream.getvalue() == "[export] [3/4] compressing weights to int8 ...\n[export] [3/4] done in 2.0 s\n"


def test_an_interrupt_stops_the_ticker_and_finishes_the_line() -> None:
    stream = Stream(tty=True)
    ticked = threading.Event()

    class Ticking(Progress):
        def tick(self) -> None:
            super().tick()
            ticked.set()

    with pytest.raises(KeyboardInterrupt), Ticking(STAGES, stream, tick_s=0.01, width=120) as export:
        export.begin("converting to OpenVINO IR")
        assert ticked.wait(10)  # the ticker thread draws on its own
        raise KeyboardInterrupt
    assert not any(thread.name == "ovserve-export-progress" for thread in threading.enumerate())
    last = stream.getvalue().rsplit("\r", 1)[-1]
    assert last.startswith("[export] [2/4] converting to OpenVINO IR: interrupted after ") and last.endswith(" s\n")


def test_the_live_line_fits_the_terminal() -> None:
    stream = Stream(tty=True)
    name = "a stage with a rather long name indeed"
    with Progress([name], stream, clock=Clock(), tick_s=None, width=41) as export:
        export.begin(name)
        assert stream.getvalue() == "\r" + "[export] [--------------------] [1/1] a stage with a rather long"[:40]


def test_a_detail_outside_an_export_is_a_plain_line(capsys: pytest.CaptureFixture[str]) -> None:
    note("NPU target: weight format int8 -> int4")
    assert capsys.readouterr().out == "[export] NPU target: weight format int8 -> int4\n"
