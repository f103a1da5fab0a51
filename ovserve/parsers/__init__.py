"""Tool-call and reasoning parsers, one registry keyed by the names graphs use.

``tool_parser`` / ``reasoning_parser`` in a graph pick the format; when ``tool_parser`` is unset
it is detected from the chat template (what the template teaches the model to write).
"""

from __future__ import annotations

from ovserve.parsers import (
    deepseek,
    devstral,
    gemma4,
    glm4,
    gptoss,
    granite,
    hermes,
    kimi,
    llama3,
    minicpm,
    minicpm5,
    mistral,
    phi4,
    pythonic,
    qwen3coder,
)
from ovserve.parsers.base import ReasoningFormat, ToolCallFormat

TOOL_PARSERS: dict[str, ToolCallFormat] = {
    "hermes3": hermes.FORMAT,
    "qwen3": hermes.FORMAT,  # Qwen 2.5 / 3 use the Hermes format
    "qwen3coder": qwen3coder.FORMAT,  # also Qwen3.5 / Qwen3.6 and MiniCPM-V 4.6
    "glm4": glm4.FORMAT,
    "glm45": glm4.FORMAT,  # GLM-4.5 / 4.6 (vLLM's and SGLang's name)
    "glm47": glm4.FORMAT_47,  # GLM-4.7: the same without newlines between the tags
    "minicpm": minicpm.FORMAT,  # MiniCPM3 / MiniCPM4
    "minicpm5": minicpm5.FORMAT,  # MiniCPM5 (OVMS's, vLLM's and SGLang's name)
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

_THINK = ReasoningFormat(name="qwen3", start="<think>", end="</think>")
REASONING_PARSERS: dict[str, ReasoningFormat] = {
    "qwen3": _THINK,
    "minicpm5": _THINK,  # OVMS's name for MiniCPM5's <think> (its parser reads the same tokens)
    # MiniCPM3 / MiniCPM4's thought before a call (MiniCPM4.1's hybrid reasoning is qwen3's <think>).
    "minicpm": ReasoningFormat(
        name="minicpm",
        start="<|thought_start|>",
        end="<|thought_end|>",
        special_tokens=("<|thought_start|>", "<|thought_end|>"),
    ),
    "gptoss": gptoss.REASONING_FORMAT,
    "gemma4": gemma4.REASONING_FORMAT,
    "deepseek_r1": deepseek.REASONING_FORMAT,
    "mistral": mistral.REASONING_FORMAT,
    "granite": granite.REASONING_FORMAT,
}

# Template fragments -> parser: what the chat template tells the model to emit (every fragment of
# an entry must be in the template). The first match wins: XML-style templates also contain
# "<tool_call>", so they come before Hermes; Granite 4's template holds both <tool_call> and
# <|tool_call|> and writes Hermes calls; v11+ Mistral templates write name[ARGS]{...} after
# [TOOL_CALLS]; MiniCPM and LFM2 both open calls with <|tool_call_start|>, MiniCPM's in a code block.
_TEMPLATE_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<parameter=",), "qwen3coder"),
    (("</arg_key><arg_value>",), "glm47"),
    (("<arg_key>",), "glm45"),
    (("<|tool_call_start|>", "```python"), "minicpm"),
    (("<param name=",), "minicpm5"),
    (("<tool_call>",), "hermes3"),
    (("[ARGS]",), "devstral"),
    (("[TOOL_CALLS]",), "mistral"),
    (("functools",), "phi4"),
    (("<|python_tag|>",), "llama3"),
    (("<|channel|>",), "gptoss"),  # harmony headers
    (("<|tool_call>call:",), "gemma4"),  # what llama.cpp's common/chat.cpp detects Gemma 4 by
    (("<｜tool▁calls▁begin｜>",), "deepseek_v31"),
    (("<|tool_calls_section_begin|>",), "kimi_k2"),
    (("<|tool_call_start|>",), "lfm2"),
    (("<|tool_call|>",), "granite"),
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
    for fragments, name in _TEMPLATE_HINTS:
        if chat_template and all(fragment in chat_template for fragment in fragments):
            return TOOL_PARSERS[name]
    return None
