"""apply_field_policy on raw bodies: mapping, dropping, refusing, and the extra-parameters modes."""

from __future__ import annotations

import pytest

from ovserve.api.field_policy import Endpoint, ExtraParameters, apply_field_policy, parse_extra_parameters
from ovserve.errors import AZURE, BadRequestError, UnsupportedParameterError

MODELLED = frozenset({"model", "messages", "max_tokens", "repetition_penalty", "tool_choice"})
PASS = ExtraParameters.PASS_THROUGH


def test_mapped_fields_move_to_ovserve_names() -> None:
    body, dropped = apply_field_policy({"repeat_penalty": 1.2, "n_predict": -1}, Endpoint.CHAT, MODELLED, PASS)
    assert body == {"repetition_penalty": 1.2, "max_tokens": None}
    assert dropped == []


def test_ignored_and_neutral_refused_fields_are_dropped_and_reported() -> None:
    body, dropped = apply_field_policy(
        {"model": "m", "user": "u", "logit_bias": {}, "tool_choice": "auto"}, Endpoint.CHAT, MODELLED, PASS
    )
    assert body == {"model": "m", "tool_choice": "auto"}  # tool_choice is modelled: it stays
    assert dropped == ["logit_bias", "user"]


def test_refused_values_raise_unsupported_parameter_which_azure_sees_as_422() -> None:
    with pytest.raises(UnsupportedParameterError) as excinfo:
        apply_field_policy({"mirostat": 2}, Endpoint.CHAT, MODELLED, PASS)
    assert excinfo.value.param == "mirostat"
    assert excinfo.value.status_for(None) == 400 and excinfo.value.status_for(AZURE) == 422


def test_bools_are_not_numbers_for_neutral_values() -> None:
    with pytest.raises(UnsupportedParameterError):
        apply_field_policy({"mirostat": False}, Endpoint.CHAT, MODELLED, PASS)
    with pytest.raises(UnsupportedParameterError):
        apply_field_policy({"detokenize": 1}, Endpoint.CHAT, MODELLED, PASS)


def test_rules_apply_only_to_their_endpoint() -> None:
    body, _ = apply_field_policy({"suffix": "x"}, Endpoint.CHAT, MODELLED, PASS)
    assert body == {"suffix": "x"}  # unknown on chat: passed through to be logged as ignored
    with pytest.raises(UnsupportedParameterError):
        apply_field_policy({"suffix": "x"}, Endpoint.COMPLETIONS, MODELLED, PASS)


def test_extra_parameters_modes() -> None:
    raw = {"model": "m", "foo": 1, "logit_bias": {"1": 2}}
    body, dropped = apply_field_policy(raw, Endpoint.CHAT, MODELLED, ExtraParameters.IGNORE)
    assert body == {"model": "m"} and dropped == ["foo", "logit_bias"]
    with pytest.raises(BadRequestError) as excinfo:
        apply_field_policy({"model": "m", "foo": 1}, Endpoint.CHAT, MODELLED, ExtraParameters.ERROR)
    assert excinfo.value.code == "unknown_parameter"
    assert parse_extra_parameters(None) is PASS and parse_extra_parameters(" Error ") is ExtraParameters.ERROR
    with pytest.raises(BadRequestError):
        parse_extra_parameters("sometimes")


def test_a_mapped_field_conflicting_with_its_target_is_refused() -> None:
    with pytest.raises(BadRequestError, match="same setting"):
        apply_field_policy({"repeat_penalty": 1.2, "repetition_penalty": 1.1}, Endpoint.CHAT, MODELLED, PASS)
    body, _ = apply_field_policy({"repeat_penalty": 1.2, "repetition_penalty": 1.2}, Endpoint.CHAT, MODELLED, PASS)
    assert body == {"repetition_penalty": 1.2}
