"""What ovserve does with request fields it does not model: one table, applied before validation.

Clients written for OpenAI, OVMS, vLLM, llama.cpp (Jan), MindIE, Databricks or Azure AI Foundry
send fields of their own. Each one ovserve knows about has exactly one rule here:

- ``MAPPED``: another server's name for a field ovserve has (``repeat_penalty`` ->
  ``repetition_penalty``); the value is moved to ovserve's name.
- ``IGNORED``: accepted and dropped, because ignoring it cannot change the generated output
  (metadata such as ``user``, or a pure performance hint such as ``cache_prompt``).
- ``REFUSED``: accepted only with its neutral value (the one that changes nothing, such as an
  empty ``logit_bias``); any other value would change the output in a way the engine cannot
  honour, so the request is refused with a 400 naming the field (422 on Azure-style requests,
  whose contract says so for "valid, but not supported by the model").

Fields in no table and not modelled are "unknown": Azure's ``extra-parameters`` header decides
(``pass-through``, the default: accepted and logged; ``ignore``: dropped, refused fields too;
``error``: 400 naming them). ``docs/request-fields.md`` documents every field; a test keeps the
document and this table in step.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ovserve.errors import BadRequestError, UnsupportedParameterError
from ovserve.json_types import JsonObject, JsonValue

log = logging.getLogger(__name__)


class Treatment(enum.Enum):
    MAPPED = "mapped"
    IGNORED = "ignored"
    REFUSED = "refused"


class Endpoint(enum.Enum):
    CHAT = "chat"
    COMPLETIONS = "completions"


BOTH = frozenset(Endpoint)
CHAT_ONLY = frozenset({Endpoint.CHAT})
COMPLETIONS_ONLY = frozenset({Endpoint.COMPLETIONS})


class ExtraParameters(enum.Enum):
    """Azure AI Foundry's ``extra-parameters`` request header."""

    PASS_THROUGH = "pass-through"
    IGNORE = "ignore"
    ERROR = "error"


def _always(value: JsonValue, payload: JsonObject) -> bool:
    return True


def _same(value: Any, option: Any) -> bool:
    # bool is an int in Python: `true` must not pass for 1, nor `1` for true.
    if isinstance(value, bool) or isinstance(option, bool):
        return isinstance(value, bool) and isinstance(option, bool) and value == option
    return bool(value == option)


def _equals(*neutral: Any) -> Callable[[Any, JsonObject], bool]:
    def accepts(value: JsonValue, payload: JsonObject) -> bool:
        return any(_same(value, option) for option in neutral)

    return accepts


_EMPTY: tuple[Any, ...] = ({}, [], "", 0, False)


def _empty(value: JsonValue, payload: JsonObject) -> bool:
    return any(_same(value, option) for option in _EMPTY)


def _text_format(value: JsonValue, payload: JsonObject) -> bool:
    return isinstance(value, dict) and value.get("type") == "text"


def _text_modalities(value: JsonValue, payload: JsonObject) -> bool:
    return isinstance(value, list) and value == ["text"]


def _penalties_off(payload: JsonObject) -> bool:
    repetition = payload.get("repetition_penalty", payload.get("repeat_penalty"))
    others = (payload.get("presence_penalty"), payload.get("frequency_penalty"))
    return _same(repetition, 1) and all(value is None or _same(value, 0) for value in others)


def _whole_context_window(value: JsonValue, payload: JsonObject) -> bool:
    # llama.cpp penalises the last N tokens; the engine penalises the whole context (-1 in
    # llama.cpp). Any window is fine when the request switches every penalty off.
    return value == -1 or _penalties_off(payload)


def _beam_width_given(value: JsonValue, payload: JsonObject) -> bool:
    # OVMS: beam search is best_of > 1 (the beam width); use_beam_search alone has no width.
    best_of = payload.get("best_of")
    return value is False or (isinstance(best_of, int) and best_of > 1)


def _no_limit(value: Any) -> Any:
    # llama.cpp's n_predict: -1 means "until EOS or the context is full", ovserve's null.
    return None if value == -1 else value


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class FieldRule:
    name: str
    treatment: Treatment
    why: str
    # REFUSED: the neutral values, accepted (and then dropped unless ovserve models the field).
    accepts: Callable[[Any, JsonObject], bool] = _always
    maps_to: str | None = None
    convert: Callable[[Any], Any] = _identity
    endpoints: frozenset[Endpoint] = BOTH
    # Modelled fields with restricted values stay in the payload when accepted.
    modelled: bool = False


