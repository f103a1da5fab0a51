from __future__ import annotations

import json
from pathlib import Path

import pytest

from ovserve.api.protocol import ChatCompletionRequest
from ovserve.errors import BadRequestError, ContextLengthExceededError
from ovserve.generation_config import (
    BUILTIN_DEFAULTS,
    ModelDefaults,
    resolve_generation_params,
    resolve_max_new_tokens,
)


def request(**fields: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], **fields}
    )


def test_request_beats_model_beats_builtin() -> None:
    model = ModelDefaults({"temperature": 0.7, "top_k": 20})
    params = resolve_generation_params(request(temperature=0.3), model, max_new_tokens=10)
    assert params.temperature == 0.3  # request
    assert params.top_k == 20  # generation_config.json
    assert params.top_p == BUILTIN_DEFAULTS["top_p"]  # built-in
    assert params.repetition_penalty == BUILTIN_DEFAULTS["repetition_penalty"]


def test_top_k_minus_one_and_zero_mean_no_filter() -> None:
    for value in (-1, 0):
        assert resolve_generation_params(request(top_k=value), ModelDefaults(), max_new_tokens=1).top_k == 0


def test_do_sample_false_in_generation_config_means_greedy(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.6}))
    defaults = ModelDefaults.load(tmp_path)
    assert resolve_generation_params(request(), defaults, max_new_tokens=1).temperature == 0.0
    assert resolve_generation_params(request(temperature=0.9), defaults, max_new_tokens=1).temperature == 0.9


def test_unreadable_generation_config_falls_back_to_builtin(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text("{not json")
    assert ModelDefaults.load(tmp_path).values == {}


def test_best_of_makes_beam_search() -> None:
    params = resolve_generation_params(request(best_of=3, n=2), ModelDefaults(), max_new_tokens=1)
    assert params.beam_search and params.best_of == 3 and params.n == 2


def test_max_new_tokens_precedence_and_context() -> None:
    defaults = ModelDefaults({"max_new_tokens": 64})
    kwargs = {"prompt_tokens": 100, "context_length": 1000, "max_tokens_limit": None}
    assert resolve_max_new_tokens(10, defaults, **kwargs) == 10
    assert resolve_max_new_tokens(None, defaults, **kwargs) == 64
    assert resolve_max_new_tokens(None, ModelDefaults(), **kwargs) == 900
    assert resolve_max_new_tokens(None, defaults, prompt_tokens=100, context_length=1000, max_tokens_limit=8) == 8
    with pytest.raises(BadRequestError, match="max_tokens_limit"):
        resolve_max_new_tokens(9, defaults, prompt_tokens=100, context_length=1000, max_tokens_limit=8)
    with pytest.raises(ContextLengthExceededError, match="901"):
        resolve_max_new_tokens(901, defaults, **kwargs)
    with pytest.raises(ContextLengthExceededError, match="1000"):
        resolve_max_new_tokens(None, defaults, prompt_tokens=1000, context_length=1000, max_tokens_limit=None)
