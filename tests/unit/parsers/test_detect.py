"""Parser detection against the published chat templates (tests/fixtures/chat_templates).

Each fixture is a real model family's template; the server must pick the parsers its model writes
for. A model directory is also read as the server reads it (template file, tokenizer config).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ovserve.parsers import (
    PARSER_OFF,
    REASONING_PARSERS,
    TOOL_PARSERS,
    UnknownParserError,
    choose_parsers,
)
from ovserve.parsers.detect import (
    REASONING_CLUES,
    TOOL_CLUES,
    detect_reasoning_parser,
    detect_tool_parser,
    read_chat_template,
    read_special_tokens,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "chat_templates"

# Fixture -> (tool parser, reasoning parser) the server must detect.
EXPECTED: dict[str, tuple[str | None, str | None]] = {
    "qwen3": ("hermes3", "qwen3"),
    "qwen2.5": ("hermes3", None),
    "qwq": ("hermes3", "qwen3"),
    "qwen3-coder": ("qwen3coder", None),
    "qwen3.5": ("qwen3coder", "qwen3"),
    "gpt-oss": ("gptoss", "gptoss"),
    "llama-3.1": ("llama3", None),
    "llama-3.2": ("llama3", None),
    # Llama 4's published template asks for Llama 3's JSON; vLLM's pythonic template for the list.
    "llama-4": ("llama3", None),
    "llama-4-pythonic": ("pythonic", None),
    "hermes-3": ("hermes3", None),
    "mistral-nemo": ("mistral", None),
    "mistral-small-3.2": ("devstral", None),
    "devstral-small": ("devstral", None),
    "ministral-3-reasoning": ("devstral", "mistral"),
    # R1's ```json calls have no parser here: recognised, so V3.1's parser is not picked.
    "deepseek-r1": (None, "deepseek_r1"),
    # V3.1 closes <think></think> in the prompt when not thinking: the prompt-driven splitter.
    "deepseek-v3.1": ("deepseek_v31", "qwen3"),
    "glm-4.6": ("glm45", "qwen3"),
    "glm-4.7-flash": ("glm47", "qwen3"),
    "gemma-4": ("gemma4", "gemma4"),
    "phi-4-mini": ("phi4", None),
    "firefunction-v2": ("phi4", None),
    "kimi-k2": ("kimi_k2", None),
    "kimi-k2-thinking": ("kimi_k2", "qwen3"),
    "granite-3.3": ("granite", "granite"),
    "granite-4.0": ("hermes3", None),
    "minicpm3": ("minicpm", "minicpm"),
    "lfm2.5": ("lfm2", "qwen3"),
    "lfm2.5-instruct": ("lfm2", None),  # the template shows no syntax: the special tokens tell
    "command-r7b": (None, None),
    "gemma-2": (None, None),
    "phi-3.5": (None, None),
}


def _template(name: str) -> str:
    return (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8")


def _special_tokens(name: str) -> frozenset[str]:
    path = FIXTURES / f"{name}.special_tokens.json"
    return frozenset(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else frozenset()


def _model_dir(root: Path, name: str) -> Path:
    """A model directory as Hugging Face ships one: the template in tokenizer_config.json, the
    special tokens in its added_tokens_decoder."""
    root.mkdir()
    decoder = {str(index): {"content": token, "special": True} for index, token in enumerate(_special_tokens(name))}
    config = {"chat_template": _template(name), "added_tokens_decoder": decoder}
    (root / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return root


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(path.stem for path in FIXTURES.glob("*.jinja")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_published_template_gets_its_family_parsers(name: str) -> None:
    template, tokens = _template(name), _special_tokens(name)
    tool, reasoning = detect_tool_parser(template, tokens), detect_reasoning_parser(template, tokens)
    assert (tool.name, reasoning.name) == EXPECTED[name], (tool.reason, reasoning.reason)
    assert tool.reason and reasoning.reason


@pytest.mark.parametrize("name", ["qwen3", "qwen3-coder", "gpt-oss", "lfm2.5-instruct"])
def test_model_directory_is_read_as_the_server_reads_it(tmp_path: Path, name: str) -> None:
    model = _model_dir(tmp_path / name, name)
    assert read_chat_template(model) == _template(name)
    assert read_special_tokens(model) == _special_tokens(name)
    parsers = choose_parsers(
        tool_parser=None,
        reasoning_parser=None,
        chat_template=read_chat_template(model),
        special_tokens=read_special_tokens(model),
    )
    expected_tool, expected_reasoning = EXPECTED[name]
    if expected_tool in TOOL_PARSERS:
        assert parsers.tool.name == expected_tool
        assert parsers.tool.reason.startswith("detected, ")
    if expected_reasoning in REASONING_PARSERS:
        assert parsers.reasoning.name == expected_reasoning


def test_reasons_name_the_template_fragment() -> None:
    assert (
        "<function=...><parameter=...> calls inside <tool_call>" in detect_tool_parser(_template("qwen3-coder")).reason
    )
    assert "<tool_call>" in detect_tool_parser(_template("qwen3")).reason
    assert "[ARGS]" in detect_tool_parser(_template("devstral-small")).reason
    assert "no parser here reads" in detect_tool_parser(_template("deepseek-r1")).reason


def test_think_tokens_in_the_vocabulary_alone_are_not_reasoning() -> None:
    # Qwen3-Coder shares Qwen3's tokenizer (<think> is a token) but its template never thinks.
    assert detect_reasoning_parser(_template("qwen3-coder"), frozenset({"<think>", "</think>"})).name is None


def test_lfm2_without_its_special_tokens_is_not_guessed_from_the_prompt_text() -> None:
    assert detect_tool_parser(_template("lfm2.5-instruct")).name is None


def test_minicpm5_xml_elements() -> None:
    # No published MiniCPM5 template is at hand: its call as the template writes it (OVMS's parser).
    template = "{{- '<function name=\"' ~ tool_call.name ~ '\">' }}{{- '<param name=\"' ~ name ~ '\">' }}"
    assert detect_tool_parser(template).name == "minicpm5"


def test_no_template_no_parsers() -> None:
    assert detect_tool_parser(None).name is None
    assert detect_reasoning_parser("").reason == "the model has no chat template"


def test_every_parser_detection_can_name_is_registered() -> None:
    """Fails while a family's parser is not merged yet: detection would name it and the server
    would serve that family without parsing (logged as 'not a registered parser')."""
    tool_names = {clue.parser for clue in TOOL_CLUES if clue.parser is not None}
    reasoning_names = {clue.parser for clue in REASONING_CLUES if clue.parser is not None}
    assert sorted(tool_names - TOOL_PARSERS.keys()) == []
    assert sorted(reasoning_names - REASONING_PARSERS.keys()) == []


# choose_parsers: the settings over detection, "none" turning parsing off.


def test_explicit_settings_win_over_detection() -> None:
    parsers = choose_parsers(tool_parser="mistral", reasoning_parser="qwen3", chat_template=_template("llama-3.1"))
    assert (parsers.tool.name, parsers.reasoning.name) == ("mistral", "qwen3")
    assert parsers.tool_format is TOOL_PARSERS["mistral"]
    assert parsers.describe() == (
        "tool parser mistral (tool_parser setting); reasoning parser qwen3 (reasoning_parser setting)"
    )


def test_none_turns_parsing_off_even_when_the_template_names_a_format() -> None:
    parsers = choose_parsers(tool_parser=PARSER_OFF, reasoning_parser=PARSER_OFF, chat_template=_template("qwen3"))
    assert parsers.tool_format is None and parsers.reasoning_format is None
    assert parsers.describe() == "no tool parser (tool_parser: none); no reasoning parser (reasoning_parser: none)"


def test_detected_parsers_say_why() -> None:
    parsers = choose_parsers(tool_parser=None, reasoning_parser=None, chat_template=_template("qwen3"))
    assert parsers.tool_format is TOOL_PARSERS["hermes3"]
    assert parsers.reasoning_format is REASONING_PARSERS["qwen3"]
    assert parsers.describe().startswith("tool parser hermes3 (detected, Hermes / Qwen: the chat template writes")


def test_nothing_detected_is_said_too() -> None:
    parsers = choose_parsers(tool_parser=None, reasoning_parser=None, chat_template=_template("gemma-2"))
    assert parsers.describe() == (
        "no tool parser (nothing in the chat template names a tool-call format); "
        "no reasoning parser (nothing in the chat template names a reasoning format)"
    )
    unsupported = choose_parsers(tool_parser=None, reasoning_parser=None, chat_template=_template("deepseek-r1"))
    assert unsupported.tool.describe("tool").startswith("no tool parser (DeepSeek-R1 / V3: the chat template writes")


def test_unknown_setting_lists_the_known_names_and_none() -> None:
    with pytest.raises(UnknownParserError, match=r"unknown tool_parser 'nope' \(known: .*hermes3.*, none\)"):
        choose_parsers(tool_parser="nope", reasoning_parser=None, chat_template=None)


def test_a_detected_but_unregistered_parser_leaves_the_model_unparsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(TOOL_PARSERS, "hermes3")
    parsers = choose_parsers(tool_parser=None, reasoning_parser=None, chat_template=_template("hermes-3"))
    assert parsers.tool_format is None
    assert "detected 'hermes3'" in parsers.tool.reason and "not a registered parser" in parsers.tool.reason


# Reading a model directory.


def test_chat_template_jinja_wins_over_tokenizer_config(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text("from the jinja file", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "from the config"}))
    assert read_chat_template(tmp_path) == "from the jinja file"


def test_named_templates_use_the_default_one(tmp_path: Path) -> None:
    named = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    assert read_chat_template(tmp_path) == "plain"


def test_a_processors_chat_template_json_is_read_last(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "vision"}))
    assert read_chat_template(tmp_path) == "vision"


def test_missing_or_broken_files_read_as_nothing(tmp_path: Path) -> None:
    assert read_chat_template(tmp_path) is None
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    assert read_chat_template(tmp_path) is None
    assert read_special_tokens(tmp_path) == frozenset()


# docs/tools.md's table of families says what detection does.

DOCS = Path(__file__).parents[3] / "docs" / "tools.md"


def _family_rows() -> list[list[str]]:
    rows = []
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 5 and cells[0] not in {"model family", "---"}:
            rows.append(cells)
    return rows


def test_the_docs_table_shows_every_clue_and_parser() -> None:
    rows = _family_rows()
    assert len(rows) >= 18  # the table was found
    table = "\n".join(" | ".join(row) for row in rows)
    for clue in (*TOOL_CLUES, *REASONING_CLUES):
        for fragment in (*clue.template, *clue.tokens):
            assert fragment in table, f"docs/tools.md does not show {fragment!r} ({clue.family})"
        if clue.parser is not None:
            assert f"`{clue.parser}`" in table, clue.parser


def test_the_docs_say_which_registered_formats_can_be_forced() -> None:
    for family, tools, _, _, forced in _family_rows():
        for name in re.findall(r"`(\w+)`", tools):
            if name in TOOL_PARSERS and forced:
                can = TOOL_PARSERS[name].call_regex is not None
                assert forced == ("yes" if can else "no"), f"{family}: {name} {'has' if can else 'has no'} call_regex"
