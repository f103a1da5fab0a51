"""What a model directory says about its output format: which tool-call and reasoning parsers
its chat template calls for.

A chat template teaches the model its output format: it shows the tool-call syntax in the tools
prompt and writes past calls and reasoning back in that syntax. :func:`detect_tool_parser` and
:func:`detect_reasoning_parser` look for the fragments that tell the families apart, first in the
template text and, for the few templates that show no syntax at all, in the tokenizer's special
tokens. Each returns a :class:`Detection`: the parser's registry name (None when no parser fits)
and a reason a person can check against the template ("the chat template writes '<function=...>'
calls inside <tool_call>").

The clues are data (:data:`TOOL_CLUES`, :data:`REASONING_CLUES`), tried in order, first match
wins. Order matters where one family's template contains another's marker: Qwen3-Coder, GLM and
Qwen3.5 all write ``<tool_call>`` too, so their clues come before Hermes'; GLM-4.7's compact tags
before GLM-4.5's; MiniCPM's ``<|tool_call_start|>`` code block before LFM2's list; DeepSeek-R1's
calls use the same begin token as V3.1's; Devstral's ``[TOOL_CALLS]name[ARGS]`` before Mistral's
JSON list; Granite 4's template holds Granite 3's ``<|tool_call|>`` but teaches Hermes calls.
A clue may name no parser (the family is recognised but nothing here reads its format): detection
then stops there with that reason instead of letting a later, wrong clue match.

The fixtures in ``tests/fixtures/chat_templates`` are the published templates these clues were
written against (``tests/unit/parsers/test_detect.py``); ``docs/tools.md`` tabulates them. The
approach is llama.cpp's (``common/chat.cpp`` picks its chat format by template fragments too).

:func:`read_chat_template` and :func:`read_special_tokens` read a Hugging Face (or OpenVINO
export) model directory; missing or unreadable files give None / an empty set, never an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Detection:
    """A detected parser: its registry name (None: no parser fits) and why."""

    name: str | None
    reason: str


@dataclass(frozen=True)
class Clue:
    """Evidence of one family's format: every ``template`` fragment is in the chat template and
    every ``tokens`` entry is a special token of the tokenizer. ``parser``: the registry name to
    use, None when the family is recognised but no parser reads its format."""

    family: str
    parser: str | None
    evidence: str  # what a person finds in the template, said plainly
    template: tuple[str, ...] = ()
    tokens: tuple[str, ...] = ()

    def matches(self, chat_template: str, special_tokens: frozenset[str]) -> bool:
        return all(fragment in chat_template for fragment in self.template) and all(
            token in special_tokens for token in self.tokens
        )

    @property
    def reason(self) -> str:
        return f"{self.family}: {self.evidence}"


# Tried in order; see the module docstring for why the order matters.
TOOL_CLUES: tuple[Clue, ...] = (
    Clue("gpt-oss", "gptoss", "the chat template writes harmony messages (<|channel|>)", template=("<|channel|>",)),
    Clue(
        "Gemma 4",
        "gemma4",
        "the chat template writes calls as '<|tool_call>call:name{...}'",
        template=("<|tool_call>",),
    ),
    Clue(
        "Qwen3-Coder / Qwen3.5",
        "qwen3coder",
        "the chat template writes <function=...><parameter=...> calls inside <tool_call>",
        template=("<parameter=",),  # Llama 3.1's <function=name>{json} has no <parameter=
    ),
    Clue(
        "GLM-4.7",
        "glm47",
        "the chat template writes <arg_key>/<arg_value> pairs without newlines inside <tool_call>",
        template=("</arg_key><arg_value>",),
    ),
    Clue(
        "GLM-4.5 / 4.6",
        "glm45",
        "the chat template writes <arg_key>/<arg_value> pairs, one a line, inside <tool_call>",
        template=("<arg_key>",),
    ),
    Clue(
        "MiniCPM3 / 4",
        "minicpm",
        "the chat template asks for Python calls in a ```python block after <|tool_call_start|>",
        template=("<|tool_call_start|>", "```python"),
    ),
    Clue(
        "MiniCPM5",
        "minicpm5",
        "the chat template writes <function name=...><param name=...> calls",
        template=("<param name=",),
    ),
    Clue(
        "LFM2",
        "lfm2",
        "the chat template writes a Python list of calls after <|tool_call_start|>",
        template=("<|tool_call_start|>",),
    ),
    Clue("LFM2", "lfm2", "the chat template lists tools in <|tool_list_start|>", template=("<|tool_list_start|>",)),
    Clue(
        "LFM2.5",
        "lfm2",
        "the chat template says 'List of tools: [' and the tokenizer has <|tool_call_start|>",
        template=("List of tools: [",),
        tokens=("<|tool_call_start|>",),
    ),
    Clue(
        "Kimi-K2",
        "kimi_k2",
        "the chat template writes calls in <|tool_calls_section_begin|>",
        template=("<|tool_calls_section_begin|>",),
    ),
    Clue(
        "DeepSeek-R1 / V3",
        None,
        "the chat template writes calls as 'function<｜tool▁sep｜>name' and a ```json block, "
        "a format no parser here reads",
        template=("<｜tool▁calls▁begin｜>", "```json"),
    ),
    Clue(
        "DeepSeek-V3.1",
        "deepseek_v31",
        "the chat template writes 'name<｜tool▁sep｜>{arguments}' calls in <｜tool▁calls▁begin｜>",
        template=("<｜tool▁calls▁begin｜>",),
    ),
    Clue(
        "Devstral / Magistral / Mistral Small 3.2",
        "devstral",
        "the chat template writes calls as [TOOL_CALLS]name[ARGS]{...}",
        template=("[TOOL_CALLS]", "[ARGS]"),
    ),
    Clue(
        "Mistral",
        "mistral",
        "the chat template writes calls as a JSON list after [TOOL_CALLS]",
        template=("[TOOL_CALLS]",),
    ),
    Clue(
        "Phi-4-mini", "phi4", "the chat template puts tools in <|tool|>...<|/tool|>", template=("<|tool|>", "<|/tool|>")
    ),
    Clue(
        "Phi-4-mini / Firefunction", "phi4", "the chat template writes calls after 'functools'", template=("functools",)
    ),
    Clue(
        "Llama (pythonic)",
        "pythonic",
        "the chat template asks for calls as [func_name1(param1=value1, ...)]",
        template=("[func_name1(",),
    ),
    # Granite 4's template holds <|tool_call|> too but teaches (and writes) Hermes calls.
    Clue(
        "Hermes / Qwen", "hermes3", "the chat template writes JSON calls inside <tool_call>", template=("<tool_call>",)
    ),
    Clue(
        "Granite 3", "granite", "the chat template asks for <|tool_call|> and a JSON list", template=("<|tool_call|>",)
    ),
    Clue("Llama 3.1", "llama3", "the chat template writes calls after <|python_tag|>", template=("<|python_tag|>",)),
    Clue(
        "Llama 3.2 / 4",
        "llama3",
        'the chat template asks for JSON {"name": ..., "parameters": ...}',
        template=('"parameters": dictionary of argument name',),
    ),
)

REASONING_CLUES: tuple[Clue, ...] = (
    Clue("gpt-oss", "gptoss", "harmony's analysis channel (<|channel|>)", template=("<|channel|>",)),
    Clue("Gemma 4", "gemma4", "the chat template writes thoughts in <|channel>thought", template=("<|channel>",)),
    Clue(
        "Magistral / Ministral reasoning",
        "mistral",
        "the chat template writes [THINK]...[/THINK]",
        template=("[THINK]",),
    ),
    Clue(
        "Granite 3",
        "granite",
        "the chat template's thinking mode asks for a thought process before the response",
        template=("<|start_of_role|>", "thought process"),
    ),
    Clue(
        "MiniCPM3 / 4",
        "minicpm",
        "the chat template writes a thought in <|thought_start|>...<|thought_end|>",
        template=("<|thought_start|>",),
    ),
    # Hybrid DeepSeek templates (a `thinking` switch) close the block in the prompt when not
    # thinking: the prompt-driven <think> splitter then reads the output as content, where R1's
    # parser would read all of it as reasoning.
    Clue(
        "DeepSeek-V3.1",
        "qwen3",
        "the chat template's thinking switch opens <think> in the prompt or closes it",
        template=("<｜Assistant｜>", "thinking", "</think>"),
    ),
    Clue(
        "DeepSeek-R1",
        "deepseek_r1",
        "the chat template writes <think>...</think> after <｜Assistant｜>",
        template=("<｜Assistant｜>", "<think>", "</think>"),
    ),
    Clue("Qwen3-style", "qwen3", "the chat template writes <think>...</think>", template=("<think>", "</think>")),
)


def _detect(clues: tuple[Clue, ...], chat_template: str | None, special_tokens: frozenset[str], kind: str) -> Detection:
    if not chat_template:
        return Detection(None, "the model has no chat template")
    for clue in clues:
        if clue.matches(chat_template, special_tokens):
            return Detection(clue.parser, clue.reason)
    return Detection(None, f"nothing in the chat template names a {kind} format")


def detect_tool_parser(chat_template: str | None, special_tokens: frozenset[str] = frozenset()) -> Detection:
    """The tool parser a model's chat template (and special tokens) call for."""
    return _detect(TOOL_CLUES, chat_template, special_tokens, "tool-call")


