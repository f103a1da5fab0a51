from __future__ import annotations

from ovserve.parsers import hermes
from tests.unit.parsers.helpers import assert_same_everywhere, run

FMT = hermes.FORMAT


def test_single_call() -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
    assert_same_everywhere(FMT, text, "", [("get_weather", {"city": "Paris", "unit": "c"})])


def test_content_then_two_calls() -> None:
    text = (
        "Let me check both.\n"
        '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>'
    )
    assert_same_everywhere(FMT, text, "Let me check both.", [("a", {"x": 1}), ("b", {})])


def test_arguments_as_json_string_are_normalised() -> None:
    text = '<tool_call>{"name": "f", "arguments": "{\\"q\\": \\"x\\"}"}</tool_call>'
    assert_same_everywhere(FMT, text, "", [("f", {"q": "x"})])


def test_malformed_json_falls_back_to_content() -> None:
    text = '<tool_call>\n{"name": "f", "arguments": {oops}\n</tool_call> done'
    assert_same_everywhere(FMT, text, text, [])


def test_unterminated_call_is_content() -> None:
    text = 'ok <tool_call>{"name": "f", "arguments": {}}'
    assert_same_everywhere(FMT, text, text, [])


def test_plain_text_with_angle_brackets_passes_through() -> None:
    text = "a < b and <tool> is not a call"
    assert_same_everywhere(FMT, text, text, [])


def test_call_ids_are_unique() -> None:
    extractor_calls = run(FMT, ['<tool_call>{"name": "a", "arguments": {}}</tool_call>'] * 2)[1]
    assert len(extractor_calls) == 2


def test_the_end_marker_inside_an_argument_string_is_text() -> None:
    text = '<tool_call>\n{"name": "note", "arguments": {"text": "a </tool_call> \\"b\\""}}\n</tool_call> after'
    assert_same_everywhere(FMT, text, " after", [("note", {"text": 'a </tool_call> "b"'})])


def test_whitespace_around_calls_is_layout_not_content() -> None:
    call = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>'
    assert_same_everywhere(FMT, "\n" + call + "\n\n" + call + "\n", "", [("a", {}), ("a", {})])


def test_whitespace_before_text_after_a_call_is_kept() -> None:
    call = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    assert_same_everywhere(FMT, call + "\n\nDone.", "\n\nDone.", [("a", {})])


def test_whitespace_alone_without_calls_is_content() -> None:
    assert_same_everywhere(FMT, " \n ", " \n ", [])
