from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ovserve.core.conversation import Sampling
from ovserve.core.generation_config import BUILTIN_DEFAULTS, resolve_generation_params, resolve_max_new_tokens
from ovserve.dialects.openai.chat.request import ChatCompletionRequest
from ovserve.dialects.openai.completions.request import CompletionRequest
from ovserve.dialects.openai.request import SamplingRequest
from ovserve.dialects.openai.responses.request import ResponsesRequest
from ovserve.engine.messages import GenerationParams
from ovserve.errors import BadRequestError, ContextLengthExceededError, UnsupportedParameterError
from ovserve.models.defaults import ModelDefaults

NOT_SENT = Sampling()  # max_tokens not sent


def resolve(request: ChatCompletionRequest, defaults: ModelDefaults, **kwargs: Any) -> GenerationParams:
    """The request's sampling fields resolved as the core resolves them (best_of_limit: the default)."""
    return resolve_generation_params(request.sampling(), defaults, **{"best_of_limit": 20, **kwargs})


def request(**fields: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], **fields}
    )


def test_request_beats_model_beats_builtin() -> None:
    model = ModelDefaults({"temperature": 0.7, "top_k": 20})
    params = resolve(request(temperature=0.3), model, max_new_tokens=10)
    assert params.temperature == 0.3  # request
    assert params.top_k == 20  # generation_config.json
    assert params.top_p == BUILTIN_DEFAULTS["top_p"]  # built-in
    assert params.repetition_penalty == BUILTIN_DEFAULTS["repetition_penalty"]


def test_top_k_minus_one_and_zero_mean_no_filter() -> None:
    for value in (-1, 0):
        assert resolve(request(top_k=value), ModelDefaults(), max_new_tokens=1).top_k == 0


def test_do_sample_false_in_generation_config_means_greedy(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.6}))
    defaults = ModelDefaults.load(tmp_path)
    assert resolve(request(), defaults, max_new_tokens=1).temperature == 0.0
    assert resolve(request(temperature=0.9), defaults, max_new_tokens=1).temperature == 0.9


