"""The engine side of long speech input (``ovserve.engine.speech``): the token budget read from the
model's config.json, and the seams between spoken pieces (faded edges, a pause before every piece
but the first)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ovserve.engine.speech import (
    DEFAULT_TEXT_POSITIONS,
    FADE_S,
    PIECE_GAP_S,
    faded,
    text_positions,
    utf8_tokens,
)


@pytest.mark.parametrize(
    ("config", "positions"),
    [
        ({"max_text_positions": 600}, 600),  # microsoft/speecht5_tts
        ({"max_text_positions": 450}, 450),  # tiny-speecht5
        ({}, DEFAULT_TEXT_POSITIONS),
        ({"max_text_positions": "600"}, DEFAULT_TEXT_POSITIONS),
        ({"max_text_positions": 2}, DEFAULT_TEXT_POSITIONS),  # no room for a piece
        ([], DEFAULT_TEXT_POSITIONS),
    ],
)
def test_text_positions_come_from_config_json(tmp_path: Path, config: object, positions: int) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert text_positions(tmp_path) == positions


def test_text_positions_without_a_readable_config(tmp_path: Path) -> None:
    assert text_positions(tmp_path) == DEFAULT_TEXT_POSITIONS
    (tmp_path / "config.json").write_text("{not json")
    assert text_positions(tmp_path) == DEFAULT_TEXT_POSITIONS


def test_the_stand_in_count_is_never_below_one_token_a_byte() -> None:
    assert utf8_tokens("héllo") == 6 + 2
    assert utf8_tokens("\U0001f600") == 4 + 2


def test_a_piece_fades_in_and_out_and_keeps_its_middle() -> None:
    rate = 16_000
    samples = np.ones(rate, np.float32)
    out = faded(samples, rate, gap_before=False)
    ramp = int(rate * FADE_S)
    assert out.shape == samples.shape and out.dtype == np.float32
    assert out[0] == 0 and abs(out[-1]) < 1 / ramp + 1e-6
    assert np.all(np.diff(out[:ramp]) > 0) and np.all(np.diff(out[-ramp:]) < 0)
    assert np.array_equal(out[ramp:-ramp], samples[ramp:-ramp])
    assert np.array_equal(samples, np.ones(rate, np.float32))  # the input is not changed in place


def test_a_piece_after_the_first_starts_with_the_pause() -> None:
    rate = 16_000
    out = faded(np.full(1_000, 0.5, np.float32), rate, gap_before=True)
    gap = int(rate * PIECE_GAP_S)
    assert len(out) == gap + 1_000
    assert not out[:gap].any() and out[gap + 500] == 0.5


def test_a_piece_shorter_than_two_ramps_still_fades() -> None:
    out = faded(np.ones(10, np.float32), 16_000, gap_before=False)
    assert out[0] == 0 and out[-1] < 1 and len(out) == 10
    assert len(faded(np.zeros(0, np.float32), 16_000, gap_before=False)) == 0