def detect_reasoning_parser(chat_template: str | None, special_tokens: frozenset[str] = frozenset()) -> Detection:
    """The reasoning parser a model's chat template calls for. The template, not the vocabulary:
    Qwen3-Coder's tokenizer has <think> tokens, but its template never thinks."""
    return _detect(REASONING_CLUES, chat_template, special_tokens, "reasoning")


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _template_of(config: Any) -> str | None:
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # HF's named templates: use "default"
        named = {item.get("name"): item.get("template") for item in template if isinstance(item, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def read_chat_template(model_dir: Path) -> str | None:
    """The chat template in a model directory's files: ``chat_template.jinja``, else
    ``tokenizer_config.json``'s ``chat_template``, else a processor's ``chat_template.json``."""
    jinja_file = model_dir / "chat_template.jinja"
    try:
        return jinja_file.read_text(encoding="utf-8")
    except (OSError, ValueError):
        pass
    return _template_of(_load(model_dir / "tokenizer_config.json")) or _template_of(
        _load(model_dir / "chat_template.json")
    )


def read_special_tokens(model_dir: Path) -> frozenset[str]:
    """The texts of the tokens the tokenizer files mark special (``tokenizer_config.json``'s
    ``added_tokens_decoder``, ``tokenizer.json``'s ``added_tokens``)."""
    tokens: set[str] = set()
    config = _load(model_dir / "tokenizer_config.json")
    if isinstance(config, dict) and isinstance(config.get("added_tokens_decoder"), dict):
        for entry in config["added_tokens_decoder"].values():
            if isinstance(entry, dict) and entry.get("special") and isinstance(entry.get("content"), str):
                tokens.add(entry["content"])
    tokenizer = _load(model_dir / "tokenizer.json")
    if isinstance(tokenizer, dict) and isinstance(tokenizer.get("added_tokens"), list):
        for entry in tokenizer["added_tokens"]:
            if isinstance(entry, dict) and entry.get("special") and isinstance(entry.get("content"), str):
                tokens.add(entry["content"])
    tokens.discard("")
    return frozenset(tokens)
