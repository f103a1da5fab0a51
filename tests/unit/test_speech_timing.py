"""Segment and word times from the Whisper pipeline: within the audio, never going back. A window's
last piece may come without its end (-1): it ends where the next piece starts (the next window),
or with the audio. Found as a 35 s clip's first segment reading (0.0, 35.0) before (30.0, 35.0)."""

from __future__ import annotations

from ovserve.engine.speech import _timed


def test_an_open_end_ends_where_the_next_piece_starts() -> None:
    assert _timed([(0.0, -1.0, "a"), (30.0, -1.0, "b")], 35.0) == [(0.0, 30.0, "a"), (30.0, 35.0, "b")]


def test_times_are_clamped_to_the_audio_and_rounded() -> None:
    assert _timed([(-0.5, 1.234, "a"), (1.3, 99.0, "b")], 3.0) == [(0.0, 1.23, "a"), (1.3, 3.0, "b")]


def test_an_end_before_its_start_is_open_and_never_before_its_start() -> None:
    timed = _timed([(2.0, 1.0, "a"), (1.5, 2.5, "b"), (2.5, -1.0, "c")], 4.0)
    assert timed == [(2.0, 2.0, "a"), (1.5, 2.5, "b"), (2.5, 4.0, "c")]
