"""MiniCPM5 XML-element tool calls, through the conformance oracle (whole and streamed)."""

from __future__ import annotations

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from tests.unit.parsers.conformance import assert_parses

FMT = TOOL_PARSERS["minicpm5"]
THINK = REASONING_PARSERS["minicpm5"]
TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "exact": {"type": "boolean"}},
        "required": ["city"],
    },
    "search": {"type": "object", "properties": {"filters": {"type": "object"}, "tags": {"type": "array"}}},
    "ping": {"type": "object", "properties": {}},
}


def call(name: str, **parameters: str) -> str:
    body = "".join(f'<param name="{key}">{value}</param>' for key, value in parameters.items())
    return f'<function name="{name}">{body}</function>'


def test_single_call_types_values_by_the_schema() -> None:
    assert_parses(
        call("get_weather", city="北京", days="2", exact="true"),
        calls=[("get_weather", {"city": "北京", "days": 2, "exact": True})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_parallel_calls_with_text_around() -> None:
    text = "Head\n" + call("get_weather", city="Paris") + "\nTXT\n" + call("search", tags="[7, 8]") + "\nTail"
    assert_parses(
        text,
        content="Head\n\nTXT\n\nTail",
        calls=[("get_weather", {"city": "Paris"}), ("search", {"tags": [7, 8]})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_indented_layout_and_single_quotes() -> None:
    text = (
        "<function name='get_weather'>\n"
        "  <param name='city'>\n    Paris\n  </param>\n"
        '  <param name="days">3</param>\n'
        "</function>"
    )
    assert_parses(text, calls=[("get_weather", {"city": "Paris", "days": 3})], tool_format=FMT, tools=TOOLS)


def test_cdata_keeps_multiline_text() -> None:
    text = call("get_weather", city="<![CDATA[  北\n京 </param> ]]>")
    assert_parses(text, calls=[("get_weather", {"city": "  北\n京 </param> "})], tool_format=FMT, tools=TOOLS)


def test_end_marker_inside_a_value_is_its_text() -> None:
    value = "function f() {} </function> in a doc"
    text = call("get_weather", city=value) + call("ping")
    assert_parses(text, calls=[("get_weather", {"city": value}), ("ping", {})], tool_format=FMT, tools=TOOLS)


def test_nested_json_arrays_unicode_and_escaped_quotes() -> None:
    text = call("search", filters='{"q": "say \\"hi\\"", "near": {"lat": 1.5}}', tags="['日本', None]")
    expected = {"filters": {"q": 'say "hi"', "near": {"lat": 1.5}}, "tags": ["日本", None]}
    assert_parses(text, calls=[("search", expected)], tool_format=FMT, tools=TOOLS)


def test_empty_arguments() -> None:
    assert_parses(call("ping"), calls=[("ping", {})], tool_format=FMT, tools=TOOLS)


def test_reasoning_then_call() -> None:
    text = "<think>\nWeather in Paris.\n</think>\n\n" + call("get_weather", city="Paris")
    assert_parses(
        text,
        reasoning="\nWeather in Paris.\n",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=FMT,
        reasoning_format=THINK,
        tools=TOOLS,
    )


def test_truncated_output_is_content() -> None:
    text = 'OK <function name="get_weather"><param name="city">Par'
    assert_parses(text, content=text, tool_format=FMT, tools=TOOLS)


def test_malformed_calls_are_content() -> None:
    malformed = [
        '<function name="get_weather"><param name="city">Paris</function>',  # no </param>
        '<function name="get_weather"><param>Paris</param></function>',  # no name
        "<function name=get_weather></function>",  # unquoted
        '<function name=""></function>',  # empty name
        '<function name="get_weather">city=Paris</function>',  # not a param
    ]
    for text in malformed:
        assert_parses("Hi " + text, content="Hi " + text, tool_format=FMT, tools=TOOLS)


def test_other_function_tags_are_text() -> None:
    text = "The <functionality> of <function=x> tags"
    assert_parses(text, content=text, tool_format=FMT, tools=TOOLS)
