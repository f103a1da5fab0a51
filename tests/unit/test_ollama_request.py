"""Ollama request fields the models check themselves: keep_alive durations, options mapped onto the
core's sampling fields."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ovserve.dialects.ollama.adapter import sampling
from ovserve.dialects.ollama.request import (
    FOREVER,
    LONGEST_KEEP_ALIVE_S,
    ChatRequest,
    Options,
    keep_alive_seconds,
)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, None), (0, 0.0), (300, 300.0), ("5m", 300.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("-1", -1.0),
     ("-1m", -60.0), ("250ms", 0.25), ("10", 10.0), ("+2m", 120.0), ("1.5e3", 1500.0), ("5ms1us", 0.005001)],
)  # fmt: skip
def test_keep_alive_reads_go_durations_and_seconds(value, seconds) -> None:
    assert keep_alive_seconds(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [LONGEST_KEEP_ALIVE_S, 1e300, float("inf"), "1" + "0" * 400, "99999999999h"])
def test_a_keep_alive_longer_than_gos_longest_duration_is_forever(value) -> None:
    """Ollama could not hold a model longer (its durations are int64 nanoseconds); /api/ps could not
    show such an expiry as a date."""
    ChatRequest.model_validate({"model": "m", "keep_alive": value})
    assert keep_alive_seconds(value) == FOREVER


# Python's float() reads " 5", "٣" (an Arabic-Indic 3), "nan" and "inf"; Go's durations do not.
@pytest.mark.parametrize("value", ["soon", "5 minutes", "m", "", "-", "5x", " 5", "5m\n", "\u0663", "nan", "inf"])
def test_a_malformed_keep_alive_is_refused(value) -> None:
    with pytest.raises(ValidationError, match="duration"):
        ChatRequest.model_validate({"model": "m", "keep_alive": value})


def test_options_become_the_cores_sampling_fields() -> None:
    options = Options.model_validate(
        {"temperature": 0.2, "top_k": 0, "num_predict": -1, "seed": -1, "repeat_penalty": 1.1, "stop": ["\n"]}
    )
    fields = sampling(options, stream=True)
    assert fields.temperature == 0.2
    assert fields.top_k is None and fields.top_k_removed
    assert fields.max_tokens is None and fields.max_tokens_removed
    assert fields.seed is None
    assert fields.repetition_penalty == 1.1
    assert fields.stop == ("\n",)
    limited = sampling(Options.model_validate({"num_predict": 7, "top_k": 5, "seed": 3}), stream=False)
    assert (limited.max_tokens, limited.top_k, limited.seed, limited.max_tokens_removed) == (7, 5, 3, False)


def test_load_time_options_are_accepted_and_unknown_ones_kept_aside() -> None:
    options = Options.model_validate({"num_ctx": 8192, "num_thread": 4, "num_gpu": -1, "mirostat": 2})
    assert options.num_ctx == 8192
    assert options.model_extra == {"mirostat": 2}
