"""MiniCPM3 / MiniCPM4 Python-call tool calls, through the conformance oracle (whole and streamed)."""

from __future__ import annotations

from ovserve.parsers import REASONING_PARSERS, TOOL_PARSERS
from tests.unit.parsers.conformance import assert_parses

FMT = TOOL_PARSERS["minicpm"]
THOUGHT = REASONING_PARSERS["minicpm"]
THINK = REASONING_PARSERS["qwen3"]


def block(*calls: str) -> str:
    """Calls as the MiniCPM template writes them."""
    return "<|tool_call_start|>\n```python\n" + "\n".join(calls) + "\n```\n<|tool_call_end|>"


def test_single_call() -> None:
    assert_parses(
        block('get_weather(city="Paris",days=3)'),
        calls=[("get_weather", {"city": "Paris", "days": 3})],
        tool_format=FMT,
    )


def test_parallel_calls_keep_their_order() -> None:
    assert_parses(
        block('get_weather(city="Paris")', 'get_time(zone="Europe/Paris")'),
        calls=[("get_weather", {"city": "Paris"}), ("get_time", {"zone": "Europe/Paris"})],
        tool_format=FMT,
    )


def test_thought_then_call_then_answer() -> None:
    # The template's order: thought, calls, then text for the user.
    text = (
        "<|thought_start|>\nI need the weather in Paris.\n<|thought_end|>\n"
        + block('get_weather(city="Paris")')
        + "\nLet me check that for you."
    )
    assert_parses(
        text,
        reasoning="\nI need the weather in Paris.\n",
        content="\nLet me check that for you.",
        calls=[("get_weather", {"city": "Paris"})],
        tool_format=FMT,
        reasoning_format=THOUGHT,
    )


def test_reasoning_then_call() -> None:
    # MiniCPM4.1's hybrid reasoning uses <think>.
    text = "<think>\nCall the tool.\n</think>\n\n" + block("ping()")
    assert_parses(
        text,
        reasoning="\nCall the tool.\n",
        calls=[("ping", {})],
        tool_format=FMT,
        reasoning_format=THINK,
    )


def test_call_after_text() -> None:
    text = "Sure.\n" + block('get_weather(city="Paris")')
    assert_parses(text, content="Sure.", calls=[("get_weather", {"city": "Paris"})], tool_format=FMT)


def test_nested_json_arrays_unicode_and_escaped_quotes() -> None:
    text = block('search(filters={"city": "Zürich \\"old\\"", "near": [1, 2.5, null]},tags=["日本", true])')
    expected = {"filters": {"city": 'Zürich "old"', "near": [1, 2.5, None]}, "tags": ["日本", True]}
    assert_parses(text, calls=[("search", expected)], tool_format=FMT)


def test_python_literals_and_keyword_named_arguments() -> None:
    text = block("convert(amount=-5, exact=True, note=None, pair=('USD', 'EUR'), opts={'k': true}, from='USD')")
    expected = {"amount": -5, "exact": True, "note": None, "pair": ["USD", "EUR"], "opts": {"k": True}, "from": "USD"}
    assert_parses(text, calls=[("convert", expected)], tool_format=FMT)


def test_dotted_and_dashed_names() -> None:
    assert_parses(
        block('maps.search-poi(city="杭州",keywords="电影院")'),
        calls=[("maps.search-poi", {"city": "杭州", "keywords": "电影院"})],
        tool_format=FMT,
    )


def test_fence_language_is_not_part_of_the_calls() -> None:
    text = '<|tool_call_start|>\n```py\nget_weather(city="Paris")\n```\n<|tool_call_end|>'
    assert_parses(text, calls=[("get_weather", {"city": "Paris"})], tool_format=FMT)


def test_block_without_fence() -> None:
    text = '<|tool_call_start|>\nget_weather(city="Paris")\n<|tool_call_end|>'
    assert_parses(text, calls=[("get_weather", {"city": "Paris"})], tool_format=FMT)


def test_empty_arguments() -> None:
    assert_parses(block("ping()"), calls=[("ping", {})], tool_format=FMT)


def test_truncated_output_is_content() -> None:
    text = 'OK.\n<|tool_call_start|>\n```python\nget_weather(city="Par'
    assert_parses(text, content=text, tool_format=FMT)


def test_malformed_calls_are_content() -> None:
    malformed = [
        block('get_weather("Paris")'),  # positional
        block("get_weather(city=paris)"),  # a variable
        block("get_weather(city=1+2)"),  # an expression
        block('get_weather(city="Paris"'),  # unbalanced
        block("print hello"),  # not a call
        block(""),  # no call
        block("get_weather(**kw)"),
        block("f(x=float('nan'))"),
    ]
    for text in malformed:
        assert_parses("Hi " + text, content="Hi " + text, tool_format=FMT)