FIELD_RULES: tuple[FieldRule, ...] = (
    # -- OpenAI fields ovserve cannot honour -----------------------------------------------
    FieldRule("logit_bias", Treatment.REFUSED, "the engine has no logit bias", _empty),
    FieldRule(
        "top_logprobs",
        Treatment.REFUSED,
        "the engine returns only the chosen token's logprob, no alternatives",
        _equals(0),
        endpoints=CHAT_ONLY,
    ),
    FieldRule(
        "logprobs",
        Treatment.REFUSED,
        "the engine returns only the chosen token's logprob: logprobs must be 0",
        _equals(0),
        endpoints=COMPLETIONS_ONLY,
        modelled=True,
    ),
    FieldRule("functions", Treatment.REFUSED, "deprecated by OpenAI; send 'tools'", _empty, endpoints=CHAT_ONLY),
    FieldRule(
        "function_call",
        Treatment.REFUSED,
        "deprecated by OpenAI; send 'tools'",
        _equals("none", "auto"),
        endpoints=CHAT_ONLY,
    ),
    FieldRule(
        "response_format",
        Treatment.REFUSED,
        "structured output is supported on /chat/completions; only {'type': 'text'} here",
        _text_format,
        endpoints=COMPLETIONS_ONLY,
    ),
    FieldRule("modalities", Treatment.REFUSED, "only text output exists", _text_modalities, endpoints=CHAT_ONLY),
    FieldRule("audio", Treatment.REFUSED, "only text output exists", _empty, endpoints=CHAT_ONLY),
    FieldRule(
        "verbosity", Treatment.REFUSED, "an OpenAI model hint with no engine equivalent", _empty, endpoints=CHAT_ONLY
    ),
    FieldRule("web_search_options", Treatment.REFUSED, "ovserve has no web search", _empty, endpoints=CHAT_ONLY),
    FieldRule("moderation", Treatment.REFUSED, "ovserve runs no moderation", _empty, endpoints=CHAT_ONLY),
    FieldRule(
        "suffix",
        Treatment.REFUSED,
        "text insertion (OpenAI) or appending (Databricks) is not supported",
        _empty,
        endpoints=COMPLETIONS_ONLY,
    ),
    FieldRule("user", Treatment.IGNORED, "metadata about the caller"),
    FieldRule("safety_identifier", Treatment.IGNORED, "metadata about the caller"),
    FieldRule("metadata", Treatment.IGNORED, "metadata stored with the completion; ovserve stores nothing"),
    FieldRule("store", Treatment.IGNORED, "ovserve stores nothing; the completion is the same"),
    FieldRule("service_tier", Treatment.IGNORED, "billing and latency class; ovserve has one tier"),
    FieldRule("prompt_cache_key", Treatment.IGNORED, "a caching hint; the output is the same"),
    FieldRule("prompt_cache_retention", Treatment.IGNORED, "a caching hint; the output is the same"),
    FieldRule("prompt_cache_options", Treatment.IGNORED, "a caching hint; the output is the same"),
    FieldRule("prediction", Treatment.IGNORED, "predicted outputs only speed OpenAI up; the output is the same"),
    # -- vLLM fields (OVMS lists them as unsupported) -------------------------------------
    FieldRule("use_beam_search", Treatment.REFUSED, "send best_of > 1 (the beam width)", _beam_width_given),
    FieldRule("early_stopping", Treatment.REFUSED, "beam stop criteria are not configurable", _equals(False)),
    FieldRule("min_tokens", Treatment.REFUSED, "a minimum length is not supported", _equals(0)),
    FieldRule("prompt_logprobs", Treatment.REFUSED, "the engine gives no prompt logprobs", _equals(0)),
    FieldRule("detokenize", Treatment.REFUSED, "ovserve always returns text", _equals(True)),
    FieldRule("spaces_between_special_tokens", Treatment.REFUSED, "the detokenizer is not configurable", _equals(True)),
    FieldRule("logits_processors", Treatment.REFUSED, "no custom logits processors", _empty),
    FieldRule("truncate_prompt_tokens", Treatment.REFUSED, "prompts are never truncated; too long is a 400", _empty),
    # -- llama.cpp (Jan) -------------------------------------------------------------------
    FieldRule("repeat_penalty", Treatment.MAPPED, "llama.cpp's name", maps_to="repetition_penalty"),
    FieldRule(
        "n_predict",
        Treatment.MAPPED,
        "llama.cpp's name; -1 means no limit",
        maps_to="max_tokens",
        convert=_no_limit,
    ),
    FieldRule(
        "repeat_last_n",
        Treatment.REFUSED,
        "penalties apply to the whole context (-1); other windows only when every penalty is off",
        _whole_context_window,
    ),
    FieldRule("typical_p", Treatment.REFUSED, "locally typical sampling is not supported", _equals(1)),
    FieldRule("tfs_z", Treatment.REFUSED, "tail-free sampling is not supported", _equals(1)),
    FieldRule("mirostat", Treatment.REFUSED, "Mirostat sampling is not supported", _equals(0)),
    FieldRule("mirostat_tau", Treatment.IGNORED, "used only with mirostat != 0, which is refused"),
    FieldRule("mirostat_eta", Treatment.IGNORED, "used only with mirostat != 0, which is refused"),
    FieldRule("dynatemp_range", Treatment.REFUSED, "dynamic temperature is not supported", _equals(0)),
    FieldRule("dynatemp_exponent", Treatment.IGNORED, "used only with dynatemp_range > 0, which is refused"),
    FieldRule("n_probs", Treatment.REFUSED, "the engine gives no alternative tokens", _equals(0)),
    FieldRule("min_keep", Treatment.REFUSED, "the samplers' minimum is not configurable", _equals(0, 1)),
    FieldRule("cache_prompt", Treatment.IGNORED, "KV reuse is the server's prefix caching; the output is the same"),
    FieldRule("n_keep", Treatment.IGNORED, "used only on context shift; ovserve refuses overflowing requests"),
    FieldRule("id_slot", Treatment.IGNORED, "a llama.cpp scheduling hint"),
    # -- Databricks -----------------------------------------------------------------------
    FieldRule("error_behavior", Treatment.REFUSED, "context overflow is always an error", _equals("error")),
    FieldRule(
        "use_raw_prompt",
        Treatment.IGNORED,
        "/completions prompts are always raw in ovserve",
        endpoints=COMPLETIONS_ONLY,
    ),
)

