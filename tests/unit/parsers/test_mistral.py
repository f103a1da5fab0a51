from __future__ import annotations

from ovserve.parsers import mistral
from tests.unit.parsers.helpers import assert_same_everywhere

FMT = mistral.FORMAT


def test_list_format() -> None:
    text = '[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": "z"}}]'
    assert_same_everywhere(FMT, text, "", [("a", {"x": 1}), ("b", {"y": "z"})])


def test_name_args_format() -> None:
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}'
    assert_same_everywhere(FMT, text, "", [("get_weather", {"city": "Paris"}), ("get_time", {})])


def test_content_before_the_calls() -> None:
    text = 'Sure.[TOOL_CALLS][{"name": "a", "arguments": {}}]'
    assert_same_everywhere(FMT, text, "Sure.", [("a", {})])


def test_malformed_falls_back_to_content() -> None:
    text = "[TOOL_CALLS][{'name': 'a'}]"
    assert_same_everywhere(FMT, text, text, [])


def test_call_ids_are_nine_alphanumerics_as_mistral_templates_demand() -> None:
    from ovserve.core.output import parse_text
    from ovserve.parsers import TOOL_PARSERS

    for name in ("mistral", "devstral"):
        parsed = parse_text('[TOOL_CALLS]f[ARGS]{"a": 1}', tool_format=TOOL_PARSERS[name], reasoning_format=None)
        (call,) = parsed["tool_calls"]  # type: ignore[misc]
        assert len(call["id"]) == 9 and call["id"].isalnum(), call
