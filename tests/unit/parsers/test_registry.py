from __future__ import annotations

import pytest

from ovserve.parsers import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    UnknownParserError,
    detect_tool_parser,
    reasoning_parser,
    tool_parser,
)


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
    assert detect_tool_parser("... <tool_call>\\n{{ tool_call | tojson }} ...") is TOOL_PARSERS["hermes3"]
    assert detect_tool_parser("{{ '[TOOL_CALLS]' }}") is TOOL_PARSERS["mistral"]
    assert detect_tool_parser("{{- '<|python_tag|>' }}") is TOOL_PARSERS["llama3"]
    assert detect_tool_parser("plain template") is None


def test_special_format_names_resolve() -> None:
    for name in ("deepseek_v31", "kimi_k2", "pythonic", "llama4_pythonic", "lfm2", "devstral", "granite"):
        assert tool_parser(name) is TOOL_PARSERS[name]
    for name in ("deepseek_r1", "mistral", "granite"):
        assert reasoning_parser(name) is REASONING_PARSERS[name]


def test_detection_of_the_special_formats() -> None:
    assert detect_tool_parser("{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'}}") is TOOL_PARSERS["deepseek_v31"]
    assert detect_tool_parser("<|tool_calls_section_begin|>{% for c in calls %}") is TOOL_PARSERS["kimi_k2"]
    assert detect_tool_parser('"<|tool_call_start|>[" + calls + "]<|tool_call_end|>"') is TOOL_PARSERS["lfm2"]
    assert detect_tool_parser("{{ '[TOOL_CALLS]' + name + '[ARGS]' + args }}") is TOOL_PARSERS["devstral"]
    assert detect_tool_parser("{{ '<|tool_call|>' + tool_calls | tojson }}") is TOOL_PARSERS["granite"]
    # Granite 4 teaches Hermes blocks and also holds <|tool_call|>: Hermes wins.
    assert detect_tool_parser("<tool_call>\n{...}\n</tool_call> ... <|tool_call|>") is TOOL_PARSERS["hermes3"]


def test_xml_templates_are_detected_before_hermes() -> None:
    # Each also contains "<tool_call>", the Hermes hint.
    qwen3_coder = "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + args_name }}"
    glm45 = "{{ '\\n<tool_call>' + tc.name }}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>"
    glm47 = "{{- '<tool_call>' ~ tc.name -}}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value></tool_call>"
    minicpm = "{{- '<|tool_call_start|>\\n```python\\n' }}"
    assert detect_tool_parser(qwen3_coder) is TOOL_PARSERS["qwen3coder"]
    assert detect_tool_parser(glm45) is TOOL_PARSERS["glm45"]
    assert detect_tool_parser(glm47) is TOOL_PARSERS["glm47"]
    assert detect_tool_parser(minicpm) is TOOL_PARSERS["minicpm"]
    minicpm5 = "{{- '<function name=\"' ~ tool_call.name ~ '\">' }}{{- '<param name=\"' ~ param_name ~ '\">' }}"
    assert detect_tool_parser(minicpm5) is TOOL_PARSERS["minicpm5"]
