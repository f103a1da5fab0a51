"""Pythonic tool calls: bare (Llama 3.2 / Llama 4), after <|python_start|> (Llama 4), between
<|tool_call_start|> and <|tool_call_end|> (LFM2); read with ast, never evaluated."""

from __future__ import annotations

import pytest

from ovserve.errors import BadRequestError
from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS, pythonic
from tests.unit.parsers.conformance import assert_parses
from tests.unit.parsers.forced import WEATHER, call_pattern

FMT = TOOL_PARSERS["pythonic"]
START, END = "<|tool_call_start|>", "<|tool_call_end|>"


def test_names_share_one_format() -> None:
    assert TOOL_PARSERS["lfm2"] is FMT
    assert TOOL_PARSERS["llama4_pythonic"] is FMT


def test_bare_single_call() -> None:
    assert_parses(
        '[get_weather(city="San Francisco", days=3)]',
        calls=[("get_weather", {"city": "San Francisco", "days": 3})],
        tool_format=FMT,
    )


def test_bare_parallel_calls_keep_their_order() -> None:
    text = "[get_weather(city='SF'), get_time(zone='PST'), get_weather(city='NYC')]"
    calls = [("get_weather", {"city": "SF"}), ("get_time", {"zone": "PST"}), ("get_weather", {"city": "NYC"})]
    assert_parses(text, calls=calls, tool_format=FMT)


def test_trailing_newline_after_a_bare_list() -> None:
    assert_parses('[ping(host="a")]\n', calls=[("ping", {"host": "a"})], tool_format=FMT)


def test_llama4_python_tags() -> None:
    text = '<|python_start|>[get_weather(city="Paris"), get_time()]<|python_end|>'
    assert_parses(text, calls=[("get_weather", {"city": "Paris"}), ("get_time", {})], tool_format=FMT)


def test_lfm2_call_after_text() -> None:
    text = "Let me check." + START + '[get_weather(city="Paris")]' + END
    assert_parses(text, content="Let me check.", calls=[("get_weather", {"city": "Paris"})], tool_format=FMT)


def test_lfm2_text_after_call() -> None:
    text = START + '[get_candidate_status(candidate_id="12345")]' + END + "Checking the status now."
    assert_parses(
        text,
        content="Checking the status now.",
        calls=[("get_candidate_status", {"candidate_id": "12345"})],
        tool_format=FMT,
    )


def test_literal_values_become_json() -> None:
    text = (
        "[configure(name='x', count=-3, ratio=2.5e-1, on=True, off=False, nothing=None, "
        "items=[1, 'two', (3, 4)], options={'nested': {'deep': [None]}}, plus=+7)]"
    )
    expected = {
        "name": "x",
        "count": -3,
        "ratio": 0.25,
        "on": True,
        "off": False,
        "nothing": None,
        "items": [1, "two", [3, 4]],
        "options": {"nested": {"deep": [None]}},
        "plus": 7,
    }
    assert_parses(text, calls=[("configure", expected)], tool_format=FMT)


def test_json_literals_are_read_as_python_constants() -> None:
    text = '[set_flags(a=true, b=false, c=null, d={"k": [true, null]})]'
    assert_parses(
        text, calls=[("set_flags", {"a": True, "b": False, "c": None, "d": {"k": [True, None]}})], tool_format=FMT
    )


def test_unicode_and_escaped_quotes_in_strings() -> None:
    text = r"""[send(text="say \"hi\" \u00e9", city='Zürich 東京', emoji="\ud83d\ude00", it='it\'s')]"""
    expected = {"text": 'say "hi" é', "city": "Zürich 東京", "emoji": "😀", "it": "it's"}
    assert_parses(text, calls=[("send", expected)], tool_format=FMT)


def test_empty_arguments() -> None:
    assert_parses("[get_time()]", calls=[("get_time", {})], tool_format=FMT)


def test_reasoning_then_call() -> None:
    text = "<think>The user wants Paris.</think>\n" + START + '[get_weather(city="Paris")]' + END
    assert_parses(
        text,
        reasoning="The user wants Paris.",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=FMT,
        reasoning_format=REASONING_PARSERS["qwen3"],
    )


def test_answer_that_starts_with_a_bracket_is_content() -> None:
    text = "[1] Paris is the capital of France."
    assert_parses(text, content=text, tool_format=FMT)


