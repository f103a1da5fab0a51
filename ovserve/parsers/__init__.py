"""Tool-call and reasoning parsers, one registry keyed by the names graphs use.

``tool_parser`` / ``reasoning_parser`` in a graph pick the format; when ``tool_parser`` is unset
it is detected from the chat template (what the template teaches the model to write).
"""

from __future__ import annotations

from ovserve.parsers import deepseek, devstral, gemma4, gptoss, granite, hermes, kimi, llama3, mistral, phi4, pythonic
from ovserve.parsers.base import ReasoningFormat, ToolCallFormat

TOOL_PARSERS: dict[str, ToolCallFormat] = {
    "hermes3": hermes.FORMAT,
    "qwen3": hermes.FORMAT,  # Qwen 2.5 / 3 use the Hermes format
    "qwen3coder": hermes.FORMAT,
    "llama3": llama3.FORMAT,
    "mistral": mistral.FORMAT,
    "phi4": phi4.FORMAT,
    "gptoss": gptoss.FORMAT,
    "gemma4": gemma4.FORMAT,
    "deepseek_v31": deepseek.TOOL_FORMAT,
    "kimi_k2": kimi.FORMAT,
    "pythonic": pythonic.FORMAT,
    "llama4_pythonic": pythonic.FORMAT,  # vLLM's name for Llama 4's pythonic calls
    "lfm2": pythonic.FORMAT,  # OVMS's name; LFM2 writes the list between <|tool_call_start|> and <|tool_call_end|>
    "devstral": devstral.FORMAT,
    "granite": granite.TOOL_FORMAT,
}

REASONING_PARSERS: dict[str, ReasoningFormat] = {
    "qwen3": ReasoningFormat(name="qwen3", start="<think>", end="</think>"),
    "gptoss": gptoss.REASONING_FORMAT,
    "gemma4": gemma4.REASONING_FORMAT,
    "deepseek_r1": deepseek.REASONING_FORMAT,
    "mistral": mistral.REASONING_FORMAT,
    "granite": granite.REASONING_FORMAT,
}

# Template fragment -> parser: what the chat template tells the model to emit.
# First match wins: Granite 4's template holds both <tool_call> and <|tool_call|> and writes Hermes
# calls; v11+ Mistral templates write name[ARGS]{...} after [TOOL_CALLS].
_TEMPLATE_HINTS: tuple[tuple[str, str], ...] = (
    ("<tool_call>", "hermes3"),
    ("[ARGS]", "devstral"),
    ("[TOOL_CALLS]", "mistral"),
    ("functools", "phi4"),
    ("<|python_tag|>", "llama3"),
    ("<|channel|>", "gptoss"),  # harmony headers
    ("<|tool_call>call:", "gemma4"),  # what llama.cpp's common/chat.cpp detects Gemma 4 by
    ("<｜tool▁calls▁begin｜>", "deepseek_v31"),
    ("<|tool_calls_section_begin|>", "kimi_k2"),
    ("<|tool_call_start|>", "lfm2"),
    ("<|tool_call|>", "granite"),
)


class UnknownParserError(ValueError):
    pass


def tool_parser(name: str) -> ToolCallFormat:
    try:
        return TOOL_PARSERS[name]
    except KeyError:
        raise UnknownParserError(f"unknown tool_parser '{name}' (known: {', '.join(sorted(TOOL_PARSERS))})") from None


def reasoning_parser(name: str) -> ReasoningFormat:
    try:
        return REASONING_PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(REASONING_PARSERS))
        raise UnknownParserError(f"unknown reasoning_parser '{name}' (known: {known})") from None


def detect_tool_parser(chat_template: str | None) -> ToolCallFormat | None:
    for fragment, name in _TEMPLATE_HINTS:
        if chat_template and fragment in chat_template:
            return TOOL_PARSERS[name]
    return None