def test_unreadable_generation_config_falls_back_to_builtin(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text("{not json")
    assert ModelDefaults.load(tmp_path).values == {}


def test_best_of_makes_beam_search() -> None:
    params = resolve(request(best_of=3, n=2), ModelDefaults(), max_new_tokens=1)
    assert params.beam_search and params.best_of == 3 and params.n == 2


def test_max_new_tokens_precedence_and_context() -> None:
    defaults = ModelDefaults({"max_new_tokens": 64})
    kwargs = {"prompt_tokens": 100, "context_length": 1000, "max_tokens_limit": None}
    assert resolve_max_new_tokens(Sampling(max_tokens=10), defaults, **kwargs) == 10
    assert resolve_max_new_tokens(NOT_SENT, defaults, **kwargs) == 64
    assert resolve_max_new_tokens(NOT_SENT, ModelDefaults(), **kwargs) == 900
    assert resolve_max_new_tokens(NOT_SENT, defaults, prompt_tokens=100, context_length=1000, max_tokens_limit=8) == 8
    with pytest.raises(BadRequestError, match="max_tokens_limit"):
        resolve_max_new_tokens(
            Sampling(max_tokens=9), defaults, prompt_tokens=100, context_length=1000, max_tokens_limit=8
        )
    with pytest.raises(ContextLengthExceededError, match="901"):
        resolve_max_new_tokens(Sampling(max_tokens=901), defaults, **kwargs)
    with pytest.raises(ContextLengthExceededError, match="1000"):
        resolve_max_new_tokens(NOT_SENT, defaults, prompt_tokens=1000, context_length=1000, max_tokens_limit=None)


def test_explicit_null_top_k_means_no_filter_and_omitted_means_default() -> None:
    model = ModelDefaults({"top_k": 20})
    assert resolve(request(top_k=None), model, max_new_tokens=1).top_k == 0
    assert resolve(request(), model, max_new_tokens=1).top_k == 20


def test_explicit_null_max_tokens_skips_the_model_default() -> None:
    defaults = ModelDefaults({"max_new_tokens": 64})
    kwargs = {"prompt_tokens": 100, "context_length": 1000}
    assert resolve_max_new_tokens(Sampling(max_tokens_removed=True), defaults, max_tokens_limit=None, **kwargs) == 900
    assert resolve_max_new_tokens(Sampling(max_tokens_removed=True), defaults, max_tokens_limit=50, **kwargs) == 50
    assert request(max_tokens=None).output_limit_removed and not request().output_limit_removed
    assert request(max_completion_tokens=None).output_limit_removed


@pytest.mark.parametrize(
    ("model", "body", "newer"),
    [
        (ChatCompletionRequest, {"messages": [{"role": "user", "content": "x"}]}, "max_completion_tokens"),
        (ResponsesRequest, {"input": "x"}, "max_output_tokens"),
        (CompletionRequest, {"prompt": "x"}, "max_tokens"),
    ],
)
def test_each_openai_dialect_reads_its_output_limit_by_one_rule(
    model: type[SamplingRequest], body: dict[str, object], newer: str
) -> None:
    """The newer name wins over max_tokens and is the param an error names; max_tokens alone works
    in every dialect; an explicit null of max_tokens means up to the context."""

    def read(**fields: object) -> tuple[int | None, str, bool]:
        sent = model.model_validate({"model": "m", **body, **fields})
        return sent.output_limit, sent.output_limit_param, sent.output_limit_removed

    assert read() == (None, "max_tokens", False)
    assert read(max_tokens=5) == (5, "max_tokens", False)
    assert read(**{"max_tokens": 5, newer: 7}) == (7, newer, False)
    assert read(max_tokens=None) == (None, "max_tokens", True)


def test_beam_search_drops_model_penalties_and_refuses_sent_ones() -> None:
    model = ModelDefaults({"repetition_penalty": 1.05})
    params = resolve(request(best_of=2), model, max_new_tokens=1)
    assert params.beam_search and params.repetition_penalty == 1.0
    with pytest.raises(UnsupportedParameterError, match="beam search"):
        resolve(request(best_of=2, presence_penalty=0.5), model, max_new_tokens=1)
    # Sampling keeps the model's penalty.
    assert resolve(request(), model, max_new_tokens=1).repetition_penalty == 1.05


def test_best_of_limit_applies_to_best_of_and_to_n() -> None:
    with pytest.raises(BadRequestError, match="best_of_limit"):
        resolve(request(best_of=5), ModelDefaults(), max_new_tokens=1, best_of_limit=4)
    with pytest.raises(BadRequestError, match="n \\(5\\)"):
        resolve(request(n=5), ModelDefaults(), max_new_tokens=1, best_of_limit=4)


def test_tiny_temperatures_are_greedy() -> None:
    assert resolve(request(temperature=1e-90), ModelDefaults(), max_new_tokens=1).temperature == 0


def test_include_stop_defaults_to_stream() -> None:
    assert resolve(request(), ModelDefaults(), max_new_tokens=1).include_stop is False
    streaming = request(stream=True)
    assert resolve(streaming, ModelDefaults(), max_new_tokens=1).include_stop is True


def test_an_empty_prompt_is_refused() -> None:
    with pytest.raises(BadRequestError, match="no tokens"):
        resolve_max_new_tokens(NOT_SENT, ModelDefaults(), prompt_tokens=0, context_length=10, max_tokens_limit=None)


def test_clamped_max_tokens_take_what_the_context_and_the_limit_leave() -> None:
    clamped = Sampling(max_tokens=64000, clamp_max_tokens=True)
    defaults = ModelDefaults({"max_new_tokens": 64})
    assert (
        resolve_max_new_tokens(clamped, defaults, prompt_tokens=100, context_length=1000, max_tokens_limit=None) == 900
    )
    assert resolve_max_new_tokens(clamped, defaults, prompt_tokens=100, context_length=1000, max_tokens_limit=50) == 50
    small = Sampling(max_tokens=10, clamp_max_tokens=True)
    assert resolve_max_new_tokens(small, defaults, prompt_tokens=100, context_length=1000, max_tokens_limit=None) == 10
    # The prompt itself must still fit: its counts travel with the error (Anthropic's wording).
    with pytest.raises(ContextLengthExceededError) as too_long:
        resolve_max_new_tokens(clamped, defaults, prompt_tokens=1200, context_length=1000, max_tokens_limit=None)
    assert (too_long.value.prompt_tokens, too_long.value.maximum) == (1200, 999)
