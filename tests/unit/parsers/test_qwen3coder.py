"""Qwen3-Coder / Qwen3.5 XML tool calls, through the conformance oracle (whole and streamed)."""

from __future__ import annotations

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from tests.unit.parsers.conformance import assert_parses

FMT = TOOL_PARSERS["qwen3coder"]
THINK = REASONING_PARSERS["qwen3"]
TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "note": {"type": ["string", "null"]},
        },
        "required": ["city"],
    },
    "write_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
    "search": {
        "type": "object",
        "properties": {"filters": {"type": "object"}, "tags": {"type": "array"}, "limit": {"type": "number"}},
    },
    "ping": {"type": "object", "properties": {}},
}


def call(name: str, **parameters: str) -> str:
    """A call as the Qwen3-Coder template writes it (values already as text)."""
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_single_call_types_values_by_the_schema() -> None:
    text = call("get_weather", city="Paris", days="3", metric="true")
    assert_parses(
        text,
        calls=[("get_weather", {"city": "Paris", "days": 3, "metric": True})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_parallel_calls_keep_their_order() -> None:
    text = call("get_weather", city="Paris") + "\n" + call("get_weather", city="Tokyo", days="2")
    assert_parses(
        text,
        calls=[("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo", "days": 2})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_call_after_text() -> None:
    text = "Let me look that up.\n\n" + call("get_weather", city="Paris")
    assert_parses(
        text,
        content="Let me look that up.",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_text_after_call() -> None:
    text = call("get_weather", city="Paris") + "\nI asked for the weather."
    assert_parses(
        text,
        content="\nI asked for the weather.",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_nested_json_arrays_unicode_and_escaped_quotes() -> None:
    text = call(
        "search",
        filters='{"city": "Zürich \\"old town\\"", "range": {"from": 1, "to": [2, 3]}}',
        tags='["café", "日本", "a<b"]',
        limit="2.5",
    )
    expected = {
        "filters": {"city": 'Zürich "old town"', "range": {"from": 1, "to": [2, 3]}},
        "tags": ["café", "日本", "a<b"],
        "limit": 2.5,
    }
    assert_parses(text, calls=[("search", expected)], tool_format=FMT, tools=TOOLS)


def test_string_values_are_text_as_written() -> None:
    code = 'def f(x):\n    return x < 2 and "</parameter>" != x\n'
    text = call("write_file", path="a.py", content=code)
    assert_parses(
        text,
        calls=[("write_file", {"path": "a.py", "content": code})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_string_property_keeps_numbers_and_null_as_text() -> None:
    text = call("write_file", path="123", content="null")
    assert_parses(
        text,
        calls=[("write_file", {"path": "123", "content": "null"})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_python_literals_from_qwen35_templates() -> None:
    # Qwen3.5's template renders scalars with "| string": True, None.
    text = call("get_weather", city="Paris", metric="True", note="None")
    assert_parses(
        text,
        calls=[("get_weather", {"city": "Paris", "metric": True, "note": None})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_value_that_does_not_decode_stays_text() -> None:
    text = call("get_weather", city="Paris", days="three")
    assert_parses(
        text,
        calls=[("get_weather", {"city": "Paris", "days": "three"})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_unknown_tool_values_are_json_or_text() -> None:
    text = call("other", n="7", flag="false", word="hello", obj='{"a": 1}')
    assert_parses(
        text,
        calls=[("other", {"n": 7, "flag": False, "word": "hello", "obj": {"a": 1}})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_empty_arguments() -> None:
    assert_parses(call("ping"), calls=[("ping", {})], tool_format=FMT, tools=TOOLS)


def test_reasoning_then_call() -> None:
    text = "<think>\nThe user wants the weather; I should call the tool.\n</think>\n\n" + call(
        "get_weather", city="Paris"
    )
    assert_parses(
        text,
        reasoning="\nThe user wants the weather; I should call the tool.\n",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=FMT,
        reasoning_format=THINK,
        tools=TOOLS,
    )


def test_reasoning_opened_by_the_prompt_then_call() -> None:
    text = "Paris it is.\n</think>\n\n" + call("get_weather", city="Paris")
    assert_parses(
        text,
        reasoning="Paris it is.\n",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=FMT,
        reasoning_format=THINK,
        tools=TOOLS,
        starts_in_reasoning=True,
    )


def test_truncated_output_is_content() -> None:
    text = "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"
    assert_parses(text, content=text, tool_format=FMT, tools=TOOLS)
    # Cut inside a value that mentions the end marker: still open, still content.
    text = "<tool_call>\n<function=write_file>\n<parameter=content>\nend = </tool_call> and"
    assert_parses(text, content=text, tool_format=FMT, tools=TOOLS)


def test_missing_closing_parameter_tag_is_read_up_to_the_next_parameter() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"
    )
    assert_parses(
        text,
        calls=[("get_weather", {"city": "Paris", "days": 2})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_malformed_calls_are_content() -> None:
    malformed = [
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>",  # no </function>
        "<tool_call>\n<function={{ tool.name }}>\n</function>\n</tool_call>",  # template text, not a name
        "<tool_call>\n<function=get_weather>\ncity: Paris\n</function>\n</tool_call>",  # not a parameter
        '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>',  # Hermes JSON
        "<tool_call>\n<function=get_weather\n</function>\n</tool_call>",  # unterminated tag
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",  # last value open
    ]
    for text in malformed:
        assert_parses("Hi " + text, content="Hi " + text, tool_format=FMT, tools=TOOLS)


def test_markers_inside_a_value_are_its_text() -> None:
    content = 'parser = Extractor(start="<tool_call>", end="</tool_call>")\n'
    text = call("write_file", path="docs/tools.md", content=content) + "\nWritten."
    assert_parses(
        text,
        content="\nWritten.",
        calls=[("write_file", {"path": "docs/tools.md", "content": content})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_a_value_documenting_the_format_keeps_its_nested_tags() -> None:
    content = "Write it so:\n<parameter=city>\nParis\n</parameter>\nand close the call."
    text = call("write_file", path="docs/tools.md", content=content)
    assert_parses(
        text,
        calls=[("write_file", {"path": "docs/tools.md", "content": content})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_closing_tags_then_end_marker_inside_a_value_make_the_block_content() -> None:
    # Documented limit: after a literal </parameter> the value looks closed; no wrong call, the text survives.
    for value in ("</parameter> then </tool_call>", "<function=f>\n</function>\n</tool_call> closes it"):
        text = call("write_file", path="a.md", content=value)
        assert_parses(text, content=text, tool_format=FMT, tools=TOOLS)


def test_missing_closing_function_tag_does_not_swallow_the_next_call() -> None:
    broken = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>"
    text = broken + "\n" + call("get_weather", city="Rome")
    assert_parses(
        text,
        content=broken,
        calls=[("get_weather", {"city": "Rome"})],
        tool_format=FMT,
        tools=TOOLS,
    )


def test_plain_text_with_angle_brackets_passes_through() -> None:
    text = "if a < b and <tool> then <function=x> is just text"
    assert_parses(text, content=text, tool_format=FMT, tools=TOOLS)
