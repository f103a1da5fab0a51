"""``ovserve parse``: a model's raw output on stdin -> the message the server would return, as JSON.

The main case runs the real command (``python -m ovserve parse``) as a user would; the mistakes
and file shapes run ``main`` in-process (the same code, without a Python start per case).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ovserve.__main__ import main
from ovserve.parse_cli import ParseUsageError, read_tools
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "chat_templates"

HERMES_OUTPUT = (
    "<think>The user wants Paris.</think>Let me look.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": '
    '{"city": "Paris", "note": "caf\\u00e9 \\"Le Dôme\\""}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
)
HERMES_MESSAGE = {
    "content": "Let me look.",
    "reasoning_content": "The user wants Paris.",
    "tool_calls": [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "note": "café \\"Le Dôme\\""}'},
        },
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ],
}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


def ovserve_parse(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "ovserve", "parse", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def parse_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str, stdin: str = ""
) -> tuple[int, Any, str]:
    """Exit status, the JSON printed (None when nothing was), stderr."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    status = main(["parse", *args])
    out, err = capsys.readouterr()
    return status, json.loads(out) if out else None, err


def test_hermes_output_parses_the_same_unary_and_in_one_character_deltas(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    unary = ovserve_parse("--tool_parser", "hermes3", "--reasoning_parser", "qwen3", stdin=HERMES_OUTPUT)
    assert unary.returncode == 0, unary.stderr
    assert json.loads(unary.stdout) == HERMES_MESSAGE
    assert "tool parser hermes3 (tool_parser setting)" in unary.stderr
    # The streamed parse in-process: the command's start is proven above, one Python start is enough.
    args = ("--tool_parser", "hermes3", "--reasoning_parser", "qwen3", "--chunk", "1")
    status, streamed, _ = parse_in_process(monkeypatch, capsys, *args, stdin=HERMES_OUTPUT)
    assert status == 0
    assert streamed == json.loads(unary.stdout)


def test_auto_detects_from_the_model_directory_and_strips_its_other_special_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    special = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}
    config = {
        "chat_template": (FIXTURES / "qwen3.jinja").read_text(encoding="utf-8"),
        "added_tokens_decoder": {str(i): {"content": token, "special": True} for i, token in enumerate(special)},
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS), encoding="utf-8")
    status, message, err = parse_in_process(
        monkeypatch,
        capsys,
        *("--tool_parser", "auto", "--model_path", str(tmp_path), "--tools", str(tmp_path / "tools.json")),
        stdin='<think>\nhm\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
        "</tool_call><|im_end|>",
    )
    assert status == 0, err
    assert message["reasoning_content"] == "\nhm\n"
    assert message["content"] is None  # <|im_end|>, a special token but no marker, is stripped
    assert [call["function"]["name"] for call in message["tool_calls"]] == ["get_weather"]
    assert "tool parser hermes3 (detected, Hermes / Qwen" in err
    assert "reasoning parser qwen3 (detected, " in err


def test_without_a_model_directory_an_omitted_parser_is_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, message, err = parse_in_process(monkeypatch, capsys, stdin="<think>a</think>b")
    assert status == 0
    assert message == {"content": "<think>a</think>b", "reasoning_content": None, "tool_calls": []}
    assert "no tool parser (tool_parser: none); no reasoning parser (reasoning_parser: none)" in err


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--tool_parser", "hermes"], "unknown tool_parser 'hermes' (known: "),
        (["--tool_parser", "hermes"], " hermes3, "),
        (["--tool_parser", "hermes"], ", none, auto)"),
        (["--reasoning_parser", "think"], "unknown reasoning_parser 'think' (known: "),
        (["--tool_parser", "auto"], "--tool_parser auto needs --model_path"),
        (["--model_path", "/nonexistent/model"], "--model_path: /nonexistent/model is not a directory"),
        (["--tools", "/nonexistent/tools.json"], "--tools: cannot read /nonexistent/tools.json"),
    ],
)
def test_mistakes_exit_2_with_one_line_saying_what_to_give(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], complaint: str
) -> None:
    status, message, err = parse_in_process(monkeypatch, capsys, *args, stdin="text")
    assert status == 2
    assert message is None
    assert err.startswith("ovserve parse: ") and complaint in err
    assert err.count("\n") == 1


def test_a_chunk_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["parse", "--chunk", "0"])
    assert exit_info.value.code == 2
    assert "expected a positive integer, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "document",
    [
        TOOLS,  # chat's tools
        [{"type": "function", "name": "get_weather", "parameters": WEATHER}],  # the Responses API's
        {"model": "m", "messages": [], "tools": TOOLS},  # a whole request body
    ],
)
def test_tools_file_shapes(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    assert read_tools(path) == {"get_weather": WEATHER}


def test_a_tool_without_parameters_gets_an_empty_schema_and_one_without_a_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"type": "function", "function": {"name": "now"}}]), encoding="utf-8")
    assert read_tools(path) == {"now": {}}
    path.write_text(json.dumps([{"type": "function", "function": {"parameters": {}}}]), encoding="utf-8")
    with pytest.raises(ParseUsageError, match=r"tool 0 .* has no function name"):
        read_tools(path)
    path.write_text(json.dumps({"tools": "none"}), encoding="utf-8")
    with pytest.raises(ParseUsageError, match="neither a list of tools nor an object with 'tools'"):
        read_tools(path)
