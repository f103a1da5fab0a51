"""DeepSeek-V3.1 tool calls, in the model's own markers (fullwidth ｜, ▁)."""

from __future__ import annotations

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from tests.unit.parsers.conformance import assert_parses
from tests.unit.parsers.forced import call_pattern

FMT = TOOL_PARSERS["deepseek_v31"]
R1 = REASONING_PARSERS["deepseek_r1"]
BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, SEP, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"


def call(name: str, arguments: str) -> str:
    return f"{CALL}{name}{SEP}{arguments}{CALL_END}"


def test_single_call() -> None:
    text = BEGIN + call("get_weather", '{"location": "Tokyo"}') + END
    assert_parses(text, calls=[("get_weather", {"location": "Tokyo"})], tool_format=FMT)


def test_parallel_calls_keep_their_order() -> None:
    text = BEGIN + call("get_weather", '{"location": "Tokyo"}') + call("get_time", '{"zone": "JST"}') + END
    assert_parses(text, calls=[("get_weather", {"location": "Tokyo"}), ("get_time", {"zone": "JST"})], tool_format=FMT)


def test_whitespace_between_calls_is_allowed() -> None:
    text = BEGIN + "\n" + call("a", "{}") + "\n" + call("b", '{"x": 1}') + "\n" + END
    assert_parses(text, calls=[("a", {}), ("b", {"x": 1})], tool_format=FMT)


def test_call_after_text() -> None:
    text = "Let me look that up." + BEGIN + call("get_weather", '{"location": "Paris"}') + END
    assert_parses(text, content="Let me look that up.", calls=[("get_weather", {"location": "Paris"})], tool_format=FMT)


def test_text_after_the_section_is_content() -> None:
    text = BEGIN + call("get_weather", '{"location": "Paris"}') + END + "Checking now."
    assert_parses(text, content="Checking now.", calls=[("get_weather", {"location": "Paris"})], tool_format=FMT)


def test_nested_unicode_and_escaped_arguments() -> None:
    arguments = '{"q": "say \\"hi\\"", "tags": ["a", {"b": [1, 2.5, null, true]}], "city": "Zürich 東京"}'
    text = f"{BEGIN}{call('search', arguments)}{END}"
    expected = {"q": 'say "hi"', "tags": ["a", {"b": [1, 2.5, None, True]}], "city": "Zürich 東京"}
    assert_parses(text, calls=[("search", expected)], tool_format=FMT)


def test_a_marker_inside_an_argument_string_is_text() -> None:
    text = BEGIN + call("note", '{"text": "ends with <｜tool▁call▁end｜>"}') + END
    assert_parses(text, calls=[("note", {"text": "ends with <｜tool▁call▁end｜>"})], tool_format=FMT)


def test_empty_arguments() -> None:
    assert_parses(f"{BEGIN}{call('get_time', '{}')}{END}", calls=[("get_time", {})], tool_format=FMT)


def test_thinking_mode_reasoning_then_call() -> None:
    # The thinking template ends the prompt with <think>: the output starts inside the reasoning.
    text = "The user wants the weather in Tokyo.</think>" + BEGIN + call("get_weather", '{"location": "Tokyo"}') + END
    assert_parses(
        text,
        reasoning="The user wants the weather in Tokyo.",
        calls=[("get_weather", {"location": "Tokyo"})],
        tool_format=FMT,
        reasoning_format=R1,
        starts_in_reasoning=True,
    )


def test_truncated_section_is_content() -> None:
    text = f'Sure.{BEGIN}{CALL}get_weather{SEP}{{"location": "To'
    assert_parses(text, content=text, tool_format=FMT)


def test_unterminated_section_is_content() -> None:
    text = BEGIN + call("get_weather", '{"location": "Tokyo"}')
    assert_parses(text, content=text, tool_format=FMT)


def test_arguments_that_are_not_json_are_content() -> None:
    text = f"{BEGIN}{call('get_weather', '{location: Tokyo}')}{END}"
    assert_parses(text, content=text, tool_format=FMT)


def test_call_without_separator_is_content() -> None:
    text = f'{BEGIN}{CALL}get_weather{{"location": "Tokyo"}}{CALL_END}{END}'
    assert_parses(text, content=text, tool_format=FMT)


def test_arguments_that_are_not_an_object_are_content() -> None:
    text = f"{BEGIN}{call('get_weather', '[1, 2]')}{END}"
    assert_parses(text, content=text, tool_format=FMT)


def test_all_markers_are_declared_special() -> None:
    assert set(FMT.special_tokens) == {BEGIN, END, CALL, SEP, CALL_END}


def test_forced_call_is_one_call_the_parser_reads() -> None:
    text = BEGIN + call("get_weather", '{"city":"Tokyo","days":3}') + END
    pattern = call_pattern(FMT, "get_weather")
    assert pattern.fullmatch(text)
    assert not pattern.fullmatch(text.replace("get_weather", "get_time"))
    assert not pattern.fullmatch(BEGIN + call("get_weather", '{"days":3}') + END)  # city is required
    assert_parses(text, calls=[("get_weather", {"city": "Tokyo", "days": 3})], tool_format=FMT)
