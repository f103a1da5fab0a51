"""The field policy table (``ovserve.api.field_policy.FIELD_RULES``), rule by rule, over HTTP.

Refused fields: 400 naming the field with a value that would change the output, 422 in Azure's
dialect, dropped under ``extra-parameters: ignore``, accepted with their neutral value. Ignored
fields: accepted, and the output is the same as without them. Mapped fields act as their target.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ovserve.api.field_policy import FIELD_RULES, Endpoint, FieldRule, Treatment
from tests.conftest import Server

# For each refused field: a value that would change the output, and its neutral value.
REFUSED_EXAMPLES: dict[str, tuple[Any, Any]] = {
    "logit_bias": ({"15": 100}, {}),
    "top_logprobs": (3, 0),
    "logprobs": (2, 0),
    "functions": ([{"name": "f", "parameters": {"type": "object"}}], []),
    "function_call": ({"name": "f"}, "none"),
    "response_format": ({"type": "json_object"}, {"type": "text"}),
    "modalities": (["text", "audio"], ["text"]),
    "audio": ({"voice": "alloy", "format": "wav"}, {}),
    "verbosity": ("low", ""),
    "web_search_options": ({"search_context_size": "low"}, {}),
    "moderation": ({"model": "omni-moderation-latest"}, {}),
    "suffix": (" return x", ""),
    "use_beam_search": (True, False),
    "early_stopping": (True, False),
    "min_tokens": (5, 0),
    "prompt_logprobs": (1, 0),
    "detokenize": (False, True),
    "spaces_between_special_tokens": (False, True),
    "logits_processors": (["my.processor"], []),
    "truncate_prompt_tokens": (10, 0),
    "repeat_last_n": (64, -1),
    "typical_p": (0.5, 1.0),
    "tfs_z": (0.9, 1.0),
    "mirostat": (2, 0),
    "dynatemp_range": (0.5, 0),
    "n_probs": (3, 0),
    "min_keep": (5, 1),
    "error_behavior": ("truncate", "error"),
}

IGNORED_EXAMPLES: dict[str, Any] = {
    "user": "user-1234",
    "safety_identifier": "abc",
    "metadata": {"project": "x"},
    "store": True,
    "service_tier": "flex",
    "prompt_cache_key": "k",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"ttl": "1h"},
    "prediction": {"type": "content", "content": "hello"},
    "mirostat_tau": 5.0,
    "mirostat_eta": 0.1,
    "dynatemp_exponent": 1.0,
    "cache_prompt": True,
    "n_keep": 10,
    "id_slot": 1,
    "use_raw_prompt": True,
}

MESSAGES = [{"role": "user", "content": "hello"}]
GREEDY = {"temperature": 0, "max_tokens": 4, "ignore_eos": True}


def rules(treatment: Treatment) -> list[Any]:
    return [pytest.param(rule, id=rule.name) for rule in FIELD_RULES if rule.treatment is treatment]


def post(server: Server, rule: FieldRule, fields: dict[str, Any], **kwargs: Any) -> httpx.Response:
    if Endpoint.CHAT in rule.endpoints:
        url, body = f"{server.url}/v3/chat/completions", {"model": "tiny-llm", "messages": MESSAGES}
    else:
        url, body = f"{server.url}/v3/completions", {"model": "tiny-llm", "prompt": "hello"}
    return httpx.post(url, json={**body, **GREEDY, **fields}, timeout=60, **kwargs)


def test_every_rule_has_an_example() -> None:
    assert set(REFUSED_EXAMPLES) == {rule.name for rule in FIELD_RULES if rule.treatment is Treatment.REFUSED}
    assert set(IGNORED_EXAMPLES) == {rule.name for rule in FIELD_RULES if rule.treatment is Treatment.IGNORED}


@pytest.mark.parametrize("rule", rules(Treatment.REFUSED))
def test_refused_field_is_a_400_unless_neutral(server: Server, rule: FieldRule) -> None:
    refused, neutral = REFUSED_EXAMPLES[rule.name]
    response = post(server, rule, {rule.name: refused})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == rule.name and error["code"] == "unsupported_parameter"
    assert rule.name in error["message"]
    # Azure's contract: valid, but not supported by the model -> 422.
    assert post(server, rule, {rule.name: refused}, params={"api-version": "2024-05-01-preview"}).status_code == 422
    # Azure's extra-parameters: ignore drops what is unsupported.
    dropped = post(server, rule, {rule.name: refused}, headers={"extra-parameters": "ignore"})
    assert dropped.status_code == 200, dropped.text
    accepted = post(server, rule, {rule.name: neutral})
    assert accepted.status_code == 200, accepted.text
    assert post(server, rule, {rule.name: None}).status_code == 200  # null means not sent


@pytest.mark.parametrize("rule", rules(Treatment.IGNORED))
def test_ignored_field_leaves_the_output_unchanged(server: Server, rule: FieldRule) -> None:
    plain = post(server, rule, {})
    with_field = post(server, rule, {rule.name: IGNORED_EXAMPLES[rule.name]})
    assert with_field.status_code == 200, with_field.text
    assert with_field.json()["choices"] == plain.json()["choices"]


def test_mapped_repeat_penalty_is_repetition_penalty(server: Server) -> None:
    (rule,) = [rule for rule in FIELD_RULES if rule.name == "repeat_penalty"]
    sampling = {"temperature": 1.0, "seed": 8, "max_tokens": 30, "top_k": -1}
    as_llama = post(server, rule, {**sampling, "repeat_penalty": 1.6}).json()["choices"]
    as_ovms = post(server, rule, {**sampling, "repetition_penalty": 1.6}).json()["choices"]
    neutral = post(server, rule, {**sampling, "repetition_penalty": 1.0}).json()["choices"]
    assert as_llama == as_ovms != neutral
    conflict = post(server, rule, {"repeat_penalty": 1.6, "repetition_penalty": 1.2})
    assert conflict.status_code == 400 and conflict.json()["error"]["param"] == "repeat_penalty"


def test_mapped_n_predict_is_max_tokens(server: Server) -> None:
    (rule,) = [rule for rule in FIELD_RULES if rule.name == "n_predict"]
    response = post(server, rule, {"n_predict": 7, "max_tokens": None})
    assert response.json()["usage"]["completion_tokens"] == 7
    completion = httpx.post(
        f"{server.url}/v3/completions",
        json={"model": "tiny-llm", "prompt": "hello", "n_predict": 3, "ignore_eos": True},
        timeout=60,
    )
    assert completion.json()["usage"]["completion_tokens"] == 3


def test_repeat_last_n_is_accepted_when_every_penalty_is_off(server: Server) -> None:
    (rule,) = [rule for rule in FIELD_RULES if rule.name == "repeat_last_n"]
    off = {"repeat_last_n": 64, "repeat_penalty": 1.0, "presence_penalty": 0, "frequency_penalty": 0}
    assert post(server, rule, off).status_code == 200
    assert post(server, rule, {**off, "presence_penalty": 0.5}).status_code == 400


def test_use_beam_search_is_accepted_with_a_beam_width(server: Server) -> None:
    (rule,) = [rule for rule in FIELD_RULES if rule.name == "use_beam_search"]
    response = post(server, rule, {"use_beam_search": True, "best_of": 2, "n": 2})
    assert response.status_code == 200 and len(response.json()["choices"]) == 2


def test_extra_parameters_error_names_every_unknown_field(server: Server) -> None:
    (rule,) = [rule for rule in FIELD_RULES if rule.name == "user"]
    headers = {"extra-parameters": "error"}
    response = post(server, rule, {"foo": 1, "bar": 2, "user": "documented"}, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unknown_parameter" and "'bar', 'foo'" in error["message"]
    assert post(server, rule, {"user": "documented"}, headers=headers).status_code == 200
    for mode in ("pass-through", "ignore", ""):
        assert post(server, rule, {"foo": 1}, headers={"extra-parameters": mode}).status_code == 200
    bad = post(server, rule, {}, headers={"extra-parameters": "maybe"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "extra-parameters"
