"""The call regexes of the XML-style formats: a grammar built from one admits the call a model
writes under it, and that text parses back to the same call. The regexes are in the engine's
dialect (a newline written ``\\n``), which Python's ``re`` reads the same way."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from ovserve.core.conversation import Tool
from ovserve.core.guided import forced_tool_call_grammar, schema_regex
from ovserve.parsers import TOOL_PARSERS
from ovserve.parsers.base import ToolCallFormat
from tests.unit.parsers.conformance import message

SCHEMA_REGEX = functools.partial(schema_regex, param="tools.0.function.parameters")
WRITE_FILE = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "content": {"type": "string"},
        "mode": {"type": "string", "enum": ["w", "a"]},
        "line": {"type": "integer", "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
        "options": {"type": "object", "properties": {"backup": {"type": "boolean"}}},
    },
    "required": ["path", "content"],
}
EXPECTED = {
    "path": "src/main.py",
    "content": 'def main():\n    print("héllo")',
    "line": 12,
    "tags": ["py", "日本"],
    "options": {"backup": True},
}

FORCED_CALLS = {
    "qwen3coder": (
        "<tool_call>\n<function=write_file>\n"
        "<parameter=path>\nsrc/main.py\n</parameter>\n"
        '<parameter=content>\ndef main():\n    print("héllo")\n</parameter>\n'
        "<parameter=line>\n12\n</parameter>\n"
        '<parameter=tags>\n["py","日本"]\n</parameter>\n'
        '<parameter=options>\n{"backup":true}\n</parameter>\n'
        "</function>\n</tool_call>"
    ),
    "glm45": (
        "<tool_call>write_file\n"
        "<arg_key>path</arg_key>\n<arg_value>src/main.py</arg_value>\n"
        '<arg_key>content</arg_key>\n<arg_value>def main():\n    print("héllo")</arg_value>\n'
        "<arg_key>line</arg_key>\n<arg_value>12</arg_value>\n"
        '<arg_key>tags</arg_key>\n<arg_value>["py","日本"]</arg_value>\n'
        '<arg_key>options</arg_key>\n<arg_value>{"backup":true}</arg_value>\n'
        "</tool_call>"
    ),
    "glm47": (
        "<tool_call>write_file"
        "<arg_key>path</arg_key><arg_value>src/main.py</arg_value>"
        '<arg_key>content</arg_key><arg_value>def main():\n    print("héllo")</arg_value>'
        "<arg_key>line</arg_key><arg_value>12</arg_value>"
        '<arg_key>tags</arg_key><arg_value>["py","日本"]</arg_value>'
        '<arg_key>options</arg_key><arg_value>{"backup":true}</arg_value>'
        "</tool_call>"
    ),
    "minicpm5": (
        '<function name="write_file">'
        '<param name="path">src/main.py</param>'
        '<param name="content">def main():\n    print("héllo")</param>'
        '<param name="line">12</param>'
        '<param name="tags">["py","日本"]</param>'
        '<param name="options">{"backup":true}</param>'
        "</function>"
    ),
    "minicpm": (
        "<|tool_call_start|>\n```python\n"
        'write_file(path="src/main.py",content="def main():\\n    print(\\"héllo\\")",'
        'line=12,tags=["py","日本"],options={"backup":true})'
        "\n```\n<|tool_call_end|>"
    ),
}


def regex(fmt: ToolCallFormat, name: str, parameters: Any) -> re.Pattern[str]:
    assert fmt.call_regex is not None
    return re.compile(fmt.call_regex(name, parameters, SCHEMA_REGEX))


def parsed(fmt: ToolCallFormat, text: str, tools: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    result = message(text, tool_format=fmt, tools=tools)
    assert result["content"] is None, result
    calls: list[tuple[str, dict[str, Any]]] = result["tool_calls"]
    return calls


@pytest.mark.parametrize("name", sorted(FORCED_CALLS))
def test_forced_call_is_admitted_and_parses_back(name: str) -> None:
    fmt = TOOL_PARSERS[name]
    text = FORCED_CALLS[name]
    assert regex(fmt, "write_file", WRITE_FILE).fullmatch(text)
    assert parsed(fmt, text, {"write_file": WRITE_FILE}) == [("write_file", EXPECTED)]


@pytest.mark.parametrize("name", sorted(FORCED_CALLS))
def test_required_arguments_are_mandatory_and_values_typed(name: str) -> None:
    fmt = TOOL_PARSERS[name]
    pattern = regex(fmt, "write_file", WRITE_FILE)
    text = FORCED_CALLS[name]
    path_argument = {
        "qwen3coder": "<parameter=path>\nsrc/main.py\n</parameter>\n",
        "glm45": "<arg_key>path</arg_key>\n<arg_value>src/main.py</arg_value>\n",
        "glm47": "<arg_key>path</arg_key><arg_value>src/main.py</arg_value>",
        "minicpm": 'path="src/main.py",',
        "minicpm5": '<param name="path">src/main.py</param>',
    }[name]
    assert path_argument in text
    assert not pattern.fullmatch(text.replace(path_argument, ""))
    assert not pattern.fullmatch(text.replace("12", "0"))  # below the minimum
    assert not pattern.fullmatch(text.replace("write_file", "other_tool", 1))


@pytest.mark.parametrize("name", sorted(FORCED_CALLS))
def test_forced_call_with_only_the_required_arguments(name: str) -> None:
    fmt = TOOL_PARSERS[name]
    parameters = {
        "type": "object",
        "properties": {"q": {"type": "string"}, "n": {"type": "integer"}, "mode": {"enum": ["a", "b"]}},
        "required": ["mode"],
    }
    texts = {
        "qwen3coder": "<tool_call>\n<function=f>\n<parameter=mode>\nb\n</parameter>\n</function>\n</tool_call>",
        "glm45": "<tool_call>f\n<arg_key>mode</arg_key>\n<arg_value>b</arg_value>\n</tool_call>",
        "glm47": "<tool_call>f<arg_key>mode</arg_key><arg_value>b</arg_value></tool_call>",
        "minicpm": '<|tool_call_start|>\n```python\nf(mode="b")\n```\n<|tool_call_end|>',
        "minicpm5": '<function name="f"><param name="mode">b</param></function>',
    }
    assert regex(fmt, "f", parameters).fullmatch(texts[name])
    assert parsed(fmt, texts[name], {"f": parameters}) == [("f", {"mode": "b"})]


@pytest.mark.parametrize("name", sorted(FORCED_CALLS))
def test_tool_without_parameters(name: str) -> None:
    fmt = TOOL_PARSERS[name]
    texts = {
        "qwen3coder": "<tool_call>\n<function=ping>\n</function>\n</tool_call>",
        "glm45": "<tool_call>ping\n</tool_call>",
        "glm47": "<tool_call>ping</tool_call>",
        "minicpm": "<|tool_call_start|>\n```python\nping()\n```\n<|tool_call_end|>",
        "minicpm5": '<function name="ping"></function>',
    }
    assert regex(fmt, "ping", {"type": "object", "properties": {}}).fullmatch(texts[name])
    assert parsed(fmt, texts[name], {"ping": {}}) == [("ping", {})]


def test_minicpm_commas_only_between_the_arguments_written() -> None:
    fmt = TOOL_PARSERS["minicpm"]
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
        "required": ["b"],
    }
    pattern = regex(fmt, "f", parameters)

    def call(arguments: str) -> str:
        return f"<|tool_call_start|>\n```python\nf({arguments})\n```\n<|tool_call_end|>"

    for arguments in ("b=2", "a=1,b=2", "b=2,c=3", "a=1,b=2,c=3"):
        assert pattern.fullmatch(call(arguments)), arguments
    for arguments in ("", "a=1", ",b=2", "b=2,", "a=1b=2", "b=2,a=1"):
        assert not pattern.fullmatch(call(arguments)), arguments
    all_optional = regex(fmt, "f", {**parameters, "required": []})
    for arguments in ("", "a=1", "c=3", "a=1,c=3", "b=2,c=3"):
        assert all_optional.fullmatch(call(arguments)), arguments
    assert not all_optional.fullmatch(call(",c=3"))


def test_forced_grammar_for_several_tools() -> None:
    tools = [
        Tool(name="write_file", origin="tools.0", parameters=WRITE_FILE),
        Tool(name="ping", origin="tools.1"),
    ]
    grammar = forced_tool_call_grammar(TOOL_PARSERS["qwen3coder"], tools, param="tool_choice")
    pattern = re.compile(grammar["regex"])
    assert pattern.fullmatch(FORCED_CALLS["qwen3coder"])
    assert pattern.fullmatch("<tool_call>\n<function=ping>\n</function>\n</tool_call>")
    assert not pattern.fullmatch("I'd rather talk.")
