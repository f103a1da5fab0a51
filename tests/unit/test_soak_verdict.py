"""scripts/soak.py's verdict: memory that levels off passes, memory still growing in the run's
last half fails, and so do request errors and a replaced engine. (The soak itself takes a server
and many minutes: run it by hand.)"""

from __future__ import annotations

import pytest

from scripts.soak import growth_pct, verdict


def _curve(values: list[float], every: float = 30.0) -> list[tuple[float, float]]:
    return [(i * every, value) for i, value in enumerate(values)]


def test_growth_is_measured_over_the_last_half_only() -> None:
    # Warm-up growth (JIT kernels, the KV cache) in the first half does not count.
    levelled = _curve([169, 300, 420, 500, 525, 525, 526, 526, 526])
    assert growth_pct(levelled) == pytest.approx(100 * (526 - 525) / 525)


def test_one_transient_sample_at_either_end_of_the_window_moves_nothing() -> None:
    spiky = _curve([100, 100, 100, 100, 130, 100, 100, 100, 100, 140, 100])
    assert growth_pct(spiky) == 0.0


def test_steady_growth_shows_in_full() -> None:
    growing = _curve([100 + 2 * i for i in range(21)])  # +2 MiB a sample, never levelling off
    assert growth_pct(growing) == pytest.approx(100 * (138 - 122) / 122)


def test_too_few_samples_cannot_be_judged() -> None:
    assert growth_pct([(0.0, 100.0)]) is None
    assert growth_pct([]) is None


def test_a_flat_run_without_errors_passes() -> None:
    result = verdict({"server": _curve([80, 81, 81, 81]), "engine 7": _curve([169, 400, 410, 410])}, 0, 1.0)
    assert result.passed
    assert result.reasons == []


def test_an_engine_still_growing_in_the_last_half_fails_and_is_named() -> None:
    still_growing = _curve([169, 300, 400, 450, 480, 495, 505, 512, 518])
    result = verdict({"server": _curve([80] * 9), "engine 7": still_growing}, 0, 1.0)
    assert not result.passed
    assert len(result.reasons) == 1
    assert result.reasons[0].startswith("engine 7: RSS grew")
    assert result.growth["server"] == 0.0


def test_any_request_error_fails_a_flat_run() -> None:
    result = verdict({"server": _curve([80] * 5)}, errors=1, threshold_pct=1.0)
    assert not result.passed
    assert result.reasons == ["1 request error(s)"]


def test_a_replaced_engine_fails_the_run() -> None:
    result = verdict({"server": _curve([80] * 5)}, 0, 1.0, replaced=["engine 7"])
    assert result.reasons == ["engine 7 was replaced during the run"]


def test_a_run_too_short_to_judge_fails_rather_than_passes() -> None:
    result = verdict({"server": [(0.0, 80.0)]}, 0, 1.0)
    assert not result.passed
    assert "too few samples" in result.reasons[0]
