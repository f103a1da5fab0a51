from __future__ import annotations

import pytest

from ovserve.parsers import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    UnknownParserError,
    reasoning_parser,
    tool_parser,
    tool_parser_name,
)
from ovserve.parsers.detect import detect_tool_parser


def test_names_resolve() -> None:
    for name in (
        "hermes3",
        "qwen3",
        "llama3",
        "mistral",
        "phi4",
        "qwen3coder",
        "glm4",
        "glm45",
        "glm47",
        "minicpm",
        "minicpm5",
    ):
        assert tool_parser(name) is TOOL_PARSERS[name]


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownParserError, match="hermes3"):
        tool_parser("nope")


def test_detection_from_templates() -> None:
    assert detect_tool_parser("... <tool_call>\\n{{ tool_call | tojson }} ...").name == "hermes3"
    assert detect_tool_parser("{{ '[TOOL_CALLS]' }}").name == "mistral"
    assert detect_tool_parser("{{- '<|python_tag|>' }}").name == "llama3"
    assert detect_tool_parser("plain template").name is None


def test_special_format_names_resolve() -> None:
    for name in ("deepseek_v31", "kimi_k2", "pythonic", "llama4_pythonic", "lfm2", "devstral", "granite"):
        assert tool_parser(name) is TOOL_PARSERS[name]
    for name in ("deepseek_r1", "mistral", "granite"):
        assert reasoning_parser(name) is REASONING_PARSERS[name]


def test_detection_of_the_special_formats() -> None:
    assert detect_tool_parser("{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'}}").name == "deepseek_v31"
    assert detect_tool_parser("<|tool_calls_section_begin|>{% for c in calls %}").name == "kimi_k2"
    assert detect_tool_parser('"<|tool_call_start|>[" + calls + "]<|tool_call_end|>"').name == "lfm2"
    assert detect_tool_parser("{{ '[TOOL_CALLS]' + name + '[ARGS]' + args }}").name == "devstral"
    assert detect_tool_parser("{{ '<|tool_call|>' + tool_calls | tojson }}").name == "granite"
    # Granite 4 teaches Hermes blocks and also holds <|tool_call|>: Hermes wins.
    assert detect_tool_parser("<tool_call>\n{...}\n</tool_call> ... <|tool_call|>").name == "hermes3"


def test_xml_templates_are_detected_before_hermes() -> None:
    # Each also contains "<tool_call>", the Hermes hint.
    qwen3_coder = "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + args_name }}"
    glm45 = "{{ '\\n<tool_call>' + tc.name }}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>"
    glm47 = "{{- '<tool_call>' ~ tc.name -}}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value></tool_call>"
    minicpm = "{{- '<|tool_call_start|>\\n```python\\n' }}"
    assert detect_tool_parser(qwen3_coder).name == "qwen3coder"
    assert detect_tool_parser(glm45).name == "glm45"
    assert detect_tool_parser(glm47).name == "glm47"
    assert detect_tool_parser(minicpm).name == "minicpm"
    minicpm5 = "{{- '<function name=\"' ~ tool_call.name ~ '\">' }}{{- '<param name=\"' ~ param_name ~ '\">' }}"
    assert detect_tool_parser(minicpm5).name == "minicpm5"


def test_an_alias_format_is_named_by_its_own_name() -> None:
    # qwen3 is Hermes' format: a model given the format directly is named by the format's own name.
    assert tool_parser_name(tool_parser("qwen3")) == "hermes3"
    assert tool_parser_name(tool_parser("llama3")) == "llama3"
    assert tool_parser_name(None) is None