def test_bare_list_after_text_is_not_a_call() -> None:
    text = 'You could call [get_weather(city="Paris")] yourself.'
    assert_parses(text, content=text, tool_format=FMT)


def test_text_after_a_bare_list_makes_it_content() -> None:
    text = '[get_weather(city="Paris")] and then some prose'
    assert_parses(text, content=text, tool_format=FMT)


def test_truncated_bare_call_is_content() -> None:
    text = '[get_weather(city="San Fr'
    assert_parses(text, content=text, tool_format=FMT)


def test_truncated_tagged_call_is_content() -> None:
    text = "Sure. " + START + '[get_weather(city="Paris")'
    assert_parses(text, content=text, tool_format=FMT)


@pytest.mark.parametrize(
    "text",
    [
        '[get_weather("Paris")]',  # positional: no parameter name
        "[get_weather(**{'city': 'Paris'})]",
        '[get_weather(city=__import__("os").getcwd())]',  # never evaluated
        "[get_weather(city=x)]",
        "[get_weather(days=1 + 2)]",
        "[tools.get_weather(city='Paris')]",
        "[get_weather(city='Paris'), 42]",
        "[get_weather(city={1: 'a'})]",
        "[get_weather(big=1e999)]",
        "[get_weather(city='\\ud83d')]",  # a lone surrogate is no JSON text
        "[]",
        "[get_weather(city='Paris')",
    ],
)
def test_malformed_calls_are_content(text: str) -> None:
    assert_parses(text, content=text, tool_format=FMT)


def test_markers_are_declared_special() -> None:
    assert {START, END, "<|python_start|>", "<|python_end|>"} <= set(FMT.special_tokens)


def test_forced_call_is_one_call_the_parser_reads() -> None:
    pattern = call_pattern(FMT, "get_weather")
    for text, arguments in [
        ('[get_weather(city="Oslo")]', {"city": "Oslo"}),
        ('[get_weather(city="Oslo", days=3)]', {"city": "Oslo", "days": 3}),
        ('[get_weather(city="Oslo", units="f")]', {"city": "Oslo", "units": "f"}),
        ('[get_weather(city="O\\"slo", days=-2, units="c")]', {"city": 'O"slo', "days": -2, "units": "c"}),
    ]:
        assert pattern.fullmatch(text), text
        assert_parses(text, calls=[("get_weather", arguments)], tool_format=FMT)
    assert not pattern.fullmatch("[get_weather(days=3)]")  # city is required
    assert not pattern.fullmatch('[get_weather(days=3, city="Oslo")]')  # declared order
    assert not pattern.fullmatch('[get_weather(city="a\\/b")]')  # Python would keep the backslash


def test_forced_call_with_only_optional_parameters() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}}
    pattern = call_pattern(FMT, "flags", schema)
    for text in ["[flags()]", "[flags(a=true)]", "[flags(b=null)]", "[flags(a=false, b=null)]"]:
        assert pattern.fullmatch(text), text
    assert not pattern.fullmatch("[flags(, b=null)]")
    assert_parses("[flags(a=false, b=null)]", calls=[("flags", {"a": False, "b": None})], tool_format=FMT)


def test_forced_call_without_parameters() -> None:
    assert call_pattern(FMT, "get_time", {"type": "object", "properties": {}}).fullmatch("[get_time()]")


def test_forced_values_leave_out_the_json_only_escape() -> None:
    # If outlines-core changes how it writes string escapes, the replacement must follow.
    regex = call_pattern(FMT, "get_weather", WEATHER).pattern
    assert pythonic.PYTHON_STRING_ESCAPES in regex
    assert pythonic.JSON_STRING_ESCAPES not in regex


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("get-weather", WEATHER),
        ("class", WEATHER),
        ("get_weather", {"type": "object", "properties": {"from": {"type": "string"}}}),
        ("get_weather", {"type": "object", "properties": {"user-id": {"type": "string"}}}),
        ("get_weather", {"anyOf": [WEATHER]}),
    ],
)
def test_forced_calls_that_python_cannot_write_are_refused(name: str, parameters: dict[str, object]) -> None:
    with pytest.raises(BadRequestError, match="pythonic"):
        call_pattern(FMT, name, parameters)