RULES: dict[str, FieldRule] = {rule.name: rule for rule in FIELD_RULES}


def parse_extra_parameters(header: str | None) -> ExtraParameters:
    if header is None or header.strip() == "":
        return ExtraParameters.PASS_THROUGH
    try:
        return ExtraParameters(header.strip().lower())
    except ValueError:
        allowed = ", ".join(mode.value for mode in ExtraParameters)
        raise BadRequestError(
            f"the 'extra-parameters' header must be one of {allowed}, got '{header}'",
            param="extra-parameters",
            code="invalid_header",
        ) from None


def apply_field_policy(
    payload: JsonObject, endpoint: Endpoint, modelled: frozenset[str], mode: ExtraParameters
) -> tuple[JsonObject, list[str]]:
    """Apply :data:`FIELD_RULES` and the ``extra-parameters`` mode to a raw request body.

    Returns the body to validate and the names of the fields that were dropped.
    """
    result: JsonObject = {}
    dropped: list[str] = []
    refused: list[tuple[FieldRule, Any]] = []
    unknown: list[str] = []
    for name, value in payload.items():
        rule = RULES.get(name)
        if rule is None or endpoint not in rule.endpoints:
            if name not in modelled and name not in result:
                unknown.append(name)
            if name not in result:
                result[name] = value
            continue
        if value is None:  # null means "not sent"
            dropped.append(name)
            continue
        if rule.treatment is Treatment.MAPPED:
            assert rule.maps_to is not None
            converted = rule.convert(value)
            if payload.get(rule.maps_to) is not None and payload[rule.maps_to] != converted:
                raise BadRequestError(
                    f"'{name}' and '{rule.maps_to}' are the same setting; send one of them",
                    param=name,
                )
            result[rule.maps_to] = converted
        elif rule.treatment is Treatment.IGNORED:
            dropped.append(name)
        elif rule.accepts(value, payload):
            if rule.modelled:
                result[name] = value
            else:
                dropped.append(name)
        elif mode is ExtraParameters.IGNORE:
            dropped.append(name)
        else:
            refused.append((rule, value))
    if refused:
        rule, value = refused[0]
        raise UnsupportedParameterError(
            f"'{rule.name}' is not supported with value {_short(value)}: {rule.why}", param=rule.name
        )
    if unknown and mode is ExtraParameters.ERROR:
        names = ", ".join(f"'{name}'" for name in sorted(unknown))
        raise BadRequestError(
            f"unknown parameters {names} (the 'extra-parameters: error' header refuses them)",
            param=sorted(unknown)[0],
            code="unknown_parameter",
        )
    if unknown and mode is ExtraParameters.IGNORE:
        for name in unknown:
            result.pop(name, None)
        dropped.extend(unknown)
    return result, sorted(dropped)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
